"""WebDatasetShards: WebDataset tar shards read where they lie, samples grouped by key and fields by extension as
webdataset groups them, each sample read by the byte ranges of its files.

Opening indexes each tar once (its headers, read through the backend: a local map, or range reads of
``block`` bytes that skip the files' bodies); the index travels with the dataset to worker processes, so no
worker reads a header again, and the index of a remote tar is kept in the node cache (keyed by the object's
URL, size and ETag), so a later run on the node opens it without reading the tar. A read gathers the byte
ranges of the samples asked for (coalesced into few requests for a URL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_drt.formats._braces import expand_braces
from torch_drt.formats._files import Files, many, split_location
from torch_drt.formats._tar_index import TarIndex, index_tar, kept_index
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations import StoredFile
from torch_drt.locations.remote_config import RemoteConfig


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
        for directory in dict.fromkeys(split_location(url)[0] for url in self.urls):
            self._files.list_remote(directory)
        with ThreadPoolExecutor(min(index_threads, len(self.urls))) as pool:
            self._index: list[TarIndex] = list(pool.map(self._build, self.urls))
        super().__init__([len(ix[0]) for ix in self._index], self.urls, cache_shards=8)

    def _open(self, url: str) -> StoredFile:
        return self._files.open(*split_location(url))

    def _build(self, url: str) -> TarIndex:
        directory, rel = split_location(url)
        file = self._open(url)
        try:
            return kept_index(self._files.backend(directory), rel, file, lambda: index_tar(file, self._block))
        finally:
            file.close()

    def _load(self, shard: int) -> StoredFile:
        return self._open(self.urls[shard])

    def _shard_remote_file(self, shard: int) -> StoredFile | None:
        url = self.urls[shard]
        return self._open(url) if self._files.remote(split_location(url)[0]) else None

    def _sample(self, decoded: StoredFile, shard: int, index: int) -> dict[str, Any]:
        return self._shard_samples(decoded, shard, [index])[0]

    def _shard_samples(self, file: StoredFile, shard: int, indices: list[int]) -> list[dict[str, Any]]:
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
