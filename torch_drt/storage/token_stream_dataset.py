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

    ``dataset[i]`` is a fresh array (torch's loader without batching hands it to ``torch.as_tensor``, which ignores
    numpy's read-only flag: a write to a view of the read-only map would crash the interpreter).
    ``__getitems__`` (a batch, which ``collate_fn`` copies into one array) gives read-only views of the stream;
    both are in the machine's byte order (a stream of the other is copied: torch takes no other).

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
        length = self.sequence_length
        windows = self.storage.windows([i * length for i in check_indices(indices, len(self), "sequences")], length)
        return windows if self._native is None else [w.astype(self._native) for w in windows]

    def __repr__(self) -> str:
        return described(self, self.storage, sequence_length=self.sequence_length)
