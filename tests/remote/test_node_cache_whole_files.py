"""A process waiting for another process's download of a node-cache file gets its bytes once they are all in
(``NodeCache.fetch(whole=...)``, ``nodecache._whole_files``), before that download's sync, check and rename: a
loading process's first batch does not wait for its parent's SHA-256 of the shards. What a planted file in the
download directory holds is never delivered unless it is a regular file of the expected size, and reading it never
blocks."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import s3fs
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401
from remote_servers import s3_options

import torch_drt as drt
from torch_drt.locations._remote_file import RemoteFile
from torch_drt.nodecache._whole_files import SUFFIX, WholeLook
from torch_drt.nodecache.node_cache import NodeCache

pytestmark = pytest.mark.timeout(120)
DATA = bytes(range(256)) * 64  # 16 KiB


class Receiver:
    """Takes the bytes while ``wanted`` is set."""

    def __init__(self, wanted: bool = True) -> None:
        self.got: list[bytes] = []
        self.arrived = threading.Event()
        self.wanted_now = wanted

    def wanted(self) -> bool:
        return self.wanted_now

    def take(self, data: bytes) -> None:
        self.got.append(data)
        self.arrived.set()


def _download(directory: str, marker: str) -> None:
    """Another process's download of ``sha256-k``: its check waits until ``marker`` says ``go on``."""

    def check(path: Path) -> None:
        Path(marker).write_text("checking")
        while Path(marker).read_text() != "go on":
            time.sleep(0.01)

    NodeCache(directory, 1 << 20).fetch("sha256-k", len(DATA), lambda fd: os.pwrite(fd, DATA, 0), check, "s3://b/k")


def _wait_for(marker: Path, text: str, process) -> None:
    deadline = time.monotonic() + 60
    while not marker.exists() or marker.read_text() != text:
        assert process.is_alive() and time.monotonic() < deadline, f"the downloader did not reach {text!r}"
        time.sleep(0.01)


def test_a_waiting_process_gets_the_bytes_before_the_downloads_check_and_rename(tmp_path):
    directory, marker = tmp_path / "node", tmp_path / "marker"
    cache = NodeCache(directory, 1 << 20)  # made by this process: the child finds it private and its own user's
    downloader = multiprocessing.get_context("fork").Process(target=_download, args=(str(directory), str(marker)))
    downloader.start()
    receiver = Receiver(wanted=False)
    ended: list[bool] = []
    try:
        _wait_for(marker, "checking", downloader)  # its bytes are written; its check has not ended
        assert not cache.has("sha256-k", len(DATA))

        def fetch() -> None:
            ended.append(cache.fetch("sha256-k", len(DATA), _never, _never, "s3://b/k", whole=receiver))

        waiter = threading.Thread(target=fetch, daemon=True)
        waiter.start()
        assert not receiver.arrived.wait(0.5)  # nobody wants them yet: not read
        receiver.wanted_now = True  # a read waits for them now
        assert receiver.arrived.wait(60), "the waiter did not get the bytes of the download in flight"
        assert receiver.got == [DATA]
        assert waiter.is_alive() and not cache.has("sha256-k", len(DATA))  # the download has not ended yet
        marker.write_text("go on")
        waiter.join(60)
        assert ended == [True] and receiver.got == [DATA]  # taken once; the verified file is here now
        assert cache.path("sha256-k").read_bytes() == DATA
    finally:
        marker.write_text("go on")
        downloader.join(60)
    assert downloader.exitcode == 0
    assert not list((directory / "tmp").iterdir())  # the whole file was renamed into data/


def _never(*args) -> None:
    raise AssertionError("the waiter downloaded or checked the file itself")


def _look(tmp_dir: Path, receiver: Receiver) -> WholeLook:
    return WholeLook(tmp_dir, "sha256-k", len(DATA), receiver)


def test_only_a_regular_file_of_the_expected_size_is_delivered(tmp_path):
    tmp_dir, receiver = tmp_path / "tmp", Receiver()
    got = receiver.got
    tmp_dir.mkdir()
    look = _look(tmp_dir, receiver)
    look()
    assert got == [] and not look.done  # nothing whole yet
    (tmp_dir / "sha256-k.123.abc").write_bytes(DATA)  # a download still being written: not whole
    (tmp_dir / f"sha256-other.123.abc{SUFFIX}").write_bytes(DATA)  # another file's
    (tmp_dir / f"sha256-k.124.abc{SUFFIX}").write_bytes(DATA[:-1])  # not the expected size
    look()
    assert got == []
    (tmp_dir / f"sha256-k.125.abc{SUFFIX}").write_bytes(DATA)
    look()
    look()
    assert got == [DATA] and look.done  # once


def test_a_planted_fifo_or_link_is_not_read(tmp_path):
    tmp_dir, receiver = tmp_path / "tmp", Receiver()
    tmp_dir.mkdir()
    os.mkfifo(tmp_dir / f"sha256-k.1.a{SUFFIX}")  # opening a FIFO to read would wait for a writer for ever
    secret = tmp_path / "secret"
    secret.write_bytes(DATA)
    (tmp_dir / f"sha256-k.2.b{SUFFIX}").symlink_to(secret)  # a link to another file is not followed
    look = _look(tmp_dir, receiver)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (look(), done.set()), daemon=True)
    thread.start()
    assert done.wait(60), "reading a planted FIFO blocked"
    assert receiver.got == []


