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


@pytest.mark.parametrize(
    ("n", "head", "digest"),
    [
        (63, [10, 40, 55, 21, 35, 5], "83e424e3ee202250"),
        (1000, [508, 824, 311, 953, 498, 755], "af32cad4c74f52f4"),
        (4097, [3253, 2329, 1523, 426, 208, 2715], "0f4ddbf3fd3706ae"),
        (70000, [33243, 5105, 50200, 1077, 48215, 699], "97574738a9d94392"),
    ],
)
def test_orders_are_pinned(n, head, digest):
    """Checkpoints resume by recomputing orders: every way of computing one (a table for small domains, the
    network per position for large ones, any call size) gives the orders of the first release, bit for bit."""
    import hashlib

    perm = KeyedPermutation(n, seed=11, epoch=2)
    pieces = [perm(np.array([p])) for p in range(min(n, 40))]  # one position per call first
    whole = KeyedPermutation(n, seed=11, epoch=2)(np.arange(n))
    assert whole[:6].tolist() == head
    assert hashlib.sha256(whole.tobytes()).hexdigest()[:16] == digest
    assert np.concatenate(pieces).tolist() == whole[: len(pieces)].tolist()
    assert perm(np.arange(n)[::-1]).tolist() == whole[::-1].tolist()  # after single calls, one call of all


@pytest.mark.parametrize("n", [20_000, 70_000])
def test_a_table_made_after_many_small_calls_gives_the_walked_order(n):
    """A domain read one batch per call is tabulated after a few calls (the walks' fixed costs would soon exceed the
    table's): the positions before and after the table are the network's, walked per position."""
    perm = KeyedPermutation(n, seed=4, epoch=3)
    order = np.random.default_rng(0).permutation(n)
    pieces = [perm(order[i : i + 256]) for i in range(0, n, 256)]
    assert perm._table is not None and perm._table.nbytes == 4 * n  # tabulated on the way (int32)
    walked = KeyedPermutation(n, seed=4, epoch=3)._walk(order.astype(np.uint64))  # no table: the network itself
    assert np.concatenate(pieces).tolist() == walked.tolist()
    assert np.concatenate(pieces).dtype == np.int64


def test_a_large_domain_read_in_few_large_calls_is_not_tabulated_at_once():
    """A sampler's window of 65,536 positions over a 2**18 domain walks it, as before: no table of the whole
    domain before the first batch (the time to the first batch stays that of one window)."""
    perm = KeyedPermutation(70_000, seed=1)
    window = perm(np.arange(65_536))
    assert perm._table is None
    assert window.tolist() == KeyedPermutation(70_000, seed=1)(np.arange(70_000))[:65_536].tolist()


def _reference(n: int, seed: int, epoch: int, position: int) -> int:
    """The keyed network per position on Python ints (SplitMix64's finaliser per round), cycle-walked into [0, n)."""
    from torch_drt.sampling._counter import derive_key, extend_key

    def mix(x: int) -> int:
        m = (1 << 64) - 1
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & m
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)

    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = (1 << half) - 1
    keys = [extend_key(derive_key(seed, epoch), r) for r in range(6)]
    x = position
    while True:
        left, right = x >> half, x & mask
        for key in keys:
            left, right = right, left ^ (mix(right ^ key) & mask)
        x = (left << half) | right
        if x < n:
            return x


@pytest.mark.parametrize("n", [1000, 20_000, 3_000_000, 1 << 26, (1 << 34) + 5])
def test_round_tables_give_the_network_computed_per_position(n):
    """A round's function is looked up in a table where the half-words take few values (or a call asks for as many
    positions): every way gives the bits of the network computed per position (a pure-Python reference)."""
    rng = np.random.default_rng(n % 1000)
    probe = rng.integers(0, n, 64, dtype=np.int64)
    expected = [_reference(n, 7, 5, int(p)) for p in probe]
    assert KeyedPermutation(n, seed=7, epoch=5)(probe).tolist() == expected  # a small call
    perm = KeyedPermutation(n, seed=7, epoch=5)
    big = np.concatenate([probe, rng.integers(0, n, 9000, dtype=np.int64)])
    assert perm(big)[:64].tolist() == expected  # a call of 9,064 positions: round tables up to 2**13 half-words
    assert (perm._round_tables is not None) == (n < 1 << 34)  # not for half-words of 2**18 values
    assert perm(probe).tolist() == expected  # a later small call with the tables made
