"""WeightedDraws: a seeded, position-addressable stream of weighted draws with replacement."""

from __future__ import annotations

import numpy as np
import pytest

from torch_drt.sampling.weighted import WeightedDraws


def test_windows_are_pieces_of_one_stream():
    draws = WeightedDraws(np.array([1.0, 2.0, 3.0, 4.0]), seed=7)
    whole = draws.draws(0, 6)
    assert np.concatenate([draws.draws(0, 2), draws.draws(2, 2), draws.draws(4, 2)]).tolist() == whole.tolist()
    far = draws.draws(10**12, 3)  # any position, directly
    assert far.tolist() == draws.draws(10**12, 3).tolist() and far.dtype == np.int64


def test_frequencies_follow_the_weights():
    weights = np.array([1.0, 2.0, 3.0, 4.0])
    rows = WeightedDraws(weights, seed=1).draws(0, 100_000)
    freq = np.bincount(rows, minlength=4) / len(rows)
    assert np.allclose(freq, weights / weights.sum(), atol=0.01)


def test_seed_and_stream_separate_streams():
    w = np.ones(50)
    base = WeightedDraws(w, seed=1).draws(0, 200).tolist()
    assert base == WeightedDraws(w, seed=1).draws(0, 200).tolist()
    assert base != WeightedDraws(w, seed=2).draws(0, 200).tolist()
    assert base != WeightedDraws(w, seed=1, stream=1).draws(0, 200).tolist()


def test_from_cumulative_is_the_same_stream():
    w = np.array([0.5, 1.5, 3.0])
    assert (
        WeightedDraws.from_cumulative(np.cumsum(w), seed=4, stream=2).draws(5, 20).tolist()
        == WeightedDraws(w, seed=4, stream=2).draws(5, 20).tolist()
    )


def test_a_single_row_and_validation():
    assert WeightedDraws(np.array([3.0]), seed=0).draws(0, 5).tolist() == [0] * 5
    with pytest.raises(ValueError):
        WeightedDraws(np.array([]), seed=0)
    with pytest.raises(ValueError):
        WeightedDraws(np.array([1.0, 0.0]), seed=0)
    with pytest.raises(ValueError):
        WeightedDraws(np.array([1.0, np.nan]), seed=0)
    with pytest.raises(ValueError):
        WeightedDraws(np.array([1.0]), seed=0).draws(-1, 2)
