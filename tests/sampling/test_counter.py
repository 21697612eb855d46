"""The counter-based keys every stream is derived from: their values are part of the determinism contract (a seed
must give the same sequence in every release), and the scalar path must agree with the vectorised mixer."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from torch_drt.sampling._counter import derive_key, extend_key, mix64

_MASK = (1 << 64) - 1


def _vectorised(*parts: int) -> int:
    """derive_key through ``mix64`` on uint64 arrays (how the keys were first computed)."""
    key = 0x6A09E667F3BCC909
    for part in parts:
        arr = np.array([(key ^ (int(part) & _MASK)) & _MASK], dtype=np.uint64)
        with np.errstate(over="ignore"):
            key = int(mix64(arr + np.uint64(0x9E3779B97F4A7C15))[0])
    return key


def test_keys_are_the_ones_earlier_releases_derived():
    got = [derive_key(), derive_key(0), derive_key(1, 2, 3), derive_key(-1), derive_key(2**64 - 1, 7),
           derive_key(12345, -3, 2**70)]
    assert got == [7640891576956012809, 7192185014346937746, 12408891335933229428, 2932223646667407290,
                   15243352289621631796, 9390304856672456560]


@given(st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=5))
def test_the_scalar_keys_equal_the_vectorised_mixer(parts):
    assert derive_key(*parts) == _vectorised(*parts)


@given(st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=4), st.integers(0, 2**64 - 1))
def test_extending_a_key_derives_the_longer_key(parts, part):
    assert extend_key(_vectorised(*parts), part) == _vectorised(*parts, part)


def test_mix64_of_a_scalar_is_the_mix_of_a_one_element_array():
    value = np.uint64(0x0123456789ABCDEF)
    assert mix64(value) == mix64(np.array([value]))[0]
    assert mix64(value) != value
