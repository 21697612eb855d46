"""EpochPermutations: stream position p is row KeyedPermutation(n, seed, p // n)(p % n), in any call shape."""

from __future__ import annotations

import numpy as np

from torch_drt.sampling.permutation import KeyedPermutation
from torch_drt.sampling.shard_order import EpochPermutations


def test_rows_follow_each_epochs_permutation_within_and_across_epochs():
    n, seed = 1000, 7
    expected = np.concatenate([KeyedPermutation(n, seed, e)(np.arange(n)) for e in range(4)])
    order = EpochPermutations(n, seed)
    calls = [(0, 256), (256, 256), (900, 256), (1990, 1020), (3999, 1), (2500, 0)]  # inside, across, two edges
    for start, count in calls:
        rows = order.draws(start, count)
        assert rows.dtype == np.int64 and rows.shape == (count,)
        assert rows.tolist() == expected[start : start + count].tolist()
    scattered = np.array([3500, 10, 1999, 2000, 10])  # not in order, epochs mixed
    assert order.at(scattered).tolist() == expected[scattered].tolist()
