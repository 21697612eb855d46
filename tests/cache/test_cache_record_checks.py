"""``record_checks="first_read"`` (issue 26): a local cache's record is hashed on its first read in a process only.

What stays checked: every record before its bytes are first returned (on every read path, in loading processes
too), the size of every file at every gather (truncation is an error, never SIGBUS). What the mode trusts, and
these tests pin down as documented: bytes rewritten in place after a record's first read.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pydantic
import pytest
from conftest import QUIET, read_after_truncation
from remote_fixtures import downloaded, moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.cache._verified import VerifiedRecords
from torch_drt.cache.reader import CacheReader

WIDTH = 16


class Fixed:
    name = "fixed"

    def __iter__(self):
        for i in range(8):
            yield drt.CacheInput(bytes([i]) * WIDTH, {"i": i})


def _config(checks: str | None) -> drt.ReaderConfig:
    return drt.ReaderConfig(seed=0, shuffle=False, record_checks=checks)


@pytest.fixture
def cache(tmp_path, runtime) -> Path:
    (res,) = runtime.write_cache([Fixed()], tmp_path / "c", writer_config=QUIET)
    return res.path


def _flip(shard: Path, sample: int) -> None:
    """Flip a bit of ``sample``'s record in place (the same file, the same size)."""
    with open(shard, "r+b") as f:
        f.seek(WIDTH * sample + 3)
        byte = f.read(1)[0]
        f.seek(WIDTH * sample + 3)
        f.write(bytes([byte ^ 0x10]))


def test_a_damaged_record_is_an_error_on_its_first_read_on_every_path(cache, runtime):
    _flip(cache / "shards" / "000000.bin", 5)
    ds = runtime.cached_dataset([cache], reader_config=_config("first_read"))
    assert ds.reader.record_checks == "first_read"
    cache_id = ds.layouts[0].cache_id
    assert [ds.get_item(cache_id, i).data for i in range(5)] == [bytes([i]) * WIDTH for i in range(5)]
    reads = {
        "iteration": lambda: list(ds),
        "iter_batches": lambda: list(ds.iter_batches(3)),
        "get_item": lambda: ds.get_item(cache_id, 5),
        "read_into": lambda: ds.reader.read_into(np.zeros(8, np.int32), np.arange(8), np.zeros((8, WIDTH), np.uint8)),
        "loader": lambda: list(ds.to_torch_dataloader(batch_size=4, shuffle=False, num_workers=0)),
    }
    for name, read in reads.items():  # a failed record is never taken for verified: every read refuses it
        with pytest.raises(drt.CacheCorruptError, match="sample 5: record fails its checksum"):
            read()
        assert ds.get_item(cache_id, 4).data == bytes([4]) * WIDTH, name


def test_a_damaged_record_is_an_error_in_loading_processes(cache, runtime):
    _flip(cache / "shards" / "000000.bin", 6)
    ds = runtime.cached_dataset([cache], reader_config=_config("first_read"))
    loader = ds.to_torch_dataloader(batch_size=4, shuffle=False, num_workers=1, multiprocessing_context="fork")
    with pytest.raises(drt.CacheCorruptError, match="sample 6: record fails its checksum"):
        list(loader)


def test_the_setting_travels_to_loading_processes(cache, runtime):
    """A loading process opens its own reader with the dataset's record checks (the fetcher and the reader
    pickle with them)."""
    ds = runtime.cached_dataset([cache], reader_config=_config("first_read"))
    assert pickle.loads(pickle.dumps(ds.reader)).record_checks == "first_read"
    loader = ds.to_torch_dataloader(batch_size=4, shuffle=False, num_workers=0)
    fetcher = pickle.loads(pickle.dumps(loader._mode.fetcher))
    fetcher._open()
    assert fetcher._reader is not ds.reader and fetcher._reader.record_checks == "first_read"
    assert fetcher._reader._caches[0].verified is not None
    plain = runtime.cached_dataset([cache], reader_config=_config(None))
    assert plain.reader.record_checks == "every_read" and plain.reader._caches[0].verified is None


