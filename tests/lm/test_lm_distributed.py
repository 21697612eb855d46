"""Real ranks (torch.multiprocessing + gloo): the mix is split by the global-batch rule and resumes on 3 ranks."""

from __future__ import annotations

import json
import socket

import torch.multiprocessing as mp
from lm_corpora import digest, global_stream, mixer, write_corpora
from lm_dist_job import run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(tmp_path, corpora, world_size, steps, resume=None, name="out"):
    out = tmp_path / f"{name}.json"
    args = (world_size, free_port(), str(out), str(corpora), steps, resume)
    mp.spawn(run, args=args, nprocs=world_size, join=True)
    return json.loads(out.read_text())


def by_position(ranks, batch=2):
    """Digests placed at their global positions: step s, item k of rank r is s*b*W + k*W + r."""
    world, out = len(ranks), {}
    for r, report in enumerate(ranks):
        for s, items in enumerate(report["digests"]):
            for k, d in enumerate(items):
                out[s * batch * world + k * world + r] = d
    return out


def test_two_ranks_checkpoint_and_three_resume_the_same_global_stream(tmp_path):
    corpora = write_corpora(tmp_path / "corpora")
    first = job(tmp_path, tmp_path / "corpora", 2, steps=4, name="first")
    states = {json.dumps(r["state"], sort_keys=True) for r in first}
    assert len(states) == 1  # every rank holds the same global position
    (tmp_path / "state.json").write_text(states.pop())
    second = job(tmp_path, tmp_path / "corpora", 3, steps=3, resume=str(tmp_path / "state.json"), name="second")
    got = by_position(first)
    got.update({16 + p: d for p, d in by_position(second).items()})
    node = mixer(corpora)
    node.reset()
    want = [digest(s) for s in global_stream(node, 16 + 18)]
    assert sorted(got) == list(range(34)) and [got[p] for p in range(34)] == want
