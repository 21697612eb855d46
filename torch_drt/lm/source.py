"""TokenSource: the small interface packers read documents through (one backend per module)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class TokenSource:
    """Documents of tokens: their count and lengths up front, their tokens read by slice.

    A backend implements ``__len__``, ``lengths()``, ``read()`` and sets ``dtype``; it may override
    ``read_plan()`` to fetch the pieces of a sequence together (a remote backend coalesces them into range
    requests). Packing needs only ``lengths()``, so each rank plans the whole stream and reads only its own
    sequences. A source must pickle cheaply (workers and ranks rebuild it from its location, not its bytes).

    Attributes:
        dtype: the token dtype.
        whole_documents: each document is already one sequence (at most ``L`` tokens, e.g. the windows of a
            token stream): the packer emits it as is instead of packing it.
    """

    dtype: np.dtype
    whole_documents: bool = False

    def __len__(self) -> int:
        """Number of documents."""
        raise NotImplementedError

    def lengths(self) -> np.ndarray:
        """Tokens per document, as an int64 array of ``len(self)`` (read once, without reading tokens)."""
        raise NotImplementedError

    def read(self, doc: int, start: int, n: int) -> np.ndarray:
        """Tokens ``[start, start+n)`` of document ``doc`` as a 1-D array of ``dtype`` (a view where possible).

        Raises:
            CacheCorruptError: when the stored document is shorter than its recorded length.
        """
        raise NotImplementedError

    def read_plan(self, plan: Sequence[int]) -> list[np.ndarray]:
        """The pieces of a plan ``[doc, start, n, doc, start, n, ...]``, in order."""
        return [self.read(plan[i], plan[i + 1], plan[i + 2]) for i in range(0, len(plan), 3)]
