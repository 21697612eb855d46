"""Shared fixtures: small sources and caches built with the real writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import torch_drt as drt

QUIET = drt.WriterConfig(show_progress=False)


def payload(i: int) -> bytes:
    """A deterministic payload of varying length for sample ``i``."""
    return bytes([i % 251]) * (i % 7 + 1) + i.to_bytes(4, "little")


class ListSource:
    """A source over ``n`` samples with label/flag/score/tag metadata."""

    def __init__(self, name: str, n: int, start: int = 0) -> None:
        self.name = name
        self.n = n
        self.start = start

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[drt.CacheInput]:
        for i in range(self.start, self.start + self.n):
            yield drt.CacheInput(payload(i), {"label": i, "flag": i % 2 == 0, "score": i / 4, "tag": f"t{i}"})


def rehash_manifest(path: Path) -> None:
    """Make a cache's manifest record the current checksums of its index and metadata (a consistent forgery)."""
    import hashlib
    import json

    import xxhash

    manifest = json.loads((path / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        entry.update(
            byte_len=len(data), sha256=hashlib.sha256(data).hexdigest(), xxh3_128=xxhash.xxh3_128_hexdigest(data)
        )
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt during the test, as at a terminal, even when the test run started with
    SIGINT ignored (a background job of a non-interactive shell inherits SIG_IGN, and Python then installs no
    handler)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def write_result(runtime: drt.DatasetRuntime, source: Any, root: Path | str, **kwargs: Any) -> drt.CacheWriteResult:
    """The one source's outcome of ``runtime.write_cache``: its success, or the failure its ``CacheSourcesError``
    carries (for tests of what went wrong with a single source)."""
    try:
        (result,) = runtime.write_cache([source], root, **kwargs)
    except drt.CacheSourcesError as e:
        (result,) = e.results
    return result


@pytest.fixture
def runtime() -> Iterator[drt.DatasetRuntime]:
    rt = drt.DatasetRuntime(num_workers=2)
    yield rt
    rt.close()


@pytest.fixture
def make_cache(tmp_path: Path, runtime: drt.DatasetRuntime):
    """Write a ListSource cache and return its path."""

    def make(name: str = "src", n: int = 10, root: Path | None = None, **config) -> Path:
        cfg = drt.WriterConfig(show_progress=False, **config)
        (result,) = runtime.write_cache(ListSource(name, n), root or tmp_path / "caches", writer_config=cfg)
        assert isinstance(result, drt.CacheWriteSuccess), result
        return result.path

    return make


def run_isolated(code: str, *, timeout: float = 120, memory_bytes: int | None = None):
    """Run Python ``code`` in a fresh interpreter (tests/ on its path) so a crash fails a test, not pytest.

    Args:
        code: the program.
        timeout: seconds before it is killed.
        memory_bytes: an address-space limit for the child (a runaway allocation fails there).

    Returns:
        The ``subprocess.CompletedProcess`` (``returncode`` is negative for a signal, e.g. -7 for SIGBUS).
    """
    import subprocess
    import sys
    import textwrap

    prelude = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
    if memory_bytes is not None:
        prelude += f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory_bytes}, {memory_bytes}))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )


def read_after_truncation(cache: Path, rel: str, size: int, record_checks: str | None = None,
                          read_first: bool = False):
    """Open ``cache`` in a forked child (``read_first``: read it whole once), truncate its file ``rel`` to
    ``size`` bytes, read it again and print the ``CacheCorruptError`` that gives; the ``CompletedProcess``
    (a SIGBUS shows as returncode -7, not as a failed pytest)."""
    code = f"""
        import os
        import torch_drt as drt
        config = drt.ReaderConfig(seed=0, shuffle=False, record_checks={record_checks!r})
        ds = drt.DatasetRuntime(1).cached_dataset([{str(cache)!r}], reader_config=config)
        if {read_first!r}:
            list(ds)
        os.truncate({str(cache / rel)!r}, {size})
        try:
            list(ds)
        except drt.CacheCorruptError as e:
            print("CacheCorruptError", e)
    """
    from forked_runner import run_forked

    return run_forked(code)


