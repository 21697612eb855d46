"""MixerNode: save/load, weights, per-source token counts, weight changes at a checkpoint, cycling."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from lm_corpora import L, digest, documents, global_stream
from nodes_harness import check_save_load
from torchdata.nodes import IterableWrapper, Mapper

from torch_drt.lm import ArraySource, MixerNode, PackerNode, source_tokens
from torch_drt.nodes import WeightedMixer

OFFSETS = {"a": 0, "b": 1_000_000, "c": 2_000_000}


def sources(shuffle=True, docs=(300, 200, 100)):
    return {
        name: PackerNode(
            ArraySource.from_documents(documents(n, i, OFFSETS[name])), L, method=method, shuffle=shuffle, seed=i
        )
        for i, (name, n, method) in enumerate(zip("abc", docs, ["best_fit", "first_fit", "concat"]))
    }


def origin(seq) -> str:
    """Which corpus a sequence came from (token ranges do not overlap)."""
    first = int(seq.tokens[seq.loss_mask][0])
    return max((o, name) for name, o in OFFSETS.items() if first >= o)[1]


def test_save_load_harness():
    node = MixerNode(sources(), {"a": 5, "b": 3, "c": 2}, seed=3, stop_criteria="FIRST_DATASET_EXHAUSTED")
    check_save_load(Mapper(node, digest), midpoint=50)


def test_draws_follow_the_weights_and_counts_are_reported():
    node = MixerNode(sources(), {"a": 6, "b": 3, "c": 1}, seed=1)
    node.reset()
    seqs = global_stream(node, 3000)
    names = [origin(s) for s in seqs]
    shares = {k: names.count(k) / len(names) for k in "abc"}
    assert shares["a"] == pytest.approx(0.6, abs=0.03) and shares["b"] == pytest.approx(0.3, abs=0.03)
    counted = {k: sum(s.num_tokens for s, n in zip(seqs, names) if n == k) for k in "abc"}
    assert node.source_tokens == counted
    assert source_tokens({"outer": {"node_state": node.state_dict()}}) == counted
    with pytest.raises(KeyError, match="holds no MixerNode"):
        source_tokens({"epoch": 1})


def test_sources_cycle_into_their_next_epoch():
    node = MixerNode(sources(docs=(30, 30, 30)), {"a": 1, "b": 1, "c": 1}, seed=2)
    node.reset()
    seqs = global_stream(node, 600)  # several epochs of every source
    a = [s for s in seqs if origin(s) == "a"]
    epoch_tokens = sum(len(d) for d in documents(30, 0, 0))
    assert node.sources["a"].state_dict()["epoch"] >= 2
    assert node.source_tokens["a"] == sum(s.num_tokens for s in a) > 2 * epoch_tokens


def test_first_exhausted_ends_the_mix_for_every_rank():
    ends = []
    for rank in range(3):
        node = MixerNode(sources(docs=(40, 40, 40)), {"a": 1, "b": 1, "c": 1}, rank=rank, world_size=3,
                         stop_criteria="FIRST_DATASET_EXHAUSTED")
        node.reset()
        ends.append(len(list(node)))
    assert len(set(ends)) == 1


def weight_change_run(weights_after, at=400, more=500):
    node = MixerNode(sources(), {"a": 6, "b": 3, "c": 1}, seed=4)
    node.reset()
    before = global_stream(node, at)
    state = json.loads(json.dumps(node.state_dict()))
    resumed = MixerNode(sources(), weights_after, seed=4)
    resumed.reset(state)
    return before, global_stream(resumed, more), resumed


def test_a_weight_change_at_a_checkpoint_is_exactly_reproducible():
    before, after, node = weight_change_run({"a": 1, "b": 1, "c": 8})
    before2, after2, _ = weight_change_run({"a": 1, "b": 1, "c": 8})
    assert [digest(s) for s in before + after] == [digest(s) for s in before2 + after2]
    names = [origin(s) for s in after]
    assert names.count("c") / len(names) == pytest.approx(0.8, abs=0.05)
    assert node.state_dict()["stream"]["weights"] == {"a": 1.0, "b": 1.0, "c": 8.0}
    _, unchanged, _ = weight_change_run({"a": 6, "b": 3, "c": 1})
    assert [digest(s) for s in after] != [digest(s) for s in unchanged]


def test_weights_may_also_change_with_set_weights_before_reset():
    _, after, _ = weight_change_run({"a": 1, "b": 1, "c": 8})
    node = MixerNode(sources(), {"a": 6, "b": 3, "c": 1}, seed=4)
    node.reset()
    global_stream(node, 400)
    state = node.state_dict()
    node.set_weights({"a": 1, "b": 1, "c": 8})
    node.reset(state)
    assert [digest(s) for s in global_stream(node, 500)] == [digest(s) for s in after]


def test_validation():
    with pytest.raises(ValueError, match="must be the source names"):
        MixerNode(sources(), {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="finite and > 0"):
        MixerNode(sources(), {"a": 1, "b": 0, "c": 1})
    with pytest.raises(TypeError, match="PackerNode or MixerNode"):
        MixerNode({"a": [1, 2]}, {"a": 1})
    other = PackerNode(ArraySource.from_documents([np.arange(3)], dtype=np.int32), 2 * L)
    with pytest.raises(ValueError, match="they must agree"):
        MixerNode({**sources(), "d": other}, {"a": 1, "b": 1, "c": 1, "d": 1})
    with pytest.raises(ValueError, match="stop_criteria="):
        MixerNode(sources(), {"a": 1, "b": 1, "c": 1}, stop_criteria="ALL_DATASETS_EXHAUSTED")


def test_a_nested_mixer_is_a_source():
    inner = MixerNode({k: v for k, v in sources().items() if k != "c"}, {"a": 1, "b": 1}, seed=1)
    outer = MixerNode({"ab": inner, "c": sources()["c"]}, {"ab": 3, "c": 1}, seed=2)
    outer.reset()
    seqs = global_stream(outer, 200)
    assert outer.source_tokens["ab"] == sum(s.num_tokens for s in seqs if origin(s) != "c")


def test_a_checkpoint_of_other_sources_is_refused():
    node = MixerNode(sources(), {"a": 1, "b": 1, "c": 1})
    node.reset()
    next(node)
    two = {k: v for k, v in sources().items() if k != "c"}
    with pytest.raises(ValueError, match="the checkpoint mixes"):
        MixerNode(two, {"a": 1, "b": 1}).reset(node.state_dict())


@pytest.mark.parametrize(("rank", "world_size"), [(0, 1), (1, 2), (2, 3)])
def test_the_lm_mixer_and_the_weighted_mixer_draw_one_stream(rank, world_size):
    """One mixer: with the same weights and seed, ``MixerNode`` and ``WeightedMixer`` choose the same source at every
    position, on every rank (before, each keyed its draws its own way)."""
    weights = {"a": 5, "b": 3, "c": 2}
    lm = MixerNode(sources(), weights, seed=3, rank=rank, world_size=world_size)
    lm.reset()
    plain = WeightedMixer({k: IterableWrapper(itertools.repeat(k)) for k in "abc"}, weights, seed=3,
                          stop_criteria="CYCLE_FOREVER", rank=rank, world_size=world_size)
    plain.reset()
    assert [origin(s) for s in global_stream(lm, 200)] == global_stream(plain, 200)


def test_a_checkpoint_written_before_one_mixer_resumes_exactly():
    """``MixerNode`` states before one mixer lack the exhausted flags, which its stop criteria never read."""
    node = MixerNode(sources(), {"a": 5, "b": 3, "c": 2}, seed=3, stop_criteria="FIRST_DATASET_EXHAUSTED")
    node.reset()
    global_stream(node, 20)
    state = json.loads(json.dumps(node.state_dict()))
    expected = [digest(s) for s in node]
    state["stream"].pop("exhausted", None)  # as written before
    old = MixerNode(sources(), {"a": 5, "b": 3, "c": 2}, seed=3, stop_criteria="FIRST_DATASET_EXHAUSTED")
    old.reset(state)
    assert [digest(s) for s in old] == expected and expected
