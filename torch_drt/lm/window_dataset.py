"""PackedWindows: a token stream's windows as packed sequences, map-style (random access, the loader's order)."""

from __future__ import annotations

from torch_drt._indices import check_indices
from torch_drt.describe import described
from torch_drt.lm.packed import PackedSequence
from torch_drt.lm.token_stream_source import TokenStreamSource
from torch_drt.lm.window_batch import WindowBatch
from torch_drt.storage.token_stream import TokenStreamStorage


class PackedWindows:
    """Item i is window i of the stream, ``[i*L, (i+1)*L)``, as a ``PackedSequence`` (the last one padded).

    Concatenate-and-chunk of a stream needs no planning: every window is addressable, so this map-style dataset
    lets ``StatefulDataLoader`` shuffle, split ranks and checkpoint by position, with batches fetched on its
    workers. Shuffled with seed s, a loader over it yields the same global stream as
    ``PackerNode(storage, L, shuffle=True, seed=s)`` (both use the keyed permutation of (s, epoch)).
    ``__getitems__`` returns a ``WindowBatch``, a sequence of the items that builds them when read:
    ``collate_packed`` copies its tokens from the stream into the batch without building them.

    Args:
        storage: the stream.
        sequence_length: ``L``.
        pad_id: the token id of padding.
    """

    def __init__(self, storage: TokenStreamStorage, sequence_length: int, pad_id: int = 0) -> None:
        self.source = TokenStreamSource(storage, sequence_length)
        self.sequence_length, self.pad_id = sequence_length, pad_id
        self._len = len(self.source)
        self.full = storage.total_elements // sequence_length  # windows below ``full`` hold ``L`` tokens

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> PackedSequence:
        """Window ``index`` in arrays of its own (``WindowBatch.items``): torch's loader without batching hands
        them to ``torch.as_tensor``, which ignores numpy's read-only flag."""
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> WindowBatch:
        indices = check_indices(indices, self._len, "windows")  # (a list of its own: the batch reads it later)
        return WindowBatch(self, indices, max(indices, default=0) < self.full)

    def __repr__(self) -> str:
        return described(self, self.source.storage, sequence_length=self.sequence_length, pad_id=self.pad_id)
