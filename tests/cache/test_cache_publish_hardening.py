"""Writer and publish faults (issue 10): unambiguous staging, no unopenable caches, damaged targets moved aside."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import QUIET, ListSource, payload
from sync_events import record_sync_events

import torch_drt as drt
from torch_drt.cache import open_cache

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
TESTS = Path(__file__).resolve().parents[1]

SLOW_WRITER = """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    import torch_drt as drt
    from conftest import ListSource

    class Slow(ListSource):
        def __iter__(self):
            for i, item in enumerate(super().__iter__()):
                if i == 20:
                    Path({ready!r}).touch()
                    while not Path({go!r}).exists():
                        time.sleep(0.01)
                yield item

    rt = drt.DatasetRuntime(1)
    out = rt.{method}([Slow({name!r}, 40)], Path({root!r}), writer_config=drt.WriterConfig(show_progress=False){extra})
    print(out if "{method}" == "write_cache" else len(out))
"""


def _slow_writer(tmp_path: Path, name: str, method: str = "write_cache") -> tuple[subprocess.Popen, Path, Path]:
    ready, go = tmp_path / f"ready-{name}", tmp_path / f"go-{name}"
    extra = ", reader_config=drt.ReaderConfig(seed=0)" if method == "from_cache_sources" else ""
    code = textwrap.dedent(SLOW_WRITER).format(
        tests=str(TESTS),
        ready=str(ready),
        go=str(go),
        name=name,
        root=str(tmp_path / "root"),
        method=method,
        extra=extra,
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc, ready, go


@pytest.fixture
def slow_writer(tmp_path):
    """``_slow_writer`` in ``tmp_path``; a writer still waiting for its go file when the test ends (it failed) is
    killed, not left polling."""
    procs: list[subprocess.Popen] = []

    def start(name: str, method: str = "write_cache") -> tuple[subprocess.Popen, Path, Path]:
        started = _slow_writer(tmp_path, name, method)
        procs.append(started[0])
        return started

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_writer_never_removes_the_live_staging_of_a_name_that_extends_its_own(runtime, tmp_path, slow_writer):
    proc, _, go = slow_writer("ds-999999")  # its staging name ends in what looks like a dead pid
    (res,) = runtime.write_cache([ListSource("ds", 5)], tmp_path / "root", writer_config=QUIET)
    assert isinstance(res, drt.CacheWriteSuccess)
    go.touch()
    out, err = proc.communicate(timeout=120)
    assert "CacheWriteSuccess" in out, (out, err[-2000:])
    ds = runtime.cached_dataset([tmp_path / "root" / "ds-999999"], reader_config=SEQ)
    assert [s.data for s in ds] == [payload(i) for i in range(40)]


def test_a_dead_writers_staging_beside_a_complete_cache_is_cleaned(runtime, tmp_path, slow_writer):
    root = tmp_path / "root"
    proc, _, _ = slow_writer("k", method="from_cache_sources")
    first = runtime.from_cache_sources([ListSource("k", 40)], root, reader_config=SEQ, writer_config=QUIET)
    assert len(first) == 40
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert [p for p in root.iterdir() if p.name.startswith(".staging-")]  # the dead writer's half-written cache
    again = runtime.from_cache_sources([ListSource("k", 40)], root, reader_config=SEQ, writer_config=QUIET)
    assert len(again) == 40
    assert not [p for p in root.iterdir() if p.name.startswith(".staging-")]


class Payloads:
    def __init__(self, name: str, payloads: list[bytes]) -> None:
        self.name, self.payloads = name, payloads

    def __iter__(self):
        for i, data in enumerate(self.payloads):
            yield drt.CacheInput(data, {"i": i})


@pytest.mark.parametrize(
    "payloads",
    [[b"", b"", b""], [b"x" * 100, b"", b"yz"], [b"", b"x" * 100, b"", b""]],
    ids=["all empty", "empty after a record larger than a shard", "empty around a large record"],
)
def test_empty_payloads_publish_a_cache_that_opens(runtime, tmp_path, payloads):
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=64)
    (res,) = runtime.write_cache([Payloads("e", payloads)], tmp_path, writer_config=config)
    assert isinstance(res, drt.CacheWriteSuccess), res
    layout = open_cache(res.path, verify=True)
    assert len(layout.shards) == 1 or all(size > 0 for _, size in layout.shards)
    ds = runtime.cached_dataset([res.path], reader_config=SEQ)
    assert [s.data for s in ds] == payloads


def test_a_damaged_cache_whose_shards_dir_is_a_file_is_moved_aside(runtime, tmp_path, make_cache):
    path = make_cache("d", n=4, root=tmp_path)
    for shard in (path / "shards").iterdir():
        shard.unlink()
    (path / "shards").rmdir()
    (path / "shards").write_bytes(b"not a directory")
    res = runtime.from_cache_sources([ListSource("d", 4)], tmp_path, reader_config=SEQ, writer_config=QUIET)
    assert [s.data for s in res] == [payload(i) for i in range(4)]
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".invalid-d-")]


def test_every_file_and_directory_is_synced_before_the_publish_rename(runtime, tmp_path, monkeypatch):
    # durability of a published cache: each shard, the index, metadata and manifest, shards/ and the cache directory
    # are on disk before the rename that publishes them (the writer syncs them together, on several threads), and
    # the root after it
    events = record_sync_events(monkeypatch)
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=40)
    (res,) = runtime.write_cache([ListSource("f", 12)], tmp_path, writer_config=config)
    assert isinstance(res, drt.CacheWriteSuccess), res
    published = events.index(("renamed", "f"))
    synced = {key for kind, key in events[:published] if kind == "synced"}
    entries = [res.path, *res.path.rglob("*")]
    assert len(list((res.path / "shards").iterdir())) > 1 and len(entries) > 6
    assert [str(p) for p in entries if (p.stat().st_dev, p.stat().st_ino) not in synced] == []
    cache_dir = (res.path.stat().st_dev, res.path.stat().st_ino)  # synced once, with the files: no second flush
    assert events[:published].count(("synced", cache_dir)) == 1, events
    root = tmp_path.stat()
    assert ("synced", (root.st_dev, root.st_ino)) in events[published:]
