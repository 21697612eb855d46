"""Shared fixtures: small sources and caches built with the real writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
