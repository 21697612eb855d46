"""dataloader-rs's argument checks and sampler reading, for ``PyDataloader``."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

_SAMPLER_CHUNK = 1 << 16  # sampler items read between two looks at signals


def count(name: str, value: Any, low: int) -> int:
    """``value`` as an int >= ``low`` (``TypeError`` for a non-int, ``ValueError`` below ``low``)."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})") from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool (numpy's included)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    return bool(value)


def read_whole(sampler: Iterable[int]) -> list[Any]:
    """Every item of ``sampler``, read in chunks: Ctrl-C between two stops an endless one (``list()`` of a C
    iterator such as ``itertools.count()`` never looks at signals)."""
    items: list[Any] = []
    iterator = iter(sampler)
    while chunk := list(itertools.islice(iterator, _SAMPLER_CHUNK)):
        items += chunk
    return items


def checked_indices(items: list[Any], n: int) -> np.ndarray:
    """A sampler's items as int64 indices, each an int in ``[0, n)``."""
    values = np.asarray(items) if items else np.empty(0, dtype=np.int64)
    if values.ndim != 1 or values.dtype.kind not in "iu":  # mixed, bools or not ints: item by item
        for position, item in enumerate(items):
            try:
                operator.index(item)
            except TypeError:
                raise TypeError(
                    f"sampler item {position} is {item!r} ({type(item).__name__}): samplers must yield ints"
                ) from None
        values = np.asarray([operator.index(v) for v in items], dtype=object)
    bad = (values < 0) | (values >= n)
    if bad.any():
        position = int(np.argmax(bad))
        raise ValueError(f"sampler item {position} is {items[position]!r}: indices must be in [0, {n})")
    return values.astype(np.int64)
