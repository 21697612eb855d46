"""WeightedMixer, the one mixer: one global stream of weighted source choices, a pure function of (seed, epoch,
position); rank r of W takes position r of every group of W, and a checkpoint of any rank resumes any topology."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from torchdata.nodes import IterableWrapper

from torch_drt.nodes import WeightedMixer
from torch_drt.sampling import WeightedDraws

WEIGHTS = {"a": 5.0, "b": 3.0, "c": 2.0}


def mixer(rank=0, world_size=1, criteria="CYCLE_FOREVER", sizes=(50, 30, 20), seed=3):
    sources = {name: IterableWrapper([f"{name}{i}" for i in range(n)]) for name, n in zip(WEIGHTS, sizes)}
    return WeightedMixer(sources, WEIGHTS, seed=seed, stop_criteria=criteria, rank=rank, world_size=world_size)


def run(node, count=None, state=None) -> list:
    node.reset(state)
    return list(itertools.islice(node, count))


def interleave(shares: list[list]) -> list:
    """The global stream the ranks' shares come from: position r of every group of W is rank r's."""
    return [x for group in itertools.zip_longest(*shares, fillvalue=None) for x in group if x is not None]


def test_the_choices_are_the_weighted_draws_of_seed_and_epoch():
    """The source of position p is draw p of ``WeightedDraws(weights, seed, stream=epoch)`` (the owner of weighted
    draws), whatever the rank and world size."""
    node = mixer()
    expected = [list(WEIGHTS)[k] for k in WeightedDraws(np.array(list(WEIGHTS.values())), 3, stream=0).draws(0, 300)]
    assert [x[0] for x in run(node, 300)] == expected
    expected_1 = [list(WEIGHTS)[k] for k in WeightedDraws(np.array(list(WEIGHTS.values())), 3, stream=1).draws(0, 30)]
    assert [x[0] for x in run(node, 30)] == expected_1  # reset(): the next epoch


@pytest.mark.parametrize("criteria", ["CYCLE_FOREVER", "ALL_DATASETS_EXHAUSTED", "FIRST_DATASET_EXHAUSTED"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_take_their_positions_of_one_global_stream(criteria, world_size):
    count = 240 if criteria == "CYCLE_FOREVER" else None
    whole = run(mixer(criteria=criteria), count)
    shares = [run(mixer(r, world_size, criteria), None if count is None else count // world_size)
              for r in range(world_size)]
    assert interleave(shares) == whole
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    if criteria == "ALL_DATASETS_EXHAUSTED":  # every item of every source once, on one rank
        assert sorted(whole) == sorted(f"{n}{i}" for n, size in zip(WEIGHTS, (50, 30, 20)) for i in range(size))


@pytest.mark.parametrize("criteria", ["CYCLE_FOREVER", "ALL_DATASETS_EXHAUSTED", "CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED"])
@pytest.mark.parametrize(("before", "after"), [(2, 3), (2, 1), (4, 2), (1, 4)])
def test_a_checkpoint_resumes_the_global_stream_at_any_world_size(criteria, before, after):
    sizes = (40, 25, 12)  # "c" is at its end before the checkpoint (and CYCLE_UNTIL_... ends before it again)
    whole = run(mixer(criteria=criteria, sizes=sizes), 400)
    taken = 60 // before
    states = []
    for rank in range(before):
        node = mixer(rank, before, criteria, sizes)
        run(node, taken)
        states.append(json.loads(json.dumps(node.state_dict())))
    assert all(s == states[0] for s in states)  # every rank's checkpoint is the same
    assert states[0]["stream"]["exhausted"]["c"] == (criteria != "CYCLE_FOREVER")
    resumed = [run(mixer(r, after, criteria, sizes), 40, states[0]) for r in range(after)]
    assert interleave(resumed) == whole[taken * before:][: 40 * after]


def test_the_same_topology_resumes_exactly_mid_epoch_and_into_the_next():
    node = mixer(1, 2, "ALL_DATASETS_EXHAUSTED")
    head = run(node, 7)
    state = node.state_dict()
    rest, next_epoch = list(node), run(node)
    again = mixer(1, 2, "ALL_DATASETS_EXHAUSTED")
    assert run(again, None, state) == rest and head
    assert run(again) == next_epoch


def test_a_state_of_the_per_rank_format_is_refused_naming_the_field():
    """States written before one mixer (per-rank choice streams) cannot continue the global stream."""
    old = {"epoch": 0, "draws": 5, "pulled": {"a": 4, "b": 1, "c": 0}, "exhausted": dict.fromkeys("abc", False),
           "source_states": {"a": {"_num_yielded": 4}, "b": {"_num_yielded": 1}, "c": {"_num_yielded": 0}},
           "rank": 0, "world_size": 1}
    with pytest.raises(ValueError, match=r"state\['pulled'\]=.*per-rank WeightedMixer state"):
        mixer().reset(old)


def test_a_source_without_items_in_a_whole_epoch_is_an_error_when_cycling_forever():
    node = mixer(sizes=(5, 0, 5))
    with pytest.raises(ValueError, match="'b' has no item in a whole epoch"):
        run(node, 50)


def test_cycling_until_all_are_exhausted_ends_and_repeats_the_early_ones():
    items = run(mixer(criteria="CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED", sizes=(5, 30, 5)))
    assert {f"b{i}" for i in range(30)} <= set(items) and items.count("a0") > 1


@pytest.mark.parametrize("world_size", [1, 2])
def test_stop_criteria_mean_what_torchdatas_multi_node_weighted_sampler_means(world_size):
    """The orders differ by design (one global stream here); what each stop criterion delivers is torchdata's: all
    items once (ALL_DATASETS_EXHAUSTED), every item at least once (CYCLE_UNTIL_ALL), a source run dry
    (FIRST_DATASET_EXHAUSTED)."""
    from torchdata.nodes import IterableWrapper, Loader
    from torchdata.nodes.samplers.multi_node_weighted_sampler import MultiNodeWeightedSampler
    from torchdata.nodes.samplers.stop_criteria import StopCriteria

    from torch_drt.nodes import WeightedMixer

    sizes, weights = {"a": 7, "b": 19}, {"a": 0.3, "b": 0.7}

    def sources():
        return {k: IterableWrapper([f"{k}{i}" for i in range(n)]) for k, n in sizes.items()}

    def run(make, criterion):
        out = []
        for rank in range(world_size):
            node = make(sources(), weights, seed=5, stop_criteria=criterion, rank=rank, world_size=world_size)
            out.append(list(Loader(node)))
        return out

    def ours(src, w, **kw):
        return WeightedMixer(src, w, **kw)

    def theirs(src, w, **kw):
        return MultiNodeWeightedSampler(src, w, **kw)

    everything = sorted(f"{k}{i}" for k, n in sizes.items() for i in range(n))
    for make in (ours, theirs):
        # ours deals each item to one rank; torchdata's ranks each read every item with their own draws
        def streams(criterion, make=make):
            got = run(make, criterion)
            return [[x for rank in got for x in rank]] if make is ours else got

        for stream in streams(StopCriteria.ALL_DATASETS_EXHAUSTED):
            assert sorted(stream) == everything, make.__name__
        for stream in streams(StopCriteria.CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED):
            assert set(stream) == set(everything), make.__name__
        for stream in streams(StopCriteria.FIRST_DATASET_EXHAUSTED):
            assert len(stream) == len(set(stream)), make.__name__  # nothing repeats: no source restarted
            assert any({f"{k}{i}" for i in range(n)} <= set(stream) for k, n in sizes.items()), make.__name__