@pytest.mark.parametrize(("checks", "after"), [("every_read", "error"), ("first_read", "rewritten bytes")])
def test_what_each_mode_checks_after_a_records_first_read(cache, runtime, checks, after):
    """The documented difference: bytes rewritten in place after a record was read are refused on every read,
    and returned unhashed once the record was verified in this process."""
    ds = runtime.cached_dataset([cache], reader_config=_config(checks))
    cache_id = ds.layouts[0].cache_id
    assert ds.get_item(cache_id, 5).data == bytes([5]) * WIDTH
    _flip(cache / "shards" / "000000.bin", 5)
    if after == "error":
        with pytest.raises(drt.CacheCorruptError, match="sample 5: record fails its checksum"):
            ds.get_item(cache_id, 5)
    else:
        assert ds.get_item(cache_id, 5).data != bytes([5]) * WIDTH
    with pytest.raises(drt.CacheCorruptError, match="sample 6: record fails its checksum"):  # first read of 6
        _flip(cache / "shards" / "000000.bin", 6)
        ds.get_item(cache_id, 6)


def test_a_replaced_shard_leaves_the_verified_mapping_intact(cache, runtime, tmp_path):
    """A shard replaced by a rename after the first read: this process keeps reading the file it mapped."""
    ds = runtime.cached_dataset([cache], reader_config=_config("first_read"))
    expected = [s.data for s in ds]
    shard = cache / "shards" / "000000.bin"
    damaged = tmp_path / "damaged.bin"
    shutil.copy(shard, damaged)
    _flip(damaged, 2)
    os.replace(damaged, shard)
    assert [s.data for s in ds] == expected


def test_a_shard_truncated_after_the_first_read_is_an_error_not_sigbus(cache):
    proc = read_after_truncation(cache, "shards/000000.bin", 10, record_checks="first_read", read_first=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-1000:])
    assert proc.stdout.startswith("CacheCorruptError") and "truncated?" in proc.stdout


def test_settings_are_validated_and_dumped_only_when_set(cache):
    with pytest.raises(ValueError, match="record_checks='sometimes' must be one of"):
        CacheReader.open([cache], record_checks="sometimes")
    with pytest.raises(pydantic.ValidationError, match="record_checks"):
        drt.ReaderConfig(seed=0, record_checks="sometimes")
    assert "record_checks" not in drt.ReaderConfig(seed=0).model_dump()
    assert drt.ReaderConfig(seed=0, record_checks="first_read").model_dump()["record_checks"] == "first_read"


def test_verified_records_bits():
    bits = VerifiedRecords(13)
    assert bits.unchecked(np.arange(13)).tolist() == list(range(13))
    bits.mark(np.array([0, 7, 8, 12, 12]))
    assert bits.unchecked(np.array([12, 1, 7, 8, 0, 9])).tolist() == [1, 5]
    assert [bits.unchecked(np.array([i])).tolist() for i in (0, 1, 7, 8, 11, 12)] == [[], [0], [], [], [0], []]
    bits.forget()
    assert bits.unchecked(np.array([0, 12])).tolist() == [0, 1]


def test_caches_at_urls_are_checked_on_every_read(runtime, tmp_path, moto_endpoint, proxy):
    """``first_read`` trusts local maps only: a node-cache copy damaged after its first read is still found by the
    record checks (and fetched anew), not returned."""
    local, url = publish_local(runtime, tmp_path, moto_endpoint, n=40, max_shard_bytes=400)
    config = remote_config(tmp_path)
    expected = [s.data for s in runtime.cached_dataset(local, reader_config=_config(None))]
    ds = runtime.cached_dataset(url, reader_config=_config("first_read"), storage_options=options(proxy),
                                remote_config=config)
    assert [s.data for s in ds] == expected
    downloaded(ds)  # (a read that waited for a download took its bytes before the copy was renamed in)
    assert [s.data for s in ds] == expected  # from the node cache's maps
    shard = sorted((local / "shards").iterdir())[0]
    copy = Path(config.cache_dir) / "data" / f"sha256-{hashlib.sha256(shard.read_bytes()).hexdigest()}"
    body = bytearray(copy.read_bytes())
    body[len(body) // 2] ^= 0xFF
    with open(copy, "r+b") as f:  # in place: the reader's map of the copy sees it
        f.write(body)
    assert [s.data for s in ds] == expected
    assert copy.read_bytes() == shard.read_bytes()  # fetched anew
