"""Pretraining-style loading: three corpora mixed 60/30/10, packed to 4,096 tokens, checkpointed on 2 ranks and
resumed on 3; the delivered tokens are checked against a single-rank run. Offline, a few seconds.

    python examples/lm_pretraining.py [WORKDIR]

Ranks are simulated in one process (``rank=``/``world_size=``); under torchrun, leave both out and they come
from the process group. Every rank holds the same checkpoint, so rank 0's is the one to save.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from torch_drt import StatefulDataLoader
from torch_drt.lm import MixerNode, PackerNode, collate_packed, source_tokens
from torch_drt.storage import DocumentStorage, DocumentStorageWriter, TokenStreamStorage, TokenStreamWriter

L = 4096
WEIGHTS = {"web": 0.6, "code": 0.3, "books": 0.1}


def write_corpora(root: Path) -> None:
    """Two document corpora (log-normal lengths) and one pre-tokenized stream, with made-up token ids."""
    rng = np.random.default_rng(0)
    for name, count in (("web", 600), ("code", 300)):
        with DocumentStorageWriter(root, name, dtype="int32") as writer:
            for n in np.maximum(1, rng.lognormal(6.5, 1.0, count)).astype(int):
                writer.write(rng.integers(0, 32_000, n, dtype=np.int32))
    with TokenStreamWriter(root, "books", "int32") as writer:
        writer.write(rng.integers(0, 32_000, 300_000, dtype=np.int32))


def loader(root: Path, rank: int, world_size: int) -> StatefulDataLoader:
    """The mixed, packed stream; this rank's share of it, 2 sequences per batch."""
    sources = {
        "web": PackerNode(DocumentStorage(root / "web"), L, method="best_fit", shuffle=True, seed=1),
        "code": PackerNode(DocumentStorage(root / "code"), L, method="best_fit", shuffle=True, seed=2),
        "books": PackerNode(TokenStreamStorage(root / "books"), L, shuffle=True, seed=3),
    }
    mix = MixerNode(sources, WEIGHTS, seed=0, rank=rank, world_size=world_size)
    return StatefulDataLoader(mix, batch_size=2, collate_fn=collate_packed, num_workers=1)


def run(loaders: list[StatefulDataLoader], steps: int) -> dict[int, str]:
    """``steps`` steps on every rank; digests of the sequences at their global positions."""
    world, its, out = len(loaders), [iter(x) for x in loaders], {}
    for step in range(steps):
        for rank, it in enumerate(its):
            batch = next(it)
            for k in range(len(batch["tokens"])):  # global position: step*B*W + k*W + rank
                row = b"".join(batch[f][k].numpy().tobytes() for f in ("tokens", "segment_ids", "loss_mask"))
                out[step * 2 * world + k * world + rank] = hashlib.sha1(row).hexdigest()
    return out


def main(root: Path) -> None:
    write_corpora(root)

    two = [loader(root, rank, 2) for rank in range(2)]
    seen = run(two, steps=4)
    states = {json.dumps(x.state_dict(), sort_keys=True) for x in two}
    assert len(states) == 1  # every rank checkpoints the same global position
    state = json.loads(states.pop())
    (root / "checkpoint.json").write_text(json.dumps(state))
    print(f"checkpoint after 4 steps on 2 ranks ({len(seen)} sequences); tokens so far: {source_tokens(state)}")

    three = [loader(root, rank, 3) for rank in range(3)]
    for x in three:
        x.load_state_dict(json.loads((root / "checkpoint.json").read_text()))
    seen.update({len(seen) + p: d for p, d in run(three, steps=4).items()})
    final = three[0].state_dict()

    single = loader(root, 0, 1)
    reference = run([single], steps=len(seen) // 2)
    same = seen == reference
    print(f"resumed on 3 ranks: {len(seen)} sequences in all; tokens per source {source_tokens(final)}; "
          f"identical to one rank: {'yes' if same else 'NO'}")
    for x in [*two, *three, single]:
        x.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="lm_example_") as tmp:
            main(Path(tmp))
