"""Document storage: variable-length records, stored as a torch_drt sample cache."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache.config import WriterConfig
from torch_drt.cache.reader import CacheReader
from torch_drt.cache.records import CacheInput, CacheWriteError, CacheWriteResult
from torch_drt.cache.validate import load_cache
from torch_drt.cache.writer import write_source
from torch_drt.describe import described
from torch_drt.locations.location import Location
from torch_drt.locations.remote_config import RemoteConfig

_END = object()


class _QueueSource:
    def __init__(self, name: str, q: queue.Queue) -> None:
        self.name = name
        self._q = q

    def __iter__(self) -> Iterator[CacheInput]:
        while (item := self._q.get()) is not _END:
            yield item


class DocumentStorageWriter:
    """Push documents one by one into a sample cache at ``root/name`` (published atomically by ``close()``).

    Each document is bytes or a 1-D numpy array of ``dtype``; its length is kept as the ``length`` column.

    Args:
        root: the cache root, or a URL (the storage is staged locally and uploaded by ``close()``).
        name: the cache (storage) name.
        dtype: element dtype of array documents; None stores bytes.
        writer_config: settings of the underlying cache writer.
        storage_options: fsspec options for a URL root.
        remote_config: remote settings for a URL root.
    """

    def __init__(
        self,
        root: str | Path,
        name: str,
        dtype: Any = None,
        writer_config: WriterConfig | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ):
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._q: queue.Queue = queue.Queue(maxsize=256)
        self._result: CacheWriteResult | None = None
        config = writer_config or WriterConfig(show_progress=False)
        target = Location.parse(root).target

        def run() -> None:
            self._result = write_source(
                _QueueSource(name, self._q), target, config, storage_options=storage_options,
                remote_config=remote_config,
            )

        self._thread = threading.Thread(target=run, name="torch_drt-document-writer", daemon=True)
        self._thread.start()

    def write(self, document: Any) -> None:
        """Append one document."""
        if self.dtype is not None:
            arr = np.ascontiguousarray(document, dtype=self.dtype)
            if arr.ndim != 1:
                raise ValueError(f"array documents must be 1-D, got shape {arr.shape}")
            self._q.put(CacheInput(arr.tobytes(), {"length": int(arr.size), "dtype": self.dtype.str}))
        else:
            data = bytes(document)
            self._q.put(CacheInput(data, {"length": len(data), "dtype": ""}))

    def close(self) -> Path | str:
        """Publish and return the storage path (its URL for a URL root).

        Raises:
            OSError: when the cache could not be written (the writer's message says why).
        """
        self._q.put(_END)
        self._thread.join()
        if isinstance(self._result, CacheWriteError):
            raise OSError(f"document storage {self._result.source_name!r}: {self._result.message}")
        assert self._result is not None  # the writer thread answered (None only if write_source itself raised)
        return self._result.path

    def __enter__(self) -> DocumentStorageWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return described(self, dtype=None if self.dtype is None else str(self.dtype))


class DocumentStorage:
    """Variable-length records of one or more sample caches (any torch_drt or dataset-rt cache works).

    Items are bytes, or numpy arrays when the cache was written by ``DocumentStorageWriter`` with a dtype.

    Args:
        paths: one cache (a directory or a URL) or several.
        storage_options: fsspec options for URLs.
        remote_config: remote settings for URLs (node cache, read mode).
    """

    def __init__(
        self,
        paths: str | Path | list[str | Path],
        *,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> None:
        paths = [paths] if isinstance(paths, str | Path) else list(paths)
        loaded = [load_cache(p, storage_options=storage_options, remote_config=remote_config) for p in paths]
        self.reader = CacheReader([layout for layout, _ in loaded])
        self._counts = np.array([layout.sample_count for layout in self.reader.layouts], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self._counts)])
        self._dtypes = []
        for layout, table in loaded:
            dtype = None
            if ("dtype", "string") in layout.schema:
                values = table.column("dtype").unique().to_pylist()
                dtype = np.dtype(values[0]) if len(values) == 1 and values[0] else None
            self._dtypes.append(dtype)

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def dtype(self) -> np.dtype | None:
        """The element dtype when every cache holds arrays of one dtype, else None (bytes documents)."""
        dtypes = set(self._dtypes)
        return dtypes.pop() if len(dtypes) == 1 else None

    def lengths(self) -> np.ndarray:
        """Elements per document (bytes for bytes documents) from the ``length`` column, reading no payload.

        Raises:
            KeyError: when a cache has no ``length`` column (``DocumentStorageWriter`` writes one).
        """
        from torch_drt.cache.validate import read_metadata

        parts = []
        for layout in self.reader.layouts:
            if ("length", "int") not in layout.schema:
                raise KeyError(f"{layout.path} has no 'length' column: write it with DocumentStorageWriter")
            parts.append(read_metadata(layout).column("length").to_numpy())
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)

    def arrays(self, indices: Any) -> list[np.ndarray]:
        """Array documents at ``indices``, read with one index gather per cache (no per-element work).

        Raises:
            IndexError: for an index out of range.
            TypeError: when a cache holds bytes documents.
        """
        ids = np.asarray(indices, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"a document index of {ids.tolist()} is out of range for {len(self)} documents")
        pos = np.searchsorted(self._starts, ids, side="right") - 1
        if any(self._dtypes[c] is None for c in np.unique(pos).tolist()):
            raise TypeError("arrays() needs array documents (written with DocumentStorageWriter(dtype=...))")
        payloads = self.reader.read_many(pos.astype(np.int32), ids - self._starts[pos])
        return [_array(p, self._dtypes[c]) for p, c in zip(payloads, pos.tolist())]

    def _locate(self, index: int) -> tuple[int, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"document {index} is out of range for {len(self)} documents")
        pos = int(np.searchsorted(self._starts, index, side="right")) - 1
        return pos, index - int(self._starts[pos])

    def __getitem__(self, index: int) -> Any:
        pos, local = self._locate(index)
        data = self.reader.read(pos, local)
        dtype = self._dtypes[pos]
        return data if dtype is None else _array(data, dtype)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """Read documents in one gather per cache."""
        ids = np.asarray(indices, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"a document index of {indices} is out of range for {len(self)} documents")
        pos = np.searchsorted(self._starts, ids, side="right") - 1
        data = self.reader.read_many(pos, ids - self._starts[pos])
        dtypes = self._dtypes
        return [d if dtypes[p] is None else _array(d, dtypes[p]) for d, p in zip(data, pos.tolist())]

    def __repr__(self) -> str:
        return described(self, caches=len(self.reader.layouts), documents=int(self._counts.sum()))


DocumentDataset = DocumentStorage


def _array(payload: bytes, dtype: np.dtype) -> np.ndarray:
    """A document's tokens over its payload (its own copy of the record). A payload of one byte is CPython's one
    shared ``bytes`` object of that value: copied, so that a write through ``torch.as_tensor`` (which ignores the
    read-only flag) cannot change ``b"\\x07"`` for the whole interpreter."""
    return np.frombuffer(payload if len(payload) != 1 else bytearray(payload), dtype=dtype)
