"""A real 2-rank gloo job for test_loader_seams.py: torch's DataLoader and torch_drt's, side by side.

Each rank runs the same scripts with ``torch.utils.data.DataLoader`` and with ``torch_drt.StatefulDataLoader``
(only the class differs) and reports what each delivered, per epoch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from torch_drt import StatefulDataLoader

N, EPOCHS = 40, 2
FORK = {"num_workers": 2, "multiprocessing_context": "fork"}  # a spawned rank's default would spawn its workers
CLASSES = {"torch": DataLoader, "drt": StatefulDataLoader}


def epochs(loader, set_epoch: bool) -> list[list[int]]:
    out = []
    for epoch in range(EPOCHS):
        if set_epoch:
            loader.sampler.set_epoch(epoch)  # the common training-script line: it must reach the user's sampler
        out.append([int(x) for batch in loader for x in (batch if isinstance(batch, list | torch.Tensor) else [batch])])
    return out


def run(rank: int, world_size: int, port: int, out: str) -> None:
    data = list(range(N))
    # built before the process group exists (as in a LightningDataModule's __init__)
    early = {f"{k}/early": cls(data, batch_size=4, shuffle=False, **FORK) for k, cls in CLASSES.items()}
    early["drt/split"] = StatefulDataLoader(data, batch_size=4, shuffle=True, seed=1, split_by_rank=True)
    early["drt/split_unbatched"] = StatefulDataLoader(data, batch_size=None, split_by_rank=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        loaders = dict(early)
        samplers = {}
        for k, cls in CLASSES.items():
            samplers[k] = DistributedSampler(data, shuffle=True, seed=5)
            loaders[f"{k}/late"] = cls(data, batch_size=4, shuffle=False, **FORK)
            loaders[f"{k}/distributed"] = cls(data, batch_size=4, sampler=samplers[k], **FORK)
        results = {name: epochs(loader, "distributed" in name) for name, loader in loaders.items()}
        results["drt/sampler_is_users"] = [[loaders["drt/distributed"].sampler is samplers["drt"]]]
        gathered = [None] * world_size
        dist.all_gather_object(gathered, results)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()
