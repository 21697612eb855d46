"""A flipped byte in a shard on disk is a ``CacheCorruptError`` naming the shard and the sample at every read level
(issue 26): batched reads, per-sample reads, the cache loader in its own process and in 2 loading processes, with
either record check setting; with the default, also after the record was read intact in the same process.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from record_flips import flip_record_bit

import torch_drt as drt
from torch_drt.checksums import first_mismatch, record_checksums

WIDTH = 4096
COUNT = 48
DAMAGED = 37


class Records:
    name = "records"

    def __iter__(self):
        rng = np.random.default_rng(0)
        for i in range(COUNT):
            yield drt.CacheInput(rng.integers(0, 256, WIDTH, dtype=np.uint8).tobytes(), {"i": i})


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A cache of 48 x 4 KiB records in 4 shards, written once (copied by each test that damages it)."""
    rt = drt.DatasetRuntime(num_workers=1)
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=12 * WIDTH)
    (res,) = rt.write_cache([Records()], tmp_path_factory.mktemp("levels") / "c", writer_config=config)
    rt.close()
    return res.path


def _copy(written: Path, to: Path) -> Path:
    return Path(shutil.copytree(written, to / "c"))


def _flip(cache: Path, sample: int) -> Path:
    return flip_record_bit(cache, sample)


def _loader(ds, workers: int):
    extra = {"multiprocessing_context": "fork"} if workers else {}
    return ds.to_torch_dataloader(batch_size=8, shuffle=False, num_workers=workers, **extra)


LEVELS = {
    "batched": lambda ds: list(ds.iter_batches(16)),
    "per-sample iteration": lambda ds: list(ds),
    "per-sample get_item": lambda ds: ds.get_item(ds.layouts[0].cache_id, DAMAGED),
    "loader, 0 workers": lambda ds: list(_loader(ds, 0)),
    "loader, 2 workers": lambda ds: list(_loader(ds, 2)),
}


def _refused(read, ds, shard: Path) -> None:
    with pytest.raises(drt.CacheCorruptError, match=f"sample {DAMAGED}: record fails its checksum") as info:
        read(ds)
    assert Path(info.value.path) == shard
    assert str(shard) in str(info.value)


@pytest.mark.parametrize("checks", [None, "first_read"])
@pytest.mark.parametrize("level", list(LEVELS))
def test_a_flipped_byte_is_an_error_naming_shard_and_sample(written, tmp_path, runtime, checks, level):
    cache = _copy(written, tmp_path)
    shard = _flip(cache, DAMAGED)
    ds = runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False, record_checks=checks))
    _refused(LEVELS[level], ds, shard)
    assert ds.get_item(ds.layouts[0].cache_id, DAMAGED - 1).data != b""  # the others still read


@pytest.mark.parametrize("level", list(LEVELS))
def test_by_default_a_record_damaged_after_it_was_read_is_an_error(written, tmp_path, runtime, level):
    """The default checks every read: a record read intact once and then damaged in place is refused."""
    cache = _copy(written, tmp_path)
    ds = runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert ds.reader.record_checks == "every_read"
    intact = [s.data for s in ds]
    assert len(intact) == COUNT and sum(len(d) for b in ds.iter_batches(16) for d in b.data) == COUNT * WIDTH
    shard = _flip(cache, DAMAGED)
    _refused(LEVELS[level], ds, shard)


@pytest.mark.parametrize("checks", [None, "first_read"])
def test_the_first_damaged_record_of_a_gather_is_named(written, tmp_path, runtime, checks):
    cache = _copy(written, tmp_path)
    _flip(cache, DAMAGED)
    shard = _flip(cache, 20)
    ds = runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=False, record_checks=checks))
    with pytest.raises(drt.CacheCorruptError, match="sample 20: record fails its checksum") as info:
        list(ds.iter_batches(COUNT))
    assert Path(info.value.path) == shard


def test_first_mismatch():
    records = [bytes([i]) * (100 + i) for i in range(5)]
    sums = record_checksums(records, len(records))
    assert first_mismatch(records, sums) == -1
    assert first_mismatch([], np.empty(0, np.uint64)) == -1
    bad = sums.copy()
    bad[[3, 4]] ^= np.uint64(1)
    assert first_mismatch(records, bad) == 3
    assert first_mismatch([memoryview(r) for r in records], bad) == 3
    rows = np.frombuffer(b"".join(r[:100] for r in records), np.uint8).reshape(5, 100)  # read_into's rows
    assert first_mismatch(rows, record_checksums(rows, 5)) == -1
    assert first_mismatch(rows, sums) == 1  # row 0 is records[0]; row 1 is records[1] cut short
