"""Item indices checked once: an int in ``[0, length)``, or a batch of them as Python ints.

Two rules, on purpose: ``check_index`` (a source's item, an index a user types) takes only an int or a numpy
integer, so a bool, a float or a tensor is refused; ``check_indices`` (a map-style dataset's batch from a sampler)
takes what Python's own sequences take (``operator.index``: a bool, a numpy or a one-element torch integer too).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np


def check_index(index: Any, length: int) -> int:
    """``index`` as an int.

    Raises:
        TypeError: ``index`` is not an int or a numpy integer (a bool, float or str is refused, not converted).
        IndexError: ``index`` is outside ``[0, length)``.
    """
    if type(index) is int and 0 <= index < length:  # the common case, first
        return index
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise TypeError(f"an item index must be an int, got {type(index).__name__}")
    index = int(index)
    if not 0 <= index < length:
        raise IndexError(f"index {index} is out of range for {length} items")
    return index


def check_indices(indices: Iterable[Any], length: int, what: str = "items") -> list[int]:
    """``indices`` as a new list of Python ints (``operator.index``: a numpy or torch integer becomes an int, a
    float is refused), each in ``[0, length)``. A numpy int32 index would wrap ``index * L`` past 2**31; the list is
    the caller's own, so a sampler that refills the one it gave changes nothing.

    Raises:
        TypeError: an index is not an integer.
        IndexError: the first index outside ``[0, length)`` ("... out of range for {length} {what}").
    """
    out = list(map(operator.index, indices))
    if out and (min(out) < 0 or max(out) >= length):
        bad = next(i for i in out if not 0 <= i < length)
        raise IndexError(f"index {bad} is out of range for {length} {what}")
    return out