def test_a_missing_download_directory_delivers_nothing(tmp_path):
    receiver = Receiver()
    _look(tmp_path / "gone", receiver)()
    assert receiver.got == []


def _opened(runtime, tmp_path, moto_endpoint, proxy) -> tuple[drt.CachedDataset, str, list[bytes]]:
    """A one-shard cache of 40 records on moto, opened with an empty node cache; its URL and records (read through
    another node cache: nothing of this one is in flight)."""
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=40, max_shard_bytes=1 << 20, payload_bytes=64)
    seq = drt.ReaderConfig(seed=0, shuffle=False)
    other = runtime.cached_dataset(url, reader_config=seq, storage_options=options(proxy),
                                   remote_config=remote_config(tmp_path / "other"))
    expected = [bytes(s.data) for s in other]
    ds = runtime.cached_dataset(url, reader_config=seq, storage_options=options(proxy),
                                remote_config=remote_config(tmp_path / "node"))
    return ds, url, expected


def _read_in_a_child_during_the_parents_check(ds: drt.CachedDataset, tmp_path: Path, monkeypatch, proxy,
                                              child: Callable[[], int]) -> tuple[int, list]:
    """The parent downloads the cache's shard, its SHA-256 held until a forked child ran ``child()`` (the child's
    exit code) with every byte written; returns that exit code and the download's outcome (True or an error).
    The shard is requested once: the child read the parent's bytes, it did not request its own."""
    (shard,) = ds.reader._caches[0].shards
    assert not shard.present()
    proxy.reset()
    marker = tmp_path / "marker"
    check = RemoteFile._check

    def slow_check(self, path):  # the parent's SHA-256 waits until the child has read
        marker.write_text("checking")
        deadline = time.monotonic() + 60
        while marker.read_text() != "go on" and time.monotonic() < deadline:
            time.sleep(0.01)
        marker.write_text("checked")
        check(self, path)

    monkeypatch.setattr(RemoteFile, "_check", slow_check)
    outcome: list = []

    def fetch() -> None:
        try:
            outcome.append(shard.fetch())
        except BaseException as e:
            outcome.append(e)

    fetcher = threading.Thread(target=fetch, daemon=True)
    fetcher.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and not outcome, f"the download did not reach its check: {outcome}"
        time.sleep(0.01)
    pid = os.fork()
    if pid == 0:  # the child: the parent's download has all its bytes; its check has not ended
        code = 3
        try:
            code = child() if marker.read_text() == "checking" else 4
            code = code if marker.read_text() == "checking" else 5  # what it read came before the check ended
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        marker.write_text("go on")
        fetcher.join(60)
    assert [n for path, n in proxy.gets.items() if path.endswith(shard.rel)] == [1]
    return os.waitstatus_to_exitcode(status), outcome


def test_a_forked_reader_reads_its_parents_download_before_the_parents_check(
        runtime, tmp_path, moto_endpoint, proxy, monkeypatch):
    """End to end on moto: a loading process's read of a shard its parent downloads gets the records (checked, the
    right ones) while the parent's SHA-256 of the shard has not ended."""
    ds, _, expected = _opened(runtime, tmp_path, moto_endpoint, proxy)

    def child() -> int:
        got = ds.reader.read_many(np.zeros(40, dtype=np.int64), np.arange(40))
        return 0 if [bytes(d) for d in got] == expected else 1

    code, outcome = _read_in_a_child_during_the_parents_check(ds, tmp_path, monkeypatch, proxy, child)
    assert code == 0 and outcome == [True]
    assert ds.reader._caches[0].shards[0].present()


def test_a_forked_reader_given_damaged_bytes_by_its_parents_download_gets_a_typed_error(
        runtime, tmp_path, moto_endpoint, proxy, monkeypatch):
    """The shard on S3 is damaged (one byte of record 5, same size): the child, handed the download's bytes before
    the parent's SHA-256, finds the record's checksum wrong and raises ``CacheCorruptError`` naming the shard and
    the sample, with no endpoint or credentials in it; the parent's download fails its SHA-256; nothing is kept."""
    ds, url, _ = _opened(runtime, tmp_path, moto_endpoint, proxy)
    cache = ds.reader._caches[0]
    fs = s3fs.S3FileSystem(**s3_options(moto_endpoint))
    key = f"{url[len('s3://'):]}/{cache.shards[0].rel}"
    data = bytearray(fs.cat_file(key))
    data[int(cache.index["offset"][5]) + 3] ^= 0x10
    fs.pipe_file(key, bytes(data))

    def child() -> int:
        try:
            ds.reader.read_many(np.zeros(40, dtype=np.int64), np.arange(40))
        except drt.CacheCorruptError as e:
            text = str(e)
            named = cache.shards[0].rel in text and "sample 5" in text
            return 0 if named and "127.0.0.1" not in text and "testing" not in text else 6
        return 1  # damaged records returned

    code, outcome = _read_in_a_child_during_the_parents_check(ds, tmp_path, monkeypatch, proxy, child)
    assert code == 0
    assert len(outcome) == 1 and isinstance(outcome[0], drt.CacheCorruptError)
    assert not cache.shards[0].present()
