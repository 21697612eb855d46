"""Numpy arrays as Arrow arrays without ``pa.array``, which imports pandas (0.1-0.3 s, before a first batch) to ask
whether its argument is a pandas object."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def arrow_array(values: np.ndarray) -> pa.Array:
    """A 1-D numpy array of numbers as an Arrow array (on a contiguous copy's buffer, or on its own when it is
    contiguous): what ``pa.array(values)`` gives for it, without nulls."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iuf":
        raise TypeError(f"expected a 1-D numeric array, got {values.ndim}-D {values.dtype}")
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


_NUMPY = {pa.from_numpy_dtype(np.dtype(c)): np.dtype(c) for c in "bBhHiIlLqQefd"}


def numpy_view(array: pa.Array) -> np.ndarray:
    """A read-only numpy view of an Arrow array of numbers without nulls: what
    ``array.to_numpy(zero_copy_only=True)`` gives, without its pandas import.

    Raises:
        TypeError: for another type, or an array with nulls.
    """
    dtype = _NUMPY.get(array.type)
    if dtype is None or array.null_count:
        raise TypeError(f"expected numbers without nulls, got {array.type} with {array.null_count} null(s)")
    data = array.buffers()[1]
    if data is None or not len(array):  # (an empty array may come without a data buffer)
        view = np.empty(0, dtype)
    else:
        view = np.frombuffer(data, dtype=dtype, count=len(array) + array.offset)[array.offset :]
    view.flags.writeable = False
    return view
