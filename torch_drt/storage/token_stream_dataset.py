"""TokenStreamDataset: a token stream's fixed-length windows as a map-style dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torch_drt._indices import check_indices
from torch_drt.describe import described

if TYPE_CHECKING:
    from torch_drt.storage.token_stream import TokenStreamStorage


class TokenStreamDataset:
    """Sample i of a stream is the window [i*L, (i+1)*L) with L = ``sequence_length``.

    Samples are fresh, writable arrays in the machine's byte order (torch takes no other): ``dataset[i]`` a copy of
    its window, ``__getitems__`` the rows of one array the batch's windows are copied into. Views of the stream's
    read-only map would reach ``torch.as_tensor`` or ``torch.from_numpy`` (torch's loader without batching, its
    ``default_collate``, a user's collate), which ignore numpy's read-only flag: torch warned on each, and a
    write crashed the interpreter.

    Args:
        storage: the stream.
        sequence_length: elements per sample.
    """

    def __init__(self, storage: TokenStreamStorage, sequence_length: int) -> None:
        if not isinstance(sequence_length, int) or sequence_length < 1:
            raise ValueError(f"{sequence_length=} must be an int > 0")
        self.storage = storage
        self.sequence_length = sequence_length
        self._native = None if storage.dtype.isnative else storage.dtype.newbyteorder("=")  # (torch takes no other)

    def __len__(self) -> int:
        return self.storage.total_elements // self.sequence_length

    def __getitem__(self, index: int) -> np.ndarray:
        (index,) = check_indices((index,), len(self), "sequences")
        window = self.storage.window(index * self.sequence_length, self.sequence_length)
        return np.array(window, dtype=self._native)  # (a copy; None keeps the dtype)

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        length, starts = self.sequence_length, check_indices(indices, len(self), "sequences")
        out = np.empty((len(starts), length), dtype=self.storage.dtype if self._native is None else self._native)
        if starts:
            np.concatenate(self.storage.windows([i * length for i in starts], length), out=out.reshape(-1))
        return list(out)

    def __repr__(self) -> str:
        return described(self, self.storage, sequence_length=self.sequence_length)
