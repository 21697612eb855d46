"""WebDatasetShards: WebDataset tar shards read where they lie, samples grouped by key and fields by extension as
webdataset groups them, each sample read by the byte ranges of its files.

Opening indexes each tar once (its headers, read through the backend: a local map, or range reads of
``block`` bytes that skip the files' bodies); the index travels with the dataset to worker processes, so no
worker reads a header again. A read gathers the byte ranges of the samples asked for (coalesced into few requests
for a URL).
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache.backends import StoredFile
from torch_drt.cache.errors import CacheCorruptError, FormatError
from torch_drt.cache.remote_config import RemoteConfig
from torch_drt.formats._braces import expand_braces
from torch_drt.formats._files import Files, RangeReader, many, split_location
from torch_drt.formats.shard_set import ShardSet

__all__ = ["WebDatasetShards"]

_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_SKIP = re.compile(r"__[^/]*__($|/)")  # webdataset's skip_meta
_TAIL_LIMIT = 1 << 20  # bytes after the last header that may be read to check they are the end-of-archive zeros

# one shard's index: per sample its key and first field; per field its extension, start and end
_Index = tuple[list[str], np.ndarray, list[str], np.ndarray, np.ndarray]


class WebDatasetShards(ShardSet):
    """WebDataset tar shards as a map-style dataset: sample ``i`` is a dict with ``__key__``, ``__url__`` (the
    shard as given) and one ``bytes`` field per extension, exactly as webdataset's own ``WebDataset`` yields it
    before decoding.

    Args:
        urls: a shard, a brace pattern (``shards/train-{000000..000099}.tar``) or a list of them; local paths or
            fsspec URLs. Only uncompressed tars (random access needs it).
        storage_options: fsspec options of URLs.
        remote_config: retries, time-outs and range settings of URLs (``torch_drt.RemoteConfig``).
        block: bytes read per request at least while indexing a remote tar.
        index_threads: shards indexed at once when opening.

    Raises:
        FormatError: a shard is no tar, is compressed, is damaged, or repeats an extension within a sample.
    """

    def __init__(
        self,
        urls: str | Path | Sequence[str | Path],
        *,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
        block: int = 1 << 20,
        index_threads: int = 8,
    ) -> None:
        if not isinstance(index_threads, int) or index_threads < 1:
            raise ValueError(f"{index_threads=} must be an int >= 1")
        self._files = Files(storage_options, remote_config)
        self.urls = [name for url in many(urls) for name in expand_braces(url)]
        self._block = block
        with ThreadPoolExecutor(min(index_threads, len(self.urls))) as pool:
            self._index: list[_Index] = list(pool.map(self._build, self.urls))
        super().__init__([len(ix[0]) for ix in self._index], self.urls, cache_shards=8)

    def _open(self, url: str) -> StoredFile:
        return self._files.open(*split_location(url))

    def _build(self, url: str) -> _Index:
        file = self._open(url)
        try:
            return _index_tar(file, self._block)
        finally:
            file.close()

    def _load(self, shard: int) -> StoredFile:
        return self._open(self.urls[shard])

    def _sample(self, decoded: StoredFile, shard: int, index: int) -> dict[str, Any]:
        return self._read(decoded, shard, [index])[0]

    def _samples(self, loaded: dict[int, Any], places: list[tuple[int, int]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{}] * len(places)
        by_shard: dict[int, list[int]] = {}
        for k, (s, _) in enumerate(places):
            by_shard.setdefault(s, []).append(k)
        for s, ks in by_shard.items():
            for k, sample in zip(ks, self._read(loaded[s], s, [places[k][1] for k in ks])):
                out[k] = sample
        return out

    def _read(self, file: StoredFile, shard: int, indices: list[int]) -> list[dict[str, Any]]:
        """Samples ``indices`` of a shard: every field's bytes in one gather."""
        keys, first, exts, starts, ends = self._index[shard]
        spans = [(int(first[i]), int(first[i + 1])) for i in indices]
        fields = [f for a, b in spans for f in range(a, b)]
        file.check()
        data = file.gather(starts[fields].tolist(), ends[fields].tolist()) if fields else []
        out, at = [], 0
        for i, (a, b) in zip(indices, spans):
            sample: dict[str, Any] = {"__key__": keys[i], "__url__": self.urls[shard]}
            for f in range(a, b):
                sample[exts[f]] = bytes(data[at])
                at += 1
            out.append(sample)
        return out


def _index_tar(file: StoredFile, block: int) -> _Index:
    """One pass over a tar's headers: samples grouped as webdataset's ``group_by_keys`` groups them."""
    keys: list[str] = []
    first: list[int] = []
    exts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    current: set[str] | None = None
    reader = RangeReader(file, block)
    try:
        tar = tarfile.open(fileobj=reader, mode="r:")  # noqa: SIM115 - read by hand below
        while True:
            member = tar.next()
            if member is None:
                break
            name = member.name
            if not member.isreg() or ("/" not in name and name.startswith("__") and name.endswith("__")):
                continue
            if _SKIP.match(name):
                continue
            m = _KEY_EXT.match(name)
            if not m:
                continue
            key, ext = m.group(1), m.group(2).lower()
            if member.offset_data + member.size > file.size:
                raise FormatError(file.where, f"member {name!r} of {member.size} bytes runs past the end of the file")
            if current is None or key != keys[-1]:
                keys.append(key)
                first.append(len(exts))
                current = set()
            if ext in current:
                raise FormatError(file.where, f"member {name!r}: extension {ext!r} twice in sample {key!r}")
            current.add(ext)
            exts.append(ext)
            starts.append(member.offset_data)
            ends.append(member.offset_data + member.size)
        stop = tar.offset
    except CacheCorruptError:
        raise
    except (tarfile.TarError, OSError, ValueError, UnicodeError, EOFError) as e:
        raise FormatError(file.where, f"not a readable uncompressed tar: {type(e).__name__}: {e}") from None
    _check_end(file, stop)
    first.append(len(exts))
    return (keys, np.asarray(first, np.int64), exts, np.asarray(starts, np.int64), np.asarray(ends, np.int64))


def _check_end(file: StoredFile, stop: int) -> None:
    """``tarfile`` ends quietly at a damaged or missing header: what follows the last member must be the archive's
    end (zero blocks), else the shard was cut or damaged."""
    rest = file.size - stop
    if rest < tarfile.BLOCKSIZE:
        raise FormatError(file.where, f"the file ends at byte {file.size} without the end-of-archive block (cut?)")
    if rest > _TAIL_LIMIT:
        raise FormatError(file.where, f"an invalid tar header at byte {stop} ({rest} bytes follow it)")
    file.check()
    tail = file.gather([stop], [file.size])[0]
    if any(tail):
        raise FormatError(file.where, f"an invalid tar header at byte {stop}")
