"""Caches written by dataset-rt 0.4 (format 3) load as they are on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_drt as drt

dataset_rt = pytest.importorskip("dataset_rt")


class Legacy:
    def __init__(self, name: str, n: int) -> None:
        self.name = name
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield dataset_rt.CacheInput(
                data=bytes([i % 256]) * (i * 13 % 300 + 1),
                metadata={"label": i, "flag": i % 3 == 0, "score": i / 7, "tag": f"é{i}"},
            )


@pytest.fixture(params=["none", "lz4"])
def legacy_cache(request, tmp_path: Path) -> Path:
    rt = dataset_rt.DatasetRuntime(num_workers=1)
    algo = request.param
    compression = dataset_rt.ShardCompression(algo=algo, ratio=1.0 if algo == "none" else 2.0)
    cfg = dataset_rt.WriterConfig(show_progress=False, shard_compression=compression, max_shard_bytes=4096)
    (res,) = rt.write_cache([Legacy(f"legacy_{algo}", 120)], tmp_path, writer_config=cfg)
    assert isinstance(res, dataset_rt.CacheWriteSuccess), res
    return res.path


def test_reads_dataset_rt_format_3_payloads_metadata_and_ids(legacy_cache):
    theirs = dataset_rt.DatasetRuntime(num_workers=1).cached_dataset(
        [legacy_cache], reader_config=dataset_rt.ReaderConfig(seed=0, shuffle=False)
    )
    ours = drt.DatasetRuntime(1).cached_dataset(
        [legacy_cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False, validate_cache=True)
    )
    expected = [(s.data, s.metadata, s.cache_id, s.sample_id) for s in theirs]
    got = [(s.data, s.metadata, s.cache_id, s.sample_id) for s in ours]
    assert got == expected
    assert ours.layouts[0].legacy and ours.layouts[0].format_version == 3
    assert len(ours.layouts[0].shards) > 1
    assert ours.get_metadata().column_names == theirs.get_metadata().columns


def test_dataset_rt_cache_reuse_by_from_cache_sources(legacy_cache):
    rt = drt.DatasetRuntime(1)
    res = rt.from_cache_sources(
        [Legacy(legacy_cache.name, 5)],
        legacy_cache.parent,
        reader_config=drt.ReaderConfig(seed=0, shuffle=False),
        writer_config=drt.WriterConfig(show_progress=False),
    )
    assert len(res) == 120  # reused as it is, not rebuilt


def test_tampered_dataset_rt_shard_fails_checksum(legacy_cache):
    shard = sorted((legacy_cache / "shards").iterdir())[0]
    body = bytearray(shard.read_bytes())
    body[-1] ^= 1
    shard.write_bytes(bytes(body))
    with pytest.raises(drt.CacheCorruptError, match="checksum mismatch") as info:
        drt.DatasetRuntime(1).cached_dataset(
            [legacy_cache], reader_config=drt.ReaderConfig(seed=0, validate_cache=True)
        )
    assert info.value.path == shard
