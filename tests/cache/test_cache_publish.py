"""Publishing: reuse, killed writers (real SIGKILL) and two processes building one cache at once."""

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

import torch_drt as drt
from torch_drt.cache.validate import is_complete_cache, open_cache
from torch_drt.publish import staging_name_of

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
TESTS = Path(__file__).resolve().parents[1]  # the helpers (conftest, ...) live in tests/

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    import torch_drt as drt
    from conftest import ListSource

    class Slow(ListSource):
        def __iter__(self):
            for i, item in enumerate(super().__iter__()):
                if i == 50:
                    Path({ready!r}).touch()
                if i >= 50:
                    time.sleep({delay})
                yield item

    rt = drt.DatasetRuntime(1)
    out = rt.from_cache_sources([Slow("k", {n})], Path({root!r}), reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=64))
    print(type(out).__name__, len(out))
    """
)


def _writer(root: Path, ready: Path, n: int = 200, delay: float = 0.0) -> subprocess.Popen:
    code = WRITER.format(tests=str(TESTS), ready=str(ready), root=str(root), n=n, delay=delay)
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_reuse_does_not_rewrite_a_complete_cache(runtime, tmp_path):
    first = runtime.from_cache_sources([ListSource("a", 4)], tmp_path, reader_config=SEQ, writer_config=QUIET)
    inode = (tmp_path / "a" / "manifest.json").stat().st_ino
    second = runtime.from_cache_sources(
        [ListSource("a", 99), ListSource("b", 2)], tmp_path, reader_config=SEQ, writer_config=QUIET
    )
    assert isinstance(first, drt.CachedDataset) and isinstance(second, drt.CachedDataset)
    assert (tmp_path / "a" / "manifest.json").stat().st_ino == inode
    assert len(second) == 4 + 2  # the reused cache keeps its 4 samples


def test_a_bare_directory_is_not_reused(runtime, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("keep me")
    res = runtime.from_cache_sources([ListSource("a", 3)], tmp_path, reader_config=SEQ, writer_config=QUIET)
    assert len(res) == 3
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".invalid-a-")]
    assert (aside[0] / "notes.txt").read_text() == "keep me"  # moved aside, never deleted


def test_from_cache_sources_raises_on_partial_and_total_failure(runtime, tmp_path):
    class Empty:
        name = "empty"

        def __iter__(self):
            return iter(())

    # a partial failure is not a smaller dataset: it raises, with every source's outcome and the written caches
    with pytest.raises(drt.CacheSourcesError, match="1 of 2 sources have no cache") as info:
        runtime.from_cache_sources([ListSource("a", 3), Empty()], tmp_path, reader_config=SEQ, writer_config=QUIET)
    assert info.value.results == [
        drt.CacheWriteSuccess("a", tmp_path / "a"),
        drt.CacheWriteError("empty", "cache source yielded no samples"),
    ]
    assert info.value.paths == [tmp_path / "a"]
    assert len(runtime.cached_dataset(info.value.paths, reader_config=SEQ)) == 3
    with pytest.raises(drt.CacheSourcesError, match="empty: cache source yielded no samples"):
        runtime.from_cache_sources([Empty()], tmp_path / "x", reader_config=SEQ, writer_config=QUIET)
    with pytest.raises(ValueError, match="at least one source"):
        runtime.from_cache_sources([], tmp_path / "y", reader_config=SEQ)


def test_killed_writer_leaves_nothing_loadable_and_is_rebuilt(runtime, tmp_path):
    ready = tmp_path / "ready"
    proc = _writer(tmp_path / "root", ready, delay=0.05)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    root = tmp_path / "root"
    assert not (root / "k").exists()
    staging = [p for p in root.iterdir() if staging_name_of(p.name) == "k"]
    assert len(staging) == 1 and not is_complete_cache(staging[0])
    res = runtime.from_cache_sources([ListSource("k", 200)], root, reader_config=SEQ, writer_config=QUIET)
    assert [s.data for s in res] == [payload(i) for i in range(200)]
    assert not [
        p for p in root.iterdir() if p.name.startswith(".staging-")
    ]  # the dead writer's staging is gone
    open_cache(root / "k", verify=True)


def test_two_processes_building_the_same_cache_end_with_one_valid_cache(tmp_path):
    procs = [_writer(tmp_path / "root", tmp_path / f"ready{i}") for i in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for out, _ in outputs:
        assert out.strip() == "CachedDataset 200"
    root = tmp_path / "root"
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["k"]
    assert not [p for p in root.iterdir() if p.name.startswith((".staging-", ".invalid-"))]
    open_cache(root / "k", verify=True)
