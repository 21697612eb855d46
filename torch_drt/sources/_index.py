"""Item indices: an int (or a numpy integer) in ``[0, length)``, nothing that merely converts to one."""

from __future__ import annotations

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
