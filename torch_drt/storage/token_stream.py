"""Token-stream storage: fixed-dtype elements in shards, read as windows that may cross shard boundaries."""

from __future__ import annotations

import bisect
import itertools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from torch_drt._scratch import ScratchDir
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.checksums import sha256_file
from torch_drt.describe import described
from torch_drt.locations.base import StoredFile
from torch_drt.locations.location import Location
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.locations.remote_publish import publish_directory
from torch_drt.locations.remote_store import RemoteStore
from torch_drt.publish import StagingDir, publish_lock, write_json_atomic
from torch_drt.storage.token_stream_dataset import TokenStreamDataset as TokenStreamDataset  # (its former home)

KIND = "token_stream"
MANIFEST = "manifest.json"


class TokenStreamWriter:
    """Appends arrays of one dtype to a stream stored as shards under ``root/name``, published atomically.

    Args:
        root: the storage root; the stream is published at ``root/name`` by ``close()``. A URL root stages the
            stream in a local temporary directory and uploads it on ``close()``, its manifest last.
        name: the stream's directory name.
        dtype: element dtype (e.g. ``"int32"``).
        shard_elements: elements per shard file.
        storage_options: fsspec options for a URL root.
        remote_config: remote settings for a URL root.
    """

    def __init__(
        self,
        root: str | Path,
        name: str,
        dtype: Any = "int32",
        shard_elements: int = 1 << 24,
        *,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> None:
        if shard_elements < 1:
            raise ValueError(f"{shard_elements=} must be > 0")
        where = Location.parse(root, storage_options, remote_config)
        self._store = RemoteStore(where.join(name).url, storage_options, remote_config) if where.is_remote else None
        self._scratch = None  # a URL's stream is staged in a private scratch directory, then uploaded
        if self._store is not None:
            self._scratch = ScratchDir("torch_drt-stream-", remote_config.staging_dir if remote_config else None)
        local = where.path if self._scratch is None else self._scratch.path
        self.root, self.name = local, name
        self.dtype = np.dtype(dtype)
        self.shard_elements = shard_elements
        self.root.mkdir(parents=True, exist_ok=True)
        self._stage = StagingDir(self.root, name)
        self._staging = self._stage.path
        self._shards: list[int] = []
        self._file: BinaryIO | None = None  # the shard being written
        self._closed = False

    def write(self, tokens: Any) -> None:
        """Append ``tokens`` (any array-like of the stream's dtype; other dtypes are cast safely or refused)."""
        arr = np.asarray(tokens)
        if arr.dtype != self.dtype:
            if not np.can_cast(arr.dtype, self.dtype, casting="same_kind"):
                raise TypeError(f"cannot write {arr.dtype} tokens to a {self.dtype} stream")
            arr = arr.astype(self.dtype)
        arr = np.ascontiguousarray(arr).ravel()
        while arr.size:
            file = self._file
            if file is None or self._shards[-1] == self.shard_elements:
                file = self._next_shard()
            room = self.shard_elements - self._shards[-1]
            part, arr = arr[:room], arr[room:]
            part.tofile(file)
            self._shards[-1] += part.size

    def _next_shard(self) -> BinaryIO:
        if self._file is not None:
            self._file.close()
        self._file = open(self._staging / f"{len(self._shards):06d}.bin", "wb")  # noqa: SIM115 - kept open
        self._shards.append(0)
        return self._file

    def close(self) -> Path | str:
        """Publish the stream and return its path (its URL for a URL root).

        Raises:
            FileExistsError: when ``root/name`` already exists (it is left untouched).
        """
        if self._closed:
            return self._store.url if self._store else self.root / self.name
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        manifest = {
            "kind": KIND,
            "version": 1,
            "dtype": self.dtype.str,
            "total_elements": sum(self._shards),
            "shards": [
                {"name": f"{i:06d}.bin", "elements": n, "sha256": sha256_file(self._staging / f"{i:06d}.bin")}
                for i, n in enumerate(self._shards)
            ],
        }
        write_json_atomic(self._staging / MANIFEST, manifest)
        if self._store is not None:
            assert self._scratch is not None  # staged in it
            try:
                publish_directory(self._staging, self._store, MANIFEST)
            finally:
                self._stage.discard()
                self._scratch.close()
            self._closed = True
            return self._store.url
        target = self.root / self.name
        with publish_lock(self.root, self.name):
            if target.exists():
                self._stage.discard()
                raise FileExistsError(f"token stream already exists: {target}")
            self._stage.publish()
        self._closed = True
        return target

    def __enter__(self) -> TokenStreamWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._stage.discard()
            if self._scratch is not None:
                self._scratch.close()

    def __repr__(self) -> str:
        return described(self, str(self.root), self.name, dtype=str(self.dtype))


class TokenStreamStorage:
    """A published token stream, read through its location's backend: memory-mapped read-only where it is local
    (windows are views of the maps), read through the node cache at a URL (each shard downloaded once per node,
    verified against its SHA-256); pickles as its location.

    Args:
        path: the stream's directory or URL (or a ``Location``).
        storage_options: fsspec options for a URL.
        remote_config: remote settings for a URL.

    Raises:
        CacheCorruptError: when the manifest is missing or a shard's size differs from it.
    """

    def __init__(
        self,
        path: str | Path | Location,
        *,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> None:
        location = Location.parse(path, storage_options, remote_config)
        self._location, self._backend = location, location.backend()
        self.path: Path | str = location.target
        manifest = self._manifest()
        self.dtype = np.dtype(manifest["dtype"])
        self._files: list[StoredFile] = []
        self._arrays: list[np.ndarray | None] = []  # a shard's elements, where its file is a lasting map
        for shard in manifest["shards"]:
            nbytes = shard["elements"] * self.dtype.itemsize
            file = self._backend.open(shard["name"], nbytes, checksum=("sha256", shard["sha256"]))
            self._files.append(file)
            array = None
            if file.lasting:  # a plain ndarray over the map: slicing it is much cheaper than slicing an np.memmap
                view = file.view()
                assert view is not None  # a lasting file's view is its map
                array = np.frombuffer(view, dtype=self.dtype)
            self._arrays.append(array)
        sizes = [int(s["elements"]) for s in manifest["shards"]]
        self._starts = [0, *itertools.accumulate(sizes)]
        self.total_elements = self._starts[-1]

    def _manifest(self) -> dict[str, Any]:
        where = self._backend.where(MANIFEST)
        try:
            manifest = json.loads(self._backend.read(MANIFEST, 64 << 20))
        except (OSError, ValueError) as e:  # a CacheCorruptError (a missing file, say) is a ValueError too
            raise CacheCorruptError(where, f"not a token stream manifest: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
            raise CacheCorruptError(where, f"kind {manifest.get('kind') if isinstance(manifest, dict) else None!r} "
                                    f"is not {KIND!r}")
        return manifest

    def __reduce__(self):
        location = self._location
        return (_reopen, (str(self.path), location.storage_options, location.remote_config))

    def _slice(self, shard: int, start: int, stop: int) -> np.ndarray:
        """Elements ``[start, stop)`` of one shard: a view of a lasting map, else a copy of the bytes read."""
        array = self._arrays[shard]
        if array is not None:
            return array[start:stop]
        size = self.dtype.itemsize
        (data,) = self._files[shard].gather([start * size], [stop * size])
        return np.frombuffer(data, dtype=self.dtype)

    def _shard_len(self, shard: int) -> int:
        return self._starts[shard + 1] - self._starts[shard]

    def window(self, start: int, length: int) -> np.ndarray:
        """Elements [start, start+length): a view inside one mapped shard, a copy across shards (or when the shard
        is read by ranges). ``windows([start], length)[0]``, with no list (a packer reads every piece here).

        Raises:
            IndexError: when the window is not inside the stream.
        """
        if start < 0 or start + length > self.total_elements:
            raise IndexError(f"window [{start}, {start + length}) is outside the stream of {self.total_elements}")
        bounds = self._starts
        shard = bisect.bisect_right(bounds, start) - 1
        local, array = start - bounds[shard], self._arrays[shard]
        if array is not None and local + length <= bounds[shard + 1] - bounds[shard]:  # one view of a map
            return array[local : local + length]
        return self._copied(shard, local, length)

    def windows(self, starts: Sequence[int], length: int) -> list[np.ndarray]:
        """``window(start, length)`` for each of ``starts`` (a batch's windows: a few operations each, no call,
        where they lie inside a mapped shard).

        Raises:
            IndexError: for the first window not inside the stream.
        """
        bounds, arrays, total, out = self._starts, self._arrays, self.total_elements, []
        for start in starts:
            if start < 0 or start + length > total:
                raise IndexError(f"window [{start}, {start + length}) is outside the stream of {total}")
            shard = bisect.bisect_right(bounds, start) - 1
            local = start - bounds[shard]
            array = arrays[shard]
            if array is not None and local + length <= bounds[shard + 1] - bounds[shard]:  # one view of a map
                out.append(array[local : local + length])
            else:
                out.append(self._copied(shard, local, length))
        return out

    def _copied(self, shard: int, local: int, length: int) -> np.ndarray:
        """``length`` elements from ``local`` in ``shard`` on, read or copied: across shards, or by ranges."""
        parts, need = [], length
        while need:
            if local < self._shard_len(shard):
                part = self._slice(shard, local, min(self._shard_len(shard), local + need))
                parts.append(part)
                need -= len(part)
            shard, local = shard + 1, 0
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __repr__(self) -> str:
        return described(self, str(self.path), dtype=str(self.dtype), elements=self.total_elements)


def _reopen(path: str, options: Mapping[str, Any] | None, config: RemoteConfig | None) -> TokenStreamStorage:
    return TokenStreamStorage(path, storage_options=options, remote_config=config)
