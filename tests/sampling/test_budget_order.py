"""The cache loader's consumer arithmetic: torch's delivery order and O(1) budgets."""

from __future__ import annotations

import itertools

import pytest

from torch_drt.sampling.budget import MAX_SAMPLES, batch_counts, consumer_plans, interleave, rank_budget


def torch_order(counts):
    """torch's loader: one batch from each consumer in turn, skipping exhausted ones (simulated)."""
    left, k, out = list(counts), [0] * len(counts), []
    while any(left):
        for c in range(len(counts)):
            if left[c]:
                out.append((c, k[c]))
                k[c] += 1
                left[c] -= 1
    return out


@pytest.mark.parametrize("counts", [[], [0], [3], [3, 1, 0, 2], [5, 5], [1, 4, 4], [0, 0, 2]])
def test_interleave_is_torchs_order_and_resumes_anywhere(counts):
    full = torch_order(counts)
    assert list(interleave(counts)) == full
    for done in range(len(full) + 1):
        assert list(interleave(counts, done)) == full[done:]


def test_budgets_are_arithmetic():
    plans = consumer_plans(40, samples=MAX_SAMPLES, batch_size=1, workers=0, world_size=1, rank=0,
                           partition="split", drop_last=False)
    assert batch_counts(plans, 1) == [MAX_SAMPLES]
    big = list(itertools.islice(interleave([MAX_SAMPLES, MAX_SAMPLES - 1], MAX_SAMPLES), 3))
    assert big == [(0, MAX_SAMPLES // 2), (1, MAX_SAMPLES // 2), (0, MAX_SAMPLES // 2 + 1)]


@pytest.mark.parametrize("samples", [0, -1, MAX_SAMPLES + 1, 2.0, True, "9"])
def test_budget_validation(samples):
    with pytest.raises(ValueError, match="samples_per_epoch"):
        rank_budget(samples, world_size=1, rank=0, batch_size=1, drop_last=False)


def test_an_empty_table_is_refused():
    with pytest.raises(ValueError, match="no rows"):
        consumer_plans(0, samples=1, batch_size=1, workers=1, world_size=1, rank=0, partition="split",
                       drop_last=False)
