"""Elastic exact resume through StatefulDataLoader: 8 -> 16 -> 4 simulated ranks, every delivered token hashed.

Each phase builds one loader per rank over the mix of tests/lm/lm_corpora.py with its own batch size, worker
count and worker method, runs all ranks in lockstep, checks that every rank checkpoints the same state, and hands
that state to the next phase. Every delivered sequence is placed at its global position (global batch b covers
[b*G, (b+1)*G), rank r takes r, r+W, ...) and compared, by hash of all its fields, with the single-rank stream.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from lm_corpora import digest, global_stream, mixer, write_corpora

from torch_drt import StatefulDataLoader

PHASES = [  # (world size, micro-batch, workers, worker method, steps)
    (8, 2, 0, "thread", 5),
    (16, 3, 2, "thread", 3),
    (4, 1, 2, "process", 7),
]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return write_corpora(tmp_path_factory.mktemp("corpora"))


def run_phase(corpora, state, world_size, batch, workers, method, steps, weights=None):
    """Run ``steps`` global steps on simulated ranks; return {global position: digest}, tokens, the state."""
    loaders = []
    for rank in range(world_size):
        loader = StatefulDataLoader(
            mixer(corpora, weights, rank=rank, world_size=world_size),
            batch_size=batch,
            collate_fn=list,
            num_workers=workers,
            worker_method=method,
        )
        if state is not None:
            loader.load_state_dict(state)
        loaders.append(loader)
    its = [iter(loader) for loader in loaders]
    delivered, tokens = {}, []
    for step in range(steps):
        for rank, it in enumerate(its):
            for k, seq in enumerate(next(it)):
                delivered[step * batch * world_size + k * world_size + rank] = digest(seq)
                tokens.append(seq.tokens[seq.loss_mask])
    states = {json.dumps(loader.state_dict(), sort_keys=True) for loader in loaders}
    for loader in loaders:
        loader.close()
    assert len(states) == 1, "every rank must checkpoint the same global position"
    return delivered, tokens, json.loads(states.pop())


def reference(corpora, total, change_at=None, weights=None):
    """The single-rank global stream; with ``change_at``, new weights from a checkpoint at that position."""
    node = mixer(corpora)
    node.reset()
    if change_at is None:
        return global_stream(node, total)
    head = global_stream(node, change_at)
    resumed = mixer(corpora, weights)
    resumed.reset(json.loads(json.dumps(node.state_dict())))
    return head + global_stream(resumed, total - change_at)


@pytest.mark.parametrize("weight_change", [False, True])
def test_resume_8_16_4_ranks_delivers_the_identical_global_stream(corpora, weight_change):
    new_weights = {"web": 1, "code": 2, "books": 7}
    state, offset, got, tokens = None, 0, {}, []
    change_at = None
    for i, (world, batch, workers, method, steps) in enumerate(PHASES):
        weights = new_weights if weight_change and i >= 1 else None
        if weight_change and i == 1:
            change_at = offset
        delivered, toks, state = run_phase(corpora, state, world, batch, workers, method, steps, weights)
        got.update({offset + p: d for p, d in delivered.items()})
        tokens += toks
        offset += steps * batch * world
        assert state["node_state"] is not None
    want = reference(corpora, offset, change_at, new_weights)
    assert sorted(got) == list(range(offset))  # every global position delivered exactly once
    assert [got[p] for p in range(offset)] == [digest(s) for s in want]
    delivered_tokens = np.sort(np.concatenate(tokens))
    assert np.array_equal(delivered_tokens, np.sort(np.concatenate([s.tokens[s.loss_mask] for s in want])))
    if weight_change:  # the new weights really apply after the checkpoint
        books = sum(1 for s in want[change_at:] if s.tokens[0] >= 20_000_000) / (offset - change_at)
        assert books > 0.5
