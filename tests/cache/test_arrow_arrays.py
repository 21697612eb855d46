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
