"""torch_drt._distinct against numpy's np.unique (the oracle), without importing numpy.ma."""

from __future__ import annotations

import numpy as np
import pytest
from script_runner import run_script

from torch_drt._distinct import distinct, first_seen


@pytest.mark.parametrize("values", [[], [7], [3, 3, 3], [5, 1, 5, 2, 1, 9, 0], list(range(10, 0, -1))])
def test_distinct_and_first_seen_match_np_unique(values):
    rng = np.random.default_rng(0)
    for a in (np.array(values, dtype=np.int64), rng.integers(0, 50, 1000)):
        assert np.array_equal(distinct(a), np.unique(a)) and distinct(a).dtype == a.dtype
        _, first = np.unique(a, return_index=True)
        assert np.array_equal(first_seen(a), a[np.sort(first)])


def test_they_import_no_numpy_ma():
    result = run_script("""
        import sys
        import numpy as np
        from torch_drt._distinct import distinct, first_seen

        distinct(np.array([2, 1, 2]))
        first_seen(np.array([2, 1, 2]))
        print("numpy.ma" in sys.modules)
    """, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["False"]
