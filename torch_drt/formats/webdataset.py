"""WebDatasetShards: WebDataset tar shards read where they lie, samples grouped by key and fields by extension as
webdataset groups them, each sample read by the byte ranges of its files.

Opening indexes each tar once (its headers, read through the backend: a local map, or range reads of
``block`` bytes that skip the files' bodies); the index travels with the dataset to worker processes, so no
worker reads a header again, and the index of a remote tar is kept in the node cache (keyed by the object's
URL, size and ETag as the directory's one listing reports them: no request per tar), so a later run on the node
opens it without reading the tar. A read gathers the byte ranges of the samples asked for, each field with its
tar header (coalesced into few requests for a URL), and checks every header against the index: an index that
does not fit its tar is a ``FormatError``, never other bytes read as the field (a kept one is dropped, so that the
next open indexes the tar again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache.errors import FormatError
from torch_drt.formats._braces import expand_braces
from torch_drt.formats._files import Files, many, split_location
from torch_drt.formats._tar_index import HEADER, TarIndex, check_headers, check_heads, index_tar
from torch_drt.formats._tar_kept import kept_index, kept_name
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations import StoredFile
from torch_drt.locations.remote_config import RemoteConfig

_CHECK_AT_ONCE = 4096  # headers checked in one array


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
        index_threads: shards indexed at once when opening (on a cold node, each remote tar is downloaded to be
            indexed: 16 at once opened 24 tars about 30% sooner than 8 through a 20 ms proxy).

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
        index_threads: int = 16,
    ) -> None:
        if not isinstance(index_threads, int) or index_threads < 1:
            raise ValueError(f"{index_threads=} must be an int >= 1")
        self._files = Files(storage_options, remote_config)
        self.urls = [name for url in many(urls) for name in expand_braces(url)]
        self._block = block
        for directory in dict.fromkeys(split_location(url)[0] for url in self.urls):
            self._files.list_remote(directory)
        with ThreadPoolExecutor(min(index_threads, len(self.urls))) as pool:
            built = list(pool.map(self._build, self.urls))
        self._index: list[TarIndex] = [index for index, _ in built]
        self._kept: list[str | None] = [name for _, name in built]  # each tar's index's name in the node cache
        self._checked: set[int] = set()  # shards whose every header this process checked against the index
        super().__init__([len(ix[0]) for ix in self._index], self.urls, cache_shards=8)

    def _open(self, url: str) -> StoredFile:
        return self._files.open(*split_location(url))

    def _build(self, url: str) -> tuple[TarIndex, str | None]:
        """The tar's index, and its name in the node cache when it is kept there (a remote tar listed with an
        ETag)."""
        directory, rel = split_location(url)
        file = self._open(url)
        try:
            etag, node = self._files.etag(directory, rel), getattr(self._files.backend(directory), "node", None)
            if etag is None or node is None:
                return index_tar(file, self._block), None
            name = kept_name(str(file.where), file.size, etag)
            return kept_index(node, name, file.size, lambda: index_tar(file, self._block))[0], name
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
        """Samples ``indices`` of a shard: every field's bytes in one gather (each with its header, checked, until
        the whole shard's headers were checked at once in this process: ``_checked``)."""
        keys, first, exts, starts, ends = self._index[shard]
        spans = [(int(first[i]), int(first[i + 1])) for i in indices]
        fields = [f for a, b in spans for f in range(a, b)]
        file.check()
        whole = shard in self._checked or self._check_shard(file, shard)
        skip = 0 if whole else HEADER
        data: Sequence[bytes | memoryview] = (
            file.gather((starts[fields] - skip).tolist(), ends[fields].tolist()) if fields else []
        )
        if not whole and not self._check_shard(file, shard):  # (mapped by the gather, when it is local now)
            data = [memoryview(d) for d in data]
            fault = check_headers([d[:HEADER] for d in data], [keys[i] for i, (a, b) in zip(indices, spans)
                                                               for _ in range(a, b)],
                                  [exts[f] for f in fields], [len(d) - HEADER for d in data], starts[fields].tolist())
            if fault is not None:
                self._fault(file, shard, *fault)
        out, at = [], 0
        for i, (a, b) in zip(indices, spans):
            sample: dict[str, Any] = {"__key__": keys[i], "__url__": self.urls[shard]}
            for f in range(a, b):
                sample[exts[f]] = bytes(data[at][skip:])
                at += 1
            out.append(sample)
        return out

    def _check_shard(self, file: StoredFile, shard: int) -> bool:
        """Check every header of a shard whose file is local (mapped) against its index, at once; False (nothing
        checked) while it is read by ranges."""
        view = file.view()
        if view is None:
            return False
        keys, first, exts, starts, ends = self._index[shard]
        names = np.repeat(np.asarray(keys, dtype=object), np.diff(first)).tolist()
        for a in range(0, len(starts), _CHECK_AT_ONCE):
            b = a + _CHECK_AT_ONCE
            at = starts[a:b] - HEADER
            if len(at) and at[-1] + HEADER > len(view):
                raise FormatError(file.where, f"the file is {len(view)} bytes, shorter than its index says")
            heads = np.frombuffer(b"".join([view[h : h + HEADER] for h in at.tolist()]), np.uint8)
            fault = check_heads(heads.reshape(len(at), HEADER), names[a:b], exts[a:b],
                                (ends - starts)[a:b].tolist(), starts[a:b].tolist())
            if fault is not None:
                self._fault(file, shard, *fault)
        self._checked.add(shard)
        return True

    def _fault(self, file: StoredFile, shard: int, at: int, fault: str) -> None:
        """Raise the ``FormatError`` of a header that does not fit the index (a kept index is dropped first)."""
        name = self._kept[shard]
        if name is None:
            raise FormatError(file.where, f"the header at byte {at} does not fit the index made when the dataset "
                                          f"was opened ({fault}): the tar changed or is damaged")
        directory = split_location(self.urls[shard])[0]
        self._files.backend(directory).node.forget(name)  # type: ignore[attr-defined]
        raise FormatError(file.where, f"the header at byte {at} does not fit the tar's index kept in the node cache "
                                      f"({fault}): the index is dropped, the next open indexes the tar again")
