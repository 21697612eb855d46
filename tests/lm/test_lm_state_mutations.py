"""Every single-field mutation of a language-model loader state (MixerNode over PackerNodes, a PackerNode alone)
is refused at load_state_dict with a ValueError naming the field, or resumes the identical stream (issue 22).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from state_mutations import check_mutations

from torch_drt import StatefulDataLoader
from torch_drt.lm import ArraySource, MixerNode, PackerNode

L = 16


def source(n: int, seed: int, offset: int) -> ArraySource:
    sizes = np.random.default_rng(seed).integers(1, 40, n)
    starts = offset + np.concatenate([[0], np.cumsum(sizes)])
    return ArraySource.from_documents([np.arange(starts[i], starts[i + 1], dtype=np.int32) for i in range(n)])


def mixer(**kwargs) -> MixerNode:
    return MixerNode(
        {
            "web": PackerNode(source(30, 1, 0), L, method="best_fit", buffer_size=4),
            "code": PackerNode(source(20, 2, 100_000), L, method="concat", shuffle=True, seed=5),
        },
        {"web": 2, "code": 1},
        seed=7,
        **kwargs,
    )


def packer() -> PackerNode:
    return PackerNode(source(30, 3, 0), L, method="first_fit", buffer_size=4, shuffle=True, seed=2)


def loader(node) -> StatefulDataLoader:
    return StatefulDataLoader(node, batch_size=2, collate_fn=list)


def digests(batches) -> list:
    return [[tuple(np.asarray(a).tobytes() for a in seq) for seq in batch] for batch in batches]


def some_batches(target) -> list:
    return digests(itertools.islice(target, 6))


def checkpoint(target, batches: int) -> dict:
    it = iter(target)
    for _ in range(batches):
        next(it)
    return json.loads(json.dumps(target.state_dict()))


def another_valid_state(path, what) -> bool:
    """Values of the right type and range that are another valid state: a stream at its end (``ended``), a
    packer with an open bin or a queued sequence less."""
    if path[-1] == "ended":
        return what == "True"
    in_packer = "packer" in path
    return in_packer and ((path[-1] in ("bins", "ready") and what == "[]") or (
        isinstance(path[-1], int) and what == "delete"))


def test_mixer_loader_states():
    state = checkpoint(loader(mixer()), 3)
    count = check_mutations(lambda: loader(mixer()), state, some_batches, other_valid=another_valid_state)
    assert count > 100  # every field tried (3 values each by default, all with TORCH_DRT_ALL_MUTATIONS=1)


def test_mixer_states_at_the_first_exhausted_source():
    def fresh():
        return loader(mixer(stop_criteria="FIRST_DATASET_EXHAUSTED"))

    check_mutations(fresh, checkpoint(fresh(), 2), lambda t: digests(t), other_valid=another_valid_state)


def test_packer_loader_states():
    state = checkpoint(loader(packer()), 2)
    check_mutations(lambda: loader(packer()), state, some_batches, other_valid=another_valid_state)


def test_packer_node_states():
    node = packer()
    node.reset()
    for _ in range(3):
        next(node)
    state = json.loads(json.dumps(node.state_dict()))

    class Node:  # the node on its own: reset(state) is its load_state_dict
        def __init__(self):
            self.node = packer()

        def load_state_dict(self, state):
            self.node.reset(state)

    check_mutations(Node, state, lambda n: digests([itertools.islice(n.node, 4)]),
                    other_valid=another_valid_state)


@pytest.mark.parametrize(("field", "value"), [("ended", "false"), ("started", "no"), ("epoch", 1.0)])
def test_the_issue_cases_are_refused_naming_the_field(field, value):
    state = checkpoint(loader(mixer()), 3)
    state["node_state"]["source"][field] = value
    with pytest.raises(ValueError, match=rf"state\['node_state'\]\['source'\]\['{field}'\]="):
        loader(mixer()).load_state_dict(state)


def test_node_state_none_mid_epoch_is_refused():
    state = checkpoint(loader(mixer()), 3)
    with pytest.raises(ValueError, match=r"state\['node_state'\]=None"):
        loader(mixer()).load_state_dict({**state, "node_state": None})
