"""A real gloo job for test_lm_distributed.py: each rank loads its share of the test mix and reports digests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch.distributed as dist
from lm_corpora import digest, mixer

from torch_drt import StatefulDataLoader


def run(rank: int, world_size: int, port: int, out: str, corpora: str, steps: int, resume: str | None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        paths = {name: Path(corpora) / name for name in ("web", "code", "books")}
        node = mixer(paths)  # rank and world size come from the process group
        assert (node.rank, node.world_size) == (rank, world_size)
        loader = StatefulDataLoader(node, batch_size=2, collate_fn=list, num_workers=1)
        if resume:
            loader.load_state_dict(json.loads(Path(resume).read_text()))
        digests = []
        for step, batch in enumerate(loader, 1):
            digests.append([digest(seq) for seq in batch])
            dist.barrier()
            if step == steps:
                break
        gathered = [None] * world_size
        dist.all_gather_object(gathered, {"digests": digests, "state": loader.state_dict()})
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
        loader.close()
    finally:
        dist.destroy_process_group()
