"""Numpy <-> Arrow without pyarrow's pandas import: the same arrays as ``pa.array`` and ``to_numpy`` (the oracle)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from torch_drt.cache._arrow_arrays import arrow_array, numpy_view


@pytest.mark.parametrize("code", list("bBhHiIlLqQfd"))
def test_arrow_array_and_numpy_view_match_pyarrows_own(code):
    values = (np.arange(-5, 15) * 3).astype(code)
    array = arrow_array(values)
    assert array.equals(pa.array(values)) and array.type == pa.array(values).type
    strided = values[::2]  # not contiguous: copied
    assert arrow_array(strided).equals(pa.array(strided))
    part = array.slice(3, 7)  # an offset into the buffer
    view = numpy_view(part)
    expected = part.to_numpy(zero_copy_only=True)
    assert view.dtype == expected.dtype and np.array_equal(view, expected)
    assert not view.flags.writeable


def test_empty_arrays_both_ways():
    assert arrow_array(np.zeros(0, np.int32)).equals(pa.array([], pa.int32()))
    view = numpy_view(pa.array([1, 2], pa.int64()).slice(2, 0))
    assert view.dtype == np.int64 and view.shape == (0,)


def test_numpy_view_refuses_nulls_and_other_types():
    with pytest.raises(TypeError, match="1 null"):
        numpy_view(pa.array([1, None, 3], pa.int64()))
    with pytest.raises(TypeError, match="string"):
        numpy_view(pa.array(["a"]))
    with pytest.raises(TypeError, match="2-D"):
        arrow_array(np.zeros((2, 2)))


_COLUMNS = {
    "bool": [True, False, True, True, False, False, False, True, True],
    "int": [0, -1, 2**63 - 1, -(2**63), 7],
    "float": [0.5, -1e300, float("inf"), float("nan"), -0.0],
    "string": ["", "a", "ünï", "x" * 100, "日本"],
}


@pytest.mark.parametrize("kind", sorted(_COLUMNS))
def test_column_array_is_pyarrows_own_to_the_ipc_byte(kind):
    from torch_drt.cache._arrow_arrays import column_array
    from torch_drt.cache._format import KIND_TO_ARROW

    values = _COLUMNS[kind]
    for rows in (values, values[:1], values * 3):
        ours, theirs = column_array(rows, KIND_TO_ARROW[kind]), pa.array(rows, type=KIND_TO_ARROW[kind])
        assert ours.type == theirs.type and ours.to_pylist().__repr__() == theirs.to_pylist().__repr__()

        def ipc_bytes(array):
            sink = pa.BufferOutputStream()
            table = pa.Table.from_arrays([array], names=["c"])
            with pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
            return sink.getvalue().to_pybytes()

        assert ipc_bytes(ours) == ipc_bytes(theirs)


def test_column_array_refuses_what_pyarrow_refuses_with_its_error():
    from torch_drt.cache._arrow_arrays import column_array

    with pytest.raises(OverflowError):
        column_array([1, 2**64], "int64")
    with pytest.raises(UnicodeEncodeError):
        column_array(["a\udc80"], "string")

