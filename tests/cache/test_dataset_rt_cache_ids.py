"""dataset-rt 0.4.8 parity of the cache (issue 13 items 6, 8, 9): ids, get_item, update_metadata, validation, errors.

dataset-rt itself produces the expected values.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from conftest import QUIET, ListSource

import torch_drt as drt

dataset_rt = pytest.importorskip("dataset_rt")
pl = pytest.importorskip("polars")

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
NAMES = ["a", "b", "legacy_x", "tiles_v1", "x" * 200]


class Theirs:
    def __init__(self, name: str, n: int = 6, extra: dict | None = None) -> None:
        self.name, self.n, self.extra = name, n, extra or {}

    def __iter__(self):
        for i in range(self.n):
            yield dataset_rt.CacheInput(data=bytes([i]) * 50, metadata={"label": i, **self.extra})


def _theirs(tmp_path: Path, name: str, algo: str = "none", **kw) -> Path:
    compression = dataset_rt.ShardCompression(algo=algo, ratio=1.0 if algo == "none" else 2.0)
    cfg = dataset_rt.WriterConfig(show_progress=False, shard_compression=compression)
    (res,) = dataset_rt.DatasetRuntime(num_workers=1).write_cache(
        [Theirs(name, **kw)], tmp_path / "rt", writer_config=cfg
    )
    assert isinstance(res, dataset_rt.CacheWriteSuccess), res
    return Path(res.path)


def _their_dataset(path: Path):
    return dataset_rt.DatasetRuntime(num_workers=1).cached_dataset(
        [path], reader_config=dataset_rt.ReaderConfig(seed=0, shuffle=False)
    )


@pytest.mark.parametrize("name", NAMES)
def test_cache_ids_equal_dataset_rts_for_the_same_source_name(runtime, tmp_path, name):
    theirs = _theirs(tmp_path, name)
    (ours,) = runtime.write_cache([ListSource(name, 3)], tmp_path / "ours", writer_config=QUIET)
    expected = json.loads((theirs / "manifest.json").read_text())["cache_id"]
    assert drt.cache.open_cache(ours.path).cache_id == expected
    ds = runtime.cached_dataset([ours.path], reader_config=SEQ)
    assert set(ds.get_metadata().column("cache_id").to_pylist()) == {expected}
    assert expected == int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") & (2**63 - 1)


def test_a_dataset_rt_cache_with_a_64_bit_id_round_trips_its_table(runtime, tmp_path):
    path = _theirs(tmp_path, "a")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["cache_id"] = 2**64 - 3  # dataset-rt reads ids up to 2**64 - 1 from its manifests
    (path / "manifest.json").write_text(json.dumps(manifest))
    ds = runtime.cached_dataset([path], reader_config=SEQ)
    assert ds.layouts[0].cache_id == 2**64 - 3
    ds.update_metadata(ds.get_metadata())
    ds.update_metadata(pl.from_arrow(ds.get_metadata()))
    assert [s.metadata["label"] for s in ds] == list(range(6))


def _outcome(fn):
    try:
        fn()
    except Exception as e:
        return type(e).__name__
    return "ok"


def test_get_item_errors_are_dataset_rts(runtime, tmp_path):
    path = _theirs(tmp_path, "g")
    theirs, ours = _their_dataset(path), runtime.cached_dataset([path], reader_config=SEQ)
    cache_id = ours.layouts[0].cache_id
    cases = [(cache_id, 2), (cache_id + 1, 0), (cache_id, 6), (False, 0), (1.0, 0), (cache_id, True), (-1, 0)]
    for args in cases:
        assert _outcome(lambda a=args: ours.get_item(*a)) == _outcome(lambda a=args: theirs.get_item(*a)), args
    assert ours.get_item(cache_id, 2).data == theirs.get_item(cache_id, 2).data


def test_update_metadata_without_weight_is_refused_like_dataset_rt(runtime, tmp_path):
    path = _theirs(tmp_path, "w")
    theirs, ours = _their_dataset(path), runtime.cached_dataset([path], reader_config=SEQ)
    with pytest.raises(ValueError, match="weight"):
        theirs.update_metadata(theirs.get_metadata().drop("weight"))
    with pytest.raises(ValueError, match="column 'weight' is missing"):
        ours.update_metadata(ours.get_metadata().drop_columns(["weight"]))


def test_embedded_metadata_that_disagrees_with_metadata_arrow_is_reported_with_validation(runtime, tmp_path):
    path = _theirs(tmp_path, "j", algo="lz4")
    table = ipc.open_file(str(path / "metadata.arrow")).read_all()
    table = table.set_column(0, "label", pa.array([0, 1, 7, 3, 4, 5]))
    with ipc.new_file(str(path / "metadata.arrow"), table.schema) as w:
        w.write_table(table)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["metadata_sha256"] = hashlib.sha256((path / "metadata.arrow").read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))
    theirs = dataset_rt.DatasetRuntime(num_workers=1).cached_dataset(
        [path], reader_config=dataset_rt.ReaderConfig(seed=0, shuffle=False, validate_cache=True)
    )
    with pytest.raises(ValueError, match=r"embedded metadata does not match metadata\.arrow for sample 2"):
        list(theirs)  # dataset-rt reports it when the record is read; torch_drt when the cache is opened
    with pytest.raises(drt.CacheCorruptError, match=r"embedded metadata does not match metadata\.arrow for sample 2"):
        runtime.cached_dataset([path], reader_config=drt.ReaderConfig(seed=0, validate_cache=True))
    runtime.cached_dataset([path], reader_config=SEQ)  # structure only: it opens, as in dataset-rt


def test_corrupt_dataset_rt_caches_are_runtime_errors_too(runtime, tmp_path):
    path = _theirs(tmp_path, "c")
    shard = path / "shards" / "000000.bin"
    shard.write_bytes(shard.read_bytes()[:-5])
    try:
        runtime.cached_dataset([path], reader_config=SEQ)
    except RuntimeError as e:  # a dataset-rt user's handler
        assert isinstance(e, drt.CacheCorruptError) and isinstance(e, ValueError)
    else:
        pytest.fail("a truncated shard opened")


def test_a_metadata_key_named_sample_id_is_a_documented_refusal(runtime, tmp_path):
    path = _theirs(tmp_path, "s", extra={"sample_id": 1})  # dataset-rt writes it ...
    with pytest.raises(Exception, match="more than once"):
        _their_dataset(path).get_metadata()  # ... but cannot return its table
    with pytest.raises(ValueError, match=r"'sample_id'.*torch_drt cannot load it"):
        runtime.cached_dataset([path], reader_config=SEQ)
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache([Theirs("s", extra={"sample_id": 1})], tmp_path / "ours", writer_config=QUIET)
    (res,) = info.value.results
    assert isinstance(res, drt.CacheWriteError) and "'sample_id' is reserved" in res.message


def test_a_flipped_lz4_size_header_in_a_dataset_rt_record_is_bounded(runtime, tmp_path):
    path = _theirs(tmp_path, "z", algo="lz4")
    shard = path / "shards" / "000000.bin"
    body = bytearray(shard.read_bytes())
    json_len = int.from_bytes(body[:8], "little")
    body[8 + json_len + 3] ^= 0x40  # the LZ4 block's u32 size now claims about 1 GiB
    shard.write_bytes(bytes(body))
    manifest = json.loads((path / "manifest.json").read_text())
    ds = runtime.cached_dataset([path], reader_config=SEQ)
    with pytest.raises(drt.CacheCorruptError, match=r"sample 0: .*more than this cache's bound") as info:
        list(ds)
    assert str(manifest["shards"][0]["uncompressed_byte_len"]) in str(info.value)
    assert ds.get_item(ds.layouts[0].cache_id, 1).data == bytes([1]) * 50  # the other records still read
