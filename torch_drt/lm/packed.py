"""PackedSequence: one fixed-length training sequence built from document pieces, with explicit padding."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

PAD_SEGMENT = 0
"""The segment id of padding; documents in a sequence are numbered 1, 2, 3, ..."""

_new = tuple.__new__  # a NamedTuple's own __new__ costs a Python call per sequence


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

    ``PackerNode``'s and ``PackedWindows``' items own their arrays. ``whole()`` gives read-only views (of a
    memory-mapped stream, or shared constants): copy them before writing, and before ``torch.from_numpy`` or
    ``torch.as_tensor``, which ignore the read-only flag (``collate_packed`` copies).
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

        A few slice copies per piece, no per-token Python work. The arrays are the sequence's own, a single piece
        of exactly ``length`` included (``whole()`` is the view of one).

        Raises:
            ValueError: when the pieces hold more than ``length`` tokens.
        """
        if len(pieces) == 1 and len(pieces[0]) == length:  # copies of the piece and of the shared fields
            return _new(cls, (np.array(pieces[0], dtype=dtype), *map(np.array, _constants(length))))
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
    def whole(cls, piece: np.ndarray) -> PackedSequence:
        """One piece that fills the sequence (``L = len(piece)``), without a copy: a read-only view of it and the
        shared constant fields (``collate_packed`` recognises them)."""
        if piece.flags.writeable:  # a view of the source: writing to it must not reach the source
            piece = piece.view()
            piece.flags.writeable = False
        return _new(cls, (piece, *_constants(len(piece))))

    @classmethod
    def padding(cls, length: int, pad_id: int, dtype: Any) -> PackedSequence:
        """A sequence of padding only (what a rank receives past the end of a stream)."""
        return cls.from_pieces([], length, pad_id, dtype)


def _stack(arrays: Sequence[np.ndarray], shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """A fresh ``shape`` array holding the 1-D ``arrays`` as rows: one copy, cast as assignment casts."""
    out = np.empty(shape, dtype=dtype)
    np.concatenate(arrays, out=out.reshape(-1), casting="unsafe")
    return out


def _whole_fields(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fresh ``shape`` segment ids, positions and loss mask of ``shape[0]`` whole sequences of ``shape[1]``."""
    segment_ids, positions, loss_mask = _constants(shape[1])
    out = np.empty(shape, np.int32), np.empty(shape, np.int32), np.empty(shape, np.bool_)
    out[0][...] = segment_ids  # (assignment: no Python-level dispatch, ~15% faster than ``np.copyto``)
    out[1][...] = positions
    out[2][...] = loss_mask
    return out


def collate_packed(items: Sequence[PackedSequence]) -> dict[str, Any]:
    """Stack packed sequences into ``(B, L)`` torch tensors keyed by field name.

    Tokens keep their dtype, except that uint16 widens to int32 and uint32 and uint64 become int64 (torch's
    support for those is limited; a uint64 token of 2**63 or more is a ValueError), in the machine's byte order;
    segment ids and positions are int32, the loss mask bool. An empty list (a padded rank) gives an
    empty dict. Each field is one copy into a fresh buffer, nothing per token or per row in Python; whole
    sequences' segment ids, positions and mask are filled from one row. A ``WindowBatch`` of whole windows
    (``PackedWindows``) has its tokens copied from the stream into the batch without building its items.

    Raises:
        ValueError: when the sequences differ in length.
    """
    gather = getattr(items, "packed_tokens", None)  # a WindowBatch
    if gather is not None:
        dtype = items.dtype  # type: ignore[attr-defined]
        tokens = gather(_batch_dtype(dtype))
        if tokens is not None:  # whole windows
            return _tensors(_in_range(tokens, dtype), _whole_fields(tokens.shape))
    if not items:
        return {}
    columns, segment_ids, positions, loss_mask = zip(*items)
    lengths = set(map(len, columns))
    if len(lengths) > 1:
        raise ValueError(f"cannot collate packed sequences of lengths {sorted(lengths)}")
    shape = (len(items), len(columns[0]))
    rows = _constants(shape[1])
    fields: Sequence[np.ndarray]
    if all(s is rows[0] for s in segment_ids):  # whole sequences: the other fields are known
        fields = _whole_fields(shape)
    else:
        fields = [_stack(arrays, shape, arrays[0].dtype) for arrays in (segment_ids, positions, loss_mask)]
    dtype = columns[0].dtype
    return _tensors(_in_range(_stack(columns, shape, _batch_dtype(dtype)), dtype), fields)


def _batch_dtype(dtype: np.dtype) -> np.dtype:
    """The batch's token dtype: uint16 widens to int32, uint32 and uint64 become int64 (what embeddings take),
    others are kept; in the machine's byte order (torch takes no other)."""
    if dtype.kind == "u" and dtype.itemsize > 1:
        return np.dtype(np.int32 if dtype.itemsize == 2 else np.int64)
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _in_range(tokens: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``tokens`` cast from a ``dtype`` stream, checked where the cast can wrap (uint64 to int64).

    Raises:
        ValueError: a uint64 token of 2**63 or more.
    """
    if dtype.kind == "u" and dtype.itemsize == 8 and tokens.size and tokens.min() < 0:
        raise ValueError("a uint64 token of 2**63 or more does not fit the batch's int64 tokens")
    return tokens


def _tensors(tokens: np.ndarray, fields: Sequence[np.ndarray]) -> dict[str, Any]:
    """The batch: ``tokens`` and the segment ids, positions and loss mask (``fields``) as tensors, no copy."""
    from_numpy = torch.from_numpy
    return {
        "tokens": from_numpy(tokens),
        "segment_ids": from_numpy(fields[0]),
        "positions": from_numpy(fields[1]),
        "loss_mask": from_numpy(fields[2]),
    }
