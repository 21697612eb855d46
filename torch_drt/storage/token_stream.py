"""Token-stream storage: fixed-dtype elements in shards, read as windows that may cross shard boundaries."""

from __future__ import annotations

import bisect
import itertools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache.errors import CacheCorruptError
from torch_drt.checksums import sha256_file
from torch_drt.publish import StagingDir, publish_lock, write_json_atomic

__all__ = ["TokenStreamDataset", "TokenStreamStorage", "TokenStreamWriter"]

KIND = "token_stream"
MANIFEST = "manifest.json"


class TokenStreamWriter:
    """Appends arrays of one dtype to a stream stored as shards under ``root/name``, published atomically.

    Args:
        root: the storage root; the stream is published at ``root/name`` by ``close()``.
        name: the stream's directory name.
        dtype: element dtype (e.g. ``"int32"``).
        shard_elements: elements per shard file.
    """

    def __init__(self, root: str | Path, name: str, dtype: Any = "int32", shard_elements: int = 1 << 24) -> None:
        if shard_elements < 1:
            raise ValueError(f"{shard_elements=} must be > 0")
        self.root, self.name = Path(root), name
        self.dtype = np.dtype(dtype)
        self.shard_elements = shard_elements
        self.root.mkdir(parents=True, exist_ok=True)
        self._stage = StagingDir(self.root, name)
        self._staging = self._stage.path
        self._shards: list[int] = []
        self._file = None
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
            if self._file is None or self._shards[-1] == self.shard_elements:
                self._next_shard()
            room = self.shard_elements - self._shards[-1]
            part, arr = arr[:room], arr[room:]
            part.tofile(self._file)
            self._shards[-1] += part.size

    def _next_shard(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = open(self._staging / f"{len(self._shards):06d}.bin", "wb")  # noqa: SIM115 - kept open
        self._shards.append(0)

    def close(self) -> Path:
        """Publish the stream and return its path.

        Raises:
            FileExistsError: when ``root/name`` already exists (it is left untouched).
        """
        if self._closed:
            return self.root / self.name
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


class TokenStreamStorage:
    """A published token stream, memory-mapped read-only; pickles as its path.

    Raises:
        CacheCorruptError: when the manifest is missing or a shard's size differs from it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            manifest = json.loads((self.path / MANIFEST).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise CacheCorruptError(self.path / MANIFEST, f"not a token stream manifest: {e}") from None
        if manifest.get("kind") != KIND:
            raise CacheCorruptError(self.path / MANIFEST, f"kind {manifest.get('kind')!r} is not {KIND!r}")
        self.dtype = np.dtype(manifest["dtype"])
        self._maps = []
        for shard in manifest["shards"]:
            file = self.path / shard["name"]
            if not file.exists() or file.stat().st_size != shard["elements"] * self.dtype.itemsize:
                raise CacheCorruptError(file, f"shard should hold {shard['elements']} elements")
            # a plain ndarray over the mapping: slicing it is much cheaper than slicing an np.memmap
            self._maps.append(
                np.memmap(file, dtype=self.dtype, mode="r").view(np.ndarray) if shard["elements"] else None
            )
        sizes = [int(s["elements"]) for s in manifest["shards"]]
        self._starts = [0, *itertools.accumulate(sizes)]
        self.total_elements = self._starts[-1]

    def __reduce__(self):
        return (TokenStreamStorage, (str(self.path),))

    def window(self, start: int, length: int) -> np.ndarray:
        """Elements [start, start+length): a view inside one shard, a copy across shards."""
        if start < 0 or start + length > self.total_elements:
            raise IndexError(f"window [{start}, {start + length}) is outside the stream of {self.total_elements}")
        shard = bisect.bisect_right(self._starts, start) - 1
        local = start - self._starts[shard]
        if local + length <= len(self._maps[shard]):
            return self._maps[shard][local : local + length]
        parts, need = [], length
        while need:
            m = self._maps[shard]
            if m is not None and local < len(m):
                part = m[local : local + need]
                parts.append(part)
                need -= len(part)
            shard, local = shard + 1, 0
        return np.concatenate(parts)


class TokenStreamDataset:
    """Sample i of a stream is the window [i*L, (i+1)*L) with L = ``sequence_length``.

    Args:
        storage: the stream.
        sequence_length: elements per sample.
    """

    def __init__(self, storage: TokenStreamStorage, sequence_length: int) -> None:
        if not isinstance(sequence_length, int) or sequence_length < 1:
            raise ValueError(f"{sequence_length=} must be an int > 0")
        self.storage = storage
        self.sequence_length = sequence_length

    def __len__(self) -> int:
        return self.storage.total_elements // self.sequence_length

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range for {len(self)} sequences")
        return self.storage.window(index * self.sequence_length, self.sequence_length)

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        return [self[i] for i in indices]
