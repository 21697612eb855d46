"""KeyedPermutation: a bijection of [0, n) keyed by (seed, epoch), any position computed directly."""

from __future__ import annotations

import numpy as np
import pytest

from torch_drt.sampling.permutation import KeyedPermutation


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 1000, 4097])
def test_is_a_bijection_of_the_domain(n):
    out = KeyedPermutation(n, seed=3, epoch=1)(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    assert out.dtype == np.int64


def test_positions_are_computed_independently():
    perm = KeyedPermutation(1000, seed=9, epoch=0)
    whole = perm(np.arange(1000))
    assert [int(perm(p)) for p in (0, 1, 500, 999)] == [int(whole[p]) for p in (0, 1, 500, 999)]
    assert perm(np.array([[5, 6], [7, 8]])).tolist() == [[whole[5], whole[6]], [whole[7], whole[8]]]
    assert perm(np.arange(300, 310)).tolist() == whole[300:310].tolist()


def test_seed_and_epoch_give_other_orders_and_reproduce():
    base = KeyedPermutation(500, seed=1, epoch=0)(np.arange(500)).tolist()
    assert base == KeyedPermutation(500, seed=1, epoch=0)(np.arange(500)).tolist()
    assert base != KeyedPermutation(500, seed=2, epoch=0)(np.arange(500)).tolist()
    assert base != KeyedPermutation(500, seed=1, epoch=1)(np.arange(500)).tolist()
    assert base != list(range(500))


def test_looks_shuffled():
    out = KeyedPermutation(10_000, seed=5)(np.arange(10_000))
    fixed_points = int(np.sum(out == np.arange(10_000)))
    assert fixed_points < 20  # a uniform permutation has one on average
    rho = np.corrcoef(np.arange(10_000), out)[0, 1]
    assert abs(rho) < 0.05


def test_validation():
    with pytest.raises(ValueError, match="n=0 must be >= 1"):
        KeyedPermutation(0, seed=1)
    with pytest.raises(IndexError, match=r"position 10 is outside \[0, 10\)"):
        KeyedPermutation(10, seed=1)(np.array([3, 10]))
