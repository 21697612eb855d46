"""DocumentSource: token documents of a torch_drt document storage (a sample cache of arrays)."""

from __future__ import annotations

import numpy as np

from torch_drt.cache.errors import CacheCorruptError
from torch_drt.lm.source import TokenSource
from torch_drt.storage.document import DocumentStorage

__all__ = ["DocumentSource"]


class DocumentSource(TokenSource):
    """Documents of a ``DocumentStorage`` written with a dtype; lengths come from its ``length`` column.

    The last document read is kept, so the consecutive pieces of a long document cost one read.

    Args:
        storage: the storage.

    Raises:
        TypeError: when the storage holds bytes documents (no single dtype).
        KeyError: when it has no ``length`` column.
    """

    def __init__(self, storage: DocumentStorage) -> None:
        if storage.dtype is None:
            raise TypeError("packing needs token arrays: write the storage with DocumentStorageWriter(dtype=...)")
        self.storage = storage
        self.dtype = storage.dtype
        self._lengths = storage.lengths()
        self._ends = np.cumsum([layout.sample_count for layout in storage.reader.layouts])
        self._last: tuple[int, np.ndarray] | None = None

    def __getstate__(self) -> dict:
        return {"storage": self.storage}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["storage"])

    def __len__(self) -> int:
        return len(self._lengths)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def _path(self, doc: int):
        return self.storage.reader.layouts[int(np.searchsorted(self._ends, doc, side="right"))].path

    def read(self, doc: int, start: int, n: int) -> np.ndarray:
        last = self._last
        if last is None or last[0] != doc:
            try:
                tokens = np.asarray(self.storage[doc])
            except ValueError as e:  # a payload that is not a whole number of elements
                raise CacheCorruptError(self._path(doc), f"document {doc}: {e}") from None
            if len(tokens) != self._lengths[doc]:
                raise CacheCorruptError(
                    self._path(doc),
                    f"document {doc} holds {len(tokens)} tokens but its length column says {self._lengths[doc]}",
                )
            last = self._last = (doc, tokens)
        return last[1][start : start + n]
