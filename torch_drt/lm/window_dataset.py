"""PackedWindows: a token stream's windows as packed sequences, map-style (random access, the loader's order)."""

from __future__ import annotations

import numpy as np

from torch_drt.describe import described
from torch_drt.lm.packed import PackedSequence
from torch_drt.lm.token_stream_source import TokenStreamSource
from torch_drt.storage.token_stream import TokenStreamStorage


class PackedWindows:
    """Item i is window i of the stream, ``[i*L, (i+1)*L)``, as a ``PackedSequence`` (the last one padded).

    Concatenate-and-chunk of a stream needs no planning: every window is addressable, so this map-style dataset
    lets ``StatefulDataLoader`` shuffle, split ranks and checkpoint by position, with batches fetched on its
    workers. Shuffled with seed s, a loader over it yields the same global stream as
    ``PackerNode(storage, L, shuffle=True, seed=s)`` (both use the keyed permutation of (s, epoch)).

    Args:
        storage: the stream.
        sequence_length: ``L``.
        pad_id: the token id of padding.
    """

    def __init__(self, storage: TokenStreamStorage, sequence_length: int, pad_id: int = 0) -> None:
        self.source = TokenStreamSource(storage, sequence_length)
        self.sequence_length, self.pad_id = sequence_length, pad_id
        self._total, self._len = storage.total_elements, len(self.source)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> PackedSequence:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[PackedSequence]:
        length, total, count, read = self.sequence_length, self._total, self._len, self.source.read
        indices = np.asarray(indices, dtype=np.int64).tolist()
        if indices and (min(indices) < 0 or max(indices) >= count):
            bad = next(i for i in indices if not 0 <= i < count)
            raise IndexError(f"window {bad} is out of range for {count} windows")
        full = total // length  # windows below ``full`` hold ``length`` tokens
        if not indices or max(indices) < full:  # the batch's windows at once: one slice each, nothing per token
            return PackedSequence.wholes(self.source.storage.windows([i * length for i in indices], length), length)
        return [  # the last window is padded
            PackedSequence.whole(read(i, 0, length)) if i < full
            else PackedSequence.from_pieces([read(i, 0, total - i * length)], length, self.pad_id, self.source.dtype)
            for i in indices
        ]

    def __repr__(self) -> str:
        return described(self, self.source.storage, sequence_length=self.sequence_length, pad_id=self.pad_id)
