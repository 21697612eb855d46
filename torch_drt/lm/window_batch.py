"""WindowBatch: a batch of a token stream's windows as packed sequences, built when read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from torch_drt.describe import described
from torch_drt.lm.packed import PackedSequence, _stack

if TYPE_CHECKING:
    from torch_drt.lm.window_dataset import PackedWindows


class WindowBatch(Sequence[PackedSequence]):
    """The ``PackedSequence`` items of windows ``indices`` of ``windows``, in order: what
    ``PackedWindows.__getitems__`` returns.

    A read-only sequence (``len``, indexing, slicing, iteration, as a list of the items): the items, each with
    arrays of its own, are built the first time one is read. ``collate_packed`` reads none of them: it copies the
    tokens from the stream into the batch at once (``packed_tokens``), so a batch of whole windows costs one copy
    per field. It pickles as the list of its items.

    Args:
        windows: the dataset.
        indices: window indices, each checked to be in range.
        whole: whether every window holds ``L`` tokens (none is the padded last one).
    """

    __slots__ = ("_items", "indices", "whole", "windows")

    def __init__(self, windows: PackedWindows, indices: list[int], whole: bool) -> None:
        self.windows, self.indices, self.whole = windows, indices, whole
        self._items: list[PackedSequence] | None = None

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, i: int) -> PackedSequence: ...

    @overload
    def __getitem__(self, i: slice) -> list[PackedSequence]: ...

    def __getitem__(self, i: int | slice) -> PackedSequence | list[PackedSequence]:
        return self.items()[i]

    def __iter__(self) -> Iterator[PackedSequence]:
        return iter(self.items())

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (self.items(),)

    def __repr__(self) -> str:
        return described(self, self.windows, indices=self.indices)

    @property
    def sequence_length(self) -> int:
        """``L``, the length of every item."""
        return self.windows.sequence_length

    @property
    def dtype(self) -> np.dtype:
        """The stream's token dtype."""
        return self.windows.source.dtype

    def items(self) -> list[PackedSequence]:
        """The items, built on the first call, each with arrays of its own (a user's collate may hand them to
        ``torch.from_numpy``, which ignores numpy's read-only flag: a view of the stream's map, or of the fields
        whole windows share, would crash on a write or change every window); the last window padded."""
        if self._items is None:
            w, length = self.windows, self.sequence_length
            read, total = w.source.storage.window, w.source.storage.total_elements
            native = self.dtype.newbyteorder("=")  # (torch takes no other byte order)
            self._items = [
                PackedSequence.from_pieces([read(s, min(length, total - s))], length, w.pad_id, native)
                for s in (i * length for i in self.indices)
            ]
        return self._items

    def packed_tokens(self, dtype: np.dtype) -> np.ndarray | None:
        """The items' tokens as the rows of a fresh ``(len(self), L)`` array of ``dtype`` (cast as assignment
        casts), when every window is whole; None when one is padded.

        Consecutive windows are one stretch of the stream, copied at once; others one slice each.
        """
        indices = self.indices
        if not self.whole or not indices:
            return None
        windows = self.windows
        storage, length, first, n = windows.source.storage, windows.sequence_length, indices[0], len(indices)
        if indices[-1] - first == n - 1 and indices == list(range(first, first + n)):  # one stretch of the stream
            return np.array(storage.window(first * length, n * length).reshape(n, length), dtype)
        return _stack(storage.windows([i * length for i in indices], length), (n, length), dtype)
