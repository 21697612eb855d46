"""PackedSequence: one fixed-length training sequence built from document pieces, with explicit padding."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

PAD_SEGMENT = 0
"""The segment id of padding; documents in a sequence are numbered 1, 2, 3, ..."""


@functools.lru_cache(maxsize=16)
def _constants(length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read-only segment ids, positions and loss mask of a sequence that is one whole piece of ``length``."""
    ones = np.ones(length, dtype=np.int32)
    positions = np.arange(length, dtype=np.int32)
    mask = np.ones(length, dtype=bool)
    for a in (ones, positions, mask):
        a.flags.writeable = False
    return ones, positions, mask


class PackedSequence(NamedTuple):
    """A sequence of ``L`` tokens made of whole or partial documents, then padding.

    Attributes:
        tokens: ``(L,)`` token ids; padding holds the packer's ``pad_id``.
        segment_ids: ``(L,)`` int32: 1 for the first document piece, 2 for the next, ...; ``PAD_SEGMENT`` (0) on
            padding.
        positions: ``(L,)`` int32: the position of each token within its piece (restarting at 0 at each piece);
            0 on padding.
        loss_mask: ``(L,)`` bool: True on tokens, False on padding.

    The arrays may be read-only views (of a memory-mapped stream, or shared constants): copy before writing.
    """

    tokens: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    loss_mask: np.ndarray

    @property
    def num_tokens(self) -> int:
        """Tokens that are not padding."""
        return int(np.count_nonzero(self.loss_mask))

    @classmethod
    def from_pieces(cls, pieces: Sequence[np.ndarray], length: int, pad_id: int, dtype: Any) -> PackedSequence:
        """Concatenate ``pieces`` (1-D token arrays, ``sum(len) <= length``) and pad to ``length``.

        A few slice copies per piece, no per-token Python work. A single piece of exactly ``length`` is returned
        without a copy.

        Raises:
            ValueError: when the pieces hold more than ``length`` tokens.
        """
        if len(pieces) == 1 and len(pieces[0]) == length:
            piece = pieces[0] if pieces[0].dtype == dtype else pieces[0].astype(dtype)
            if piece.flags.writeable:  # a view of the source: writing to it must not reach the source
                piece = piece.view()
                piece.flags.writeable = False
            return cls(piece, *_constants(length))
        arange = _constants(length)[1]
        tokens = np.empty(length, dtype=dtype)
        segment_ids = np.zeros(length, dtype=np.int32)
        positions = np.zeros(length, dtype=np.int32)
        a = 0
        for k, piece in enumerate(pieces, 1):  # a few slice copies per piece, nothing per token
            b = a + len(piece)
            if b > length:
                raise ValueError(f"pieces of {b}+ tokens do not fit a sequence of {length}")
            tokens[a:b] = piece
            segment_ids[a:b] = k
            positions[a:b] = arange[: b - a]
            a = b
        tokens[a:] = pad_id
        loss_mask = np.zeros(length, dtype=bool)
        loss_mask[:a] = True
        return cls(tokens, segment_ids, positions, loss_mask)

    @classmethod
    def padding(cls, length: int, pad_id: int, dtype: Any) -> PackedSequence:
        """A sequence of padding only (what a rank receives past the end of a stream)."""
        return cls.from_pieces([], length, pad_id, dtype)


def _stack(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    out = np.empty((len(arrays), len(arrays[0])), dtype=dtype)
    for row, array in zip(out, arrays):  # one row copy each: cheaper than np.stack's checks
        row[...] = array
    return out


def collate_packed(items: Sequence[PackedSequence]) -> dict[str, Any]:
    """Stack packed sequences into ``(B, L)`` torch tensors keyed by field name.

    Tokens keep their dtype, except that uint16 widens to int32 and uint32 to int64 (torch's support for those
    is limited); segment ids and positions are int32, the loss mask bool. An empty list (a padded rank) gives an
    empty dict.

    Raises:
        ValueError: when the sequences differ in length.
    """
    import torch

    if not items:
        return {}
    length = len(items[0].tokens)
    dtype = items[0].tokens.dtype
    if dtype.kind == "u" and dtype.itemsize > 1:
        dtype = np.dtype(np.int32 if dtype.itemsize == 2 else np.int64)
    try:
        out = {"tokens": torch.from_numpy(_stack([item.tokens for item in items], dtype))}
    except ValueError:
        lengths = sorted({len(item.tokens) for item in items})
        raise ValueError(f"cannot collate packed sequences of lengths {lengths}") from None
    ones, positions, _ = _constants(length)
    if all(item.segment_ids is ones for item in items):  # whole sequences: the other fields are known
        shape = (len(items), length)
        out["segment_ids"] = torch.ones(shape, dtype=torch.int32)
        out["positions"] = torch.from_numpy(np.broadcast_to(positions, shape).copy())
        out["loss_mask"] = torch.ones(shape, dtype=torch.bool)
        return out
    for name in ("segment_ids", "positions", "loss_mask"):
        arrays = [getattr(item, name) for item in items]
        out[name] = torch.from_numpy(_stack(arrays, arrays[0].dtype))
    return out
