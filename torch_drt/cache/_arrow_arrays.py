"""Numpy arrays and metadata columns as Arrow arrays without ``pa.array``, which imports pandas (0.1-0.3 s, before
a first batch or on a first write) to ask whether its argument is a pandas object."""

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


_STRING_BYTES_MAX = (1 << 31) - 1  # the most bytes a ``string`` array holds (32-bit offsets)


def column_array(values: list, arrow_type: str) -> pa.Array | pa.ChunkedArray:
    """A list of Python values of one metadata kind (``bool``, ``int64``, ``double`` or ``string``, no None) as the
    Arrow array ``pa.array(values, type=arrow_type)`` gives, buffer for buffer, without its pandas import.

    Raises:
        OverflowError: for an int outside int64 (as ``pa.array``).
        UnicodeEncodeError: for a string that is not valid UTF-8 (a lone surrogate; as ``pa.array``).
    """
    n = len(values)
    if arrow_type == "bool":
        bits = np.packbits(np.array(values, dtype=np.bool_), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)])
    if arrow_type in ("int64", "double"):
        return arrow_array(np.array(values, dtype=np.int64 if arrow_type == "int64" else np.float64))
    if arrow_type != "string":
        raise TypeError(f"{arrow_type=} is not a metadata column type")
    encoded = [v.encode() for v in values]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, n), out=offsets[1:])
    if offsets[-1] > _STRING_BYTES_MAX:  # pyarrow's own chunking
        return pa.array(values, type=pa.string())
    data = b"".join(encoded)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


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
