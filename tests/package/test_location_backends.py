"""A new backend is one module: this file alone adds ``memtest://`` (fsspec's in-memory filesystem, read by this
backend's own ranged requests, not by the fsspec remote backend) and reads a cache and a token stream through it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import fsspec
import numpy as np
import pytest
from conftest import ListSource

import torch_drt as drt
from torch_drt.locations import (
    CacheBackend,
    CacheCorruptError,
    LocalBackend,
    Location,
    MissingFile,
    RemoteBackend,
    StoredFile,
    register_backend,
    split_protocol,
)
from torch_drt.storage import TokenStreamStorage, TokenStreamWriter

RANGES: list[tuple[str, int, int]] = []  # every ranged read the backend made: (path, start, end)


class MemTestFile(StoredFile):
    def __init__(self, fs, path: str, where: str, size: int) -> None:
        super().__init__(where, size)
        self.fs, self.path = fs, path

    def gather(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        RANGES.extend((self.path, a, b) for a, b in zip(starts, ends))
        return [bytes(self.fs.cat_file(self.path, start=a, end=b)) if b > a else b"" for a, b in zip(starts, ends)]

    def check(self) -> None:
        if self.fs.size(self.path) != self.size:
            raise CacheCorruptError(self.where, "changed size")


class MemTestBackend(CacheBackend):
    """The three methods a backend overrides: ``size``, ``read``, ``open``."""

    stats_cheaply = False

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.fs, self.root = fsspec.filesystem("memory"), "/" + split_protocol(location)[1]

    def size(self, rel: str) -> int:
        try:
            return int(self.fs.size(f"{self.root}/{rel}"))
        except FileNotFoundError:
            raise MissingFile(self.where(rel), "file is missing") from None

    def read(self, rel: str, limit: int, *, checksum: tuple[str, str] | None = None) -> bytes:
        if self.size(rel) > limit:
            raise CacheCorruptError(self.where(rel), f"more than the {limit} bytes allowed")
        return bytes(self.fs.cat_file(f"{self.root}/{rel}"))

    def open(self, rel: str, size: int, *, checksum=None, ranges_ok: bool = False) -> MemTestFile:
        if (actual := self.size(rel)) != size:
            raise CacheCorruptError(self.where(rel), f"file is {actual} bytes, the manifest records {size}")
        return MemTestFile(self.fs, f"{self.root}/{rel}", self.where(rel), size)


register_backend("memtest", MemTestBackend)


def _upload(local: Path) -> str:
    """Copy a local directory into the memory filesystem; its ``memtest://`` URL."""
    name = f"memtest-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    for file in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.pipe_file(f"/{name}/{file.relative_to(local).as_posix()}", file.read_bytes())
    return f"memtest://{name}"


def test_a_registered_scheme_gets_its_backend_and_the_others_keep_theirs():
    assert type(Location.parse("memtest://bucket/c").backend()) is MemTestBackend
    assert type(Location.parse("s3://bucket/c").backend()) is RemoteBackend  # any other URL: fsspec
    assert type(Location.parse("file:///tmp").backend()) is LocalBackend
    with pytest.raises(ValueError, match="already"):
        register_backend("memtest", LocalBackend)
    with pytest.raises(ValueError, match="scheme"):
        register_backend("Mem Test", MemTestBackend)


def test_a_cache_reads_through_a_backend_registered_in_one_file(tmp_path):
    rt = drt.DatasetRuntime(1)
    (written,) = rt.write_cache(ListSource("a", 40), tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    url = _upload(Path(written.path))
    local = rt.cached_dataset(written.path, reader_config=drt.ReaderConfig(seed=0))
    RANGES.clear()
    remote = rt.cached_dataset(url, reader_config=drt.ReaderConfig(seed=0))
    assert len(remote) == len(local) == 40
    got, want = list(remote), list(local)
    assert [bytes(s.data) for s in got] == [bytes(s.data) for s in want]
    assert [s.metadata for s in got] == [s.metadata for s in want]
    assert any("/shards/" in path for path, _, _ in RANGES)  # the payloads came through this backend's reads
    with pytest.raises(CacheCorruptError, match=r"-missing/manifest\.json: manifest is missing"):
        rt.cached_dataset(url + "-missing", reader_config=drt.ReaderConfig(seed=0))


def test_a_token_stream_reads_through_a_backend_registered_in_one_file(tmp_path):
    tokens = np.arange(1000, dtype=np.int32)
    with TokenStreamWriter(tmp_path, "t", dtype="int32", shard_elements=300) as writer:
        writer.write(tokens)
    RANGES.clear()
    stream = TokenStreamStorage(_upload(tmp_path / "t"))
    assert stream.total_elements == 1000
    assert np.array_equal(stream.window(250, 100), tokens[250:350])  # across a shard boundary
    assert np.array_equal(stream.window(0, 1000), tokens)
    assert {path.rsplit("/", 1)[1] for path, _, _ in RANGES} == {"000000.bin", "000001.bin", "000002.bin",
                                                                 "000003.bin"}


def test_a_location_carries_its_options_and_settings_into_write_and_read(tmp_path):
    """A ``Location`` given as the root or the path brings its remote settings: the cache lands in the node cache
    directory it names, with no ``remote_config`` passed."""
    rt = drt.DatasetRuntime(1)
    node = tmp_path / "node"
    root = Location.parse(f"memory://loc-{uuid.uuid4().hex[:8]}", remote_config=drt.RemoteConfig(cache_dir=str(node)))
    (written,) = rt.write_cache(ListSource("a", 30), root, writer_config=drt.WriterConfig(show_progress=False))
    assert isinstance(written, drt.CacheWriteSuccess), written
    ds = rt.cached_dataset(root.join("a"), reader_config=drt.ReaderConfig(seed=0))
    assert len(list(ds)) == 30
    for file in ds.reader._caches[0].shards:
        file.fetch()  # (a read that waited for a download took its bytes before the copy was renamed in)
    assert list((node / "data").glob("sha256-*")) and list((node / "small").iterdir())  # its node cache was used
