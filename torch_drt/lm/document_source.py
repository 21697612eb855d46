"""DocumentSource: token documents of a torch_drt document storage (a sample cache of arrays)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_drt.cache.errors import CacheCorruptError
from torch_drt.describe import described
from torch_drt.lm.source import TokenSource
from torch_drt.storage.document import DocumentStorage


class DocumentSource(TokenSource):
    """Documents of a ``DocumentStorage`` written with a dtype; lengths come from its ``length`` column.

    The documents of a sequence are read together (one index gather), and the last one is kept, so the
    consecutive pieces of a long document cost one read. A document shorter than its recorded length, or not a
    whole number of tokens, raises ``CacheCorruptError``.

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
        type(self).__init__(self, state["storage"])

    def __len__(self) -> int:
        return len(self._lengths)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def _path(self, doc: int):
        return self.storage.reader.layouts[int(np.searchsorted(self._ends, doc, side="right"))].path

    def _fetch(self, docs: list[int]) -> list[np.ndarray]:
        try:
            arrays = self.storage.arrays(docs)
        except ValueError:  # a payload that is not a whole number of elements: name it
            for doc in docs:
                try:
                    self.storage.arrays([doc])
                except ValueError as e:
                    raise CacheCorruptError(self._path(doc), f"document {doc}: {e}") from None
            raise
        for doc, tokens in zip(docs, arrays):
            if len(tokens) != self._lengths[doc]:
                raise CacheCorruptError(
                    self._path(doc),
                    f"document {doc} holds {len(tokens)} tokens but its length column says {self._lengths[doc]}",
                )
        return arrays

    def read(self, doc: int, start: int, n: int) -> np.ndarray:
        return self.read_plan([doc, start, n])[0]

    def read_plan(self, plan: Sequence[int]) -> list[np.ndarray]:
        docs = plan[0::3]
        found = {} if self._last is None else {self._last[0]: self._last[1]}
        missing = [d for d in dict.fromkeys(docs) if d not in found]
        if missing:
            found.update(zip(missing, self._fetch(missing)))
        self._last = (docs[-1], found[docs[-1]])  # the piece most likely continued by the next sequence
        return [found[plan[i]][plan[i + 1] : plan[i + 1] + plan[i + 2]] for i in range(0, len(plan), 3)]

    def __repr__(self) -> str:
        return described(self, self.storage)
