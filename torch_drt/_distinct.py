"""Distinct values of 1-D integer arrays without ``np.unique``: numpy 2's ``np.unique`` imports ``numpy.ma`` on its
first call (20 ms of CPU in each process; a loading process's first batch paid it)."""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (``np.unique(values)`` for a 1-D array)."""
    ordered = np.sort(np.asarray(values), kind="stable")
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def first_seen(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` in the order of their first occurrence."""
    values = np.asarray(values)
    if len(values) < 2:
        return values.copy()
    order = np.argsort(values, kind="stable")  # equal values keep their order: the first of each run comes first
    ordered = values[order]
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return values[np.sort(order[keep])]
