"""TokenStreamDataset: a token stream's fixed-length windows as a map-style dataset."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import numpy as np

from torch_drt.describe import described

if TYPE_CHECKING:
    from torch_drt.storage.token_stream import TokenStreamStorage


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
        index = operator.index(index)  # a Python int: a numpy int32's ``index * L`` wraps
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range for {len(self)} sequences")
        return self.storage.window(index * self.sequence_length, self.sequence_length)

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        n, length = len(self), self.sequence_length
        indices = list(map(operator.index, indices))  # Python ints: a numpy int32's ``i * length`` wraps
        if indices and not (min(indices) >= 0 and max(indices) < n):
            bad = next(i for i in indices if not 0 <= i < n)
            raise IndexError(f"index {bad} is out of range for {n} sequences")
        return self.storage.windows([i * length for i in indices], length)

    def __repr__(self) -> str:
        return described(self, self.storage, sequence_length=self.sequence_length)
