"""ArraySource: documents held in memory as one flat token array and document offsets."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import DTypeLike

from torch_drt.describe import described
from torch_drt.lm.source import TokenSource


class ArraySource(TokenSource):
    """Document ``d`` is ``tokens[offsets[d]:offsets[d+1]]``.

    Args:
        tokens: all documents' tokens, concatenated (1-D).
        offsets: ``len + 1`` non-decreasing offsets into ``tokens``, from 0 to ``len(tokens)``.
    """

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        tokens, offsets = np.asarray(tokens), np.asarray(offsets, dtype=np.int64)
        if tokens.ndim != 1 or offsets.ndim != 1 or offsets.size < 1:
            raise ValueError(f"tokens must be 1-D and offsets 1-D and non-empty, got {tokens.shape}, {offsets.shape}")
        if offsets[0] != 0 or offsets[-1] != tokens.size or np.any(np.diff(offsets) < 0):
            raise ValueError(f"offsets must rise from 0 to len(tokens)={tokens.size}")
        self.tokens, self.offsets = tokens, offsets
        self.dtype = tokens.dtype

    @classmethod
    def from_documents(cls, documents: Iterable[np.ndarray], dtype: DTypeLike | None = None) -> ArraySource:
        """Concatenate ``documents`` (1-D arrays) into one source."""
        docs = [np.asarray(d, dtype=dtype).ravel() for d in documents]
        sizes = np.fromiter((d.size for d in docs), dtype=np.int64, count=len(docs))
        tokens = np.concatenate(docs) if docs else np.empty(0, dtype=dtype or np.int32)
        return cls(tokens, np.concatenate([[0], np.cumsum(sizes)]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def read(self, doc: int, start: int, n: int) -> np.ndarray:
        begin = int(self.offsets[doc]) + start
        return self.tokens[begin : begin + n]

    def __repr__(self) -> str:
        return described(self, documents=len(self.offsets) - 1, tokens=len(self.tokens), dtype=str(self.dtype))
