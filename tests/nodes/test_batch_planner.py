"""BatchPlanner: each plan's positions and ``last`` flag, across the chunks it plans at once (issue 26 made the
chunks cheaper: the flag is computed once per chunk, the positions in one pass)."""

from __future__ import annotations

import pytest

from torch_drt import StatefulDataLoader
from torch_drt.nodes.batch_plan import BatchPlanner
from torch_drt.sampling.samplers import SequentialSampler


def plans(planner: BatchPlanner) -> list:
    planner.reset(None)
    out = []
    while True:
        try:
            out.append(planner.next())
        except StopIteration:
            return out


@pytest.mark.parametrize(("n", "batch_size", "world_size", "rank", "drop_last"), [
    (10_000, 64, 1, 0, False),  # 157 batches: three chunks, a short last batch
    (64 * 128, 64, 1, 0, False),  # a last chunk that ends the epoch exactly
    (10_000, 16, 3, 2, False),  # padded last global batch
    (10_000, 16, 3, 1, True),
    (100, 7, 2, 0, True),
])
def test_only_the_epochs_last_batch_is_marked_last(n, batch_size, world_size, rank, drop_last):
    planner = BatchPlanner(SequentialSampler(n), batch_size, world_size, rank, drop_last)
    got = plans(planner)
    g = batch_size * world_size
    offsets = list(range(0, n - g + 1 if drop_last else n, g))
    assert [p.offset for p in got] == offsets
    assert [p.last for p in got] == [False] * (len(offsets) - 1) + [True]
    assert [p.positions for p in got] == [range(o + rank, min(n, o + g), world_size) for o in offsets]
    assert [p.indices for p in got] == [list(p.positions) for p in got]  # sequential: index = position


@pytest.mark.parametrize("kept", [True, False])
def test_sequential_index_lists_are_fresh_lists_whether_the_ints_are_kept_or_not(kept, monkeypatch):
    """A sequential epoch's index lists are slices of ints kept across epochs (small epochs) or made per chunk."""
    import torch_drt.sampling.samplers as samplers

    monkeypatch.setattr(samplers, "_KEPT_INTS", 10_000 if kept else 9_999)
    sampler = SequentialSampler(10_000)
    planner = BatchPlanner(sampler, 16, 3, 2)
    first = plans(planner)
    assert (sampler._ints is not None) == kept
    for plan in first:
        plan.indices.append(-1)  # a caller's change to a batch's indices stays in that batch
    expected = [list(range(o + 2, min(10_000, o + 48), 3)) for o in range(0, 10_000, 48)]
    assert [p.indices for p in plans(planner)] == expected


def test_a_checkpoint_after_the_last_batch_starts_the_next_epoch():
    loader = StatefulDataLoader(list(range(10_000)), batch_size=64, collate_fn=list)
    it = iter(loader)
    batches = [next(it) for _ in range(157)]  # the epoch's batches, without the StopIteration after them
    assert batches[-1] == list(range(156 * 64, 10_000))
    state = loader.state_dict()
    assert (state["epoch"], state["observation_offset"]) == (1, 0)


@pytest.mark.parametrize(("n", "batch_size", "world_size", "rank"),
                         [(10_000, 64, 1, 0), (10_000, 16, 3, 2), (1000, 7, 2, 1)])
def test_shuffled_and_user_sampler_plans_map_every_position_through_the_sampler(n, batch_size, world_size, rank):
    """The chunk's indices are the sampler's at the plan's positions, in chunks with and without padding."""
    import numpy as np

    from torch_drt.sampling.samplers import IndexListSampler, ShuffledSampler

    order = list(np.random.default_rng(3).permutation(n))
    for sampler, index_of in [
        (ShuffledSampler(n, seed=5), lambda ps: ShuffledSampler(n, seed=5).indices(0, np.asarray(ps)).tolist()),
        (IndexListSampler(order, n), lambda ps: [int(order[p]) for p in ps]),
    ]:
        got = plans(BatchPlanner(sampler, batch_size, world_size, rank))
        g = batch_size * world_size
        assert [p.positions for p in got] == [range(o + rank, min(n, o + g), world_size) for o in range(0, n, g)]
        assert [p.indices for p in got] == [index_of(list(p.positions)) for p in got]


def test_rank_positions_of_clips_at_the_epochs_end_only():
    from torch_drt.sampling.partition import Partition

    part = Partition(100, 8, world_size=2, rank=1)
    for offsets in (range(0, 64, 16), range(0, 100, 16), range(96, 100, 16), range(80, 112, 16), range(0)):
        assert part.rank_positions_of(offsets) == [range(o + 1, min(100, o + 16), 2) for o in offsets]


def test_a_limit_cuts_the_planned_run_and_next_goes_on_with_the_rest():
    """``planned(limit)`` ends after ``limit`` batches (a loader's statistics countdown), so the 0-worker loop stops
    at a timed batch without a check per batch; the state and the batches are unchanged."""
    whole = plans(BatchPlanner(SequentialSampler(1000), 3, world_size=2, rank=1))
    planner = BatchPlanner(SequentialSampler(1000), 3, world_size=2, rank=1)
    planner.reset(None)
    out, runs = [planner.next()], []  # (the first next() plans a chunk: 64 batches)
    for budget in (5, 0, 7, 100):
        run = planner.planned(budget)
        if run is None:  # a spent budget, or the end of a cut run: next() takes the batch (and goes on with the rest)
            assert budget == 0 or runs
            out.append(planner.next())
            run = planner.planned(budget)
            if budget == 0:
                assert run is None
                continue
        runs.append(0)
        for plan in run:
            out.append(plan)
            runs[-1] += 1
            assert planner.offset == plan.offset + 6  # the state moves past each batch taken
    assert runs == [5, 7, 64 - 1 - 5 - 1 - 7 - 1]  # the last run ends with the chunk
    while True:
        try:
            out.append(planner.next())  # the cut chunk's rest, then the next chunks
        except StopIteration:
            break
    assert out == whole
