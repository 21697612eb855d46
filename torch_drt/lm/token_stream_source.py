"""TokenStreamSource: a token stream read as consecutive windows, each a document of the packer."""

from __future__ import annotations

import numpy as np

from torch_drt.describe import described
from torch_drt.lm.source import TokenSource
from torch_drt.storage.token_stream import TokenStreamStorage


class TokenStreamSource(TokenSource):
    """Document ``d`` is the window ``[d*window, (d+1)*window)`` of the stream (the last one may be shorter).

    Each window is one sequence (``whole_documents``): with ``window`` equal to the sequence length this is
    concatenate-and-chunk, the last window padded; shuffling the packer's documents shuffles the windows. Reads
    are views of the memory-mapped shards (a copy across a shard edge).

    Args:
        storage: the stream.
        window: tokens per document.
    """

    def __init__(self, storage: TokenStreamStorage, window: int) -> None:
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"{window=} must be an int > 0")
        self.storage, self.window = storage, window
        self.dtype = storage.dtype
        self.whole_documents = True

    def __len__(self) -> int:
        return -(-self.storage.total_elements // self.window)

    def lengths(self) -> np.ndarray:
        n, total = len(self), self.storage.total_elements
        out = np.full(n, self.window, dtype=np.int64)
        if n:
            out[-1] = total - (n - 1) * self.window
        return out

    def read(self, doc: int, start: int, n: int) -> np.ndarray:
        return self.storage.window(doc * self.window + start, n)

    def __repr__(self) -> str:
        return described(self, self.storage, window=self.window)