def downgrade_to_v1(path: Path) -> None:
    """Rewrite a format 2 cache as format 1 (the same records, an index without checksums)."""
    import hashlib
    import json

    import numpy as np

    manifest = json.loads((path / "manifest.json").read_text())
    index = np.fromfile(path / "index.bin", dtype="<u8").reshape(-1, 4)[:, :3]
    np.ascontiguousarray(index).tofile(path / "index.bin")
    for name in manifest["files"]:
        data = (path / name).read_bytes()
        manifest["files"][name] = {"byte_len": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    for key in ("max_record_bytes", "record_checksum", "cache_uid"):
        del manifest[key]
    manifest["format_version"] = 1
    (path / "manifest.json").write_text(json.dumps(manifest))


_FLIP_WORKER = """
import json, shutil, sys
from pathlib import Path
from typing import Any
import torch_drt as drt
from conftest import rehash_manifest

clean, scratch, rel, expected, todo, verify, rehash = sys.argv[1:8]
expected = json.loads(Path(expected).read_text())
config = drt.ReaderConfig(seed=0, shuffle=False, validate_cache=verify == "1")
rt = drt.DatasetRuntime(1)
for pos in json.loads(Path(todo).read_text()):
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(clean, scratch)
    body = bytearray((Path(scratch) / rel).read_bytes())
    body[pos // 8] ^= 1 << (pos % 8)
    (Path(scratch) / rel).write_bytes(bytes(body))
    if rehash == "1":
        rehash_manifest(Path(scratch))
    print(json.dumps({"pos": pos, "outcome": "started"}), flush=True)
    try:
        got = [[s.data.hex(), s.metadata] for s in rt.cached_dataset([scratch], reader_config=config)]
        outcome = "ok" if got == expected else "wrong"
    except drt.CacheCorruptError:
        outcome = "CacheCorruptError"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"[:200]
    print(json.dumps({"pos": pos, "outcome": outcome}), flush=True)
"""


def flip_outcomes(
    clean: Path, rel: str, positions: list[int], work: Path, *, verify: bool = False, rehash: bool = False
) -> dict[int, str]:
    """Flip each bit position of ``clean/rel`` in turn, read the whole cache in a forked child, and return
    the outcome per position: ``CacheCorruptError``, ``ok`` (the clean contents), ``wrong`` (other contents),
    another exception, or ``crash (exit N)``. A child that dies is restarted after the flip that killed it.

    Args:
        clean: an undamaged cache (never modified).
        rel: the file to flip, relative to the cache.
        positions: bit positions.
        work: a scratch directory.
        verify: open with ``validate_cache=True``.
        rehash: make the manifest agree with the damaged index/metadata first (a consistent forgery).
    """
    import json

    ds = drt.DatasetRuntime(1).cached_dataset([clean], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    (work / "expected.json").write_text(json.dumps([[s.data.hex(), s.metadata] for s in ds]))
    outcomes: dict[int, str] = {}
    todo = list(positions)
    while todo:
        (work / "todo.json").write_text(json.dumps(todo))
        args = [clean, work / "scratch", rel, work / "expected.json", work / "todo.json", int(verify), int(rehash)]
        from forked_runner import run_forked

        code = f"import sys; sys.argv[1:] = {[str(a) for a in args]!r}\n" + _FLIP_WORKER
        proc = run_forked(code, timeout=900)
        started = None
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            started = record["pos"] if record["outcome"] == "started" else None
            if record["outcome"] != "started":
                outcomes[record["pos"]] = record["outcome"]
        if started is None and proc.returncode != 0:
            raise AssertionError(f"flip worker failed outside a flip: {proc.stderr[-2000:]}")
        if started is not None:
            outcomes[started] = f"crash (exit {proc.returncode})"
        todo = [p for p in todo if p not in outcomes]
    return outcomes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "matrix: a large parameter grid; the default run takes a covering third of it (every value of "
        "every parameter at least once), -m slow or -m '' the rest"
    )


SLOW_TIER = Path(__file__).with_name("slow_tier.txt")


def slow_tier() -> set[str]:
    """The test ids in ``tests/slow_tier.txt``: the end-to-end tier that only ``make test-all`` runs."""
    lines = (line.strip() for line in SLOW_TIER.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the slow tier and the rest of a grid are marked slow here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests listed in ``slow_tier.txt`` ``slow``, and sample each ``matrix`` test's grid: a deterministic
    third of its cases (by a hash of the test id), plus the first case of any parameter value the third left out;
    the other cases are marked ``slow``."""
    import zlib

    tier = slow_tier()
    for item in items:
        if item.nodeid in tier or item.nodeid.split("[")[0] in tier:
            item.add_marker(pytest.mark.slow)

    grids: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        if item.get_closest_marker("matrix") and hasattr(item, "callspec"):
            grids.setdefault((str(item.path), item.originalname), []).append(item)
    for cases in grids.values():
        kept = [zlib.crc32(item.name.encode()) % 3 == 0 for item in cases]
        seen = {(k, id(v)) for item, keep in zip(cases, kept) if keep for k, v in item.callspec.params.items()}
        for i, item in enumerate(cases):
            values = {(k, id(v)) for k, v in item.callspec.params.items()}
            if not kept[i] and not values <= seen:
                kept[i] = True
                seen |= values
        for item, keep in zip(cases, kept):
            if not keep:
                item.add_marker(pytest.mark.slow)
