"""torch_drt.StatefulDataLoader under Lightning DDP (2 CPU processes) with Lightning's default settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

JOB = Path(__file__).resolve().parent / "lightning_loader_job.py"


def distributed_sampler_order(rank: int, epoch: int) -> list[int]:
    """What Lightning's injected sampler gives torch's DataLoader(shuffle=True) on this rank and epoch."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(list(range(50)), num_replicas=2, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("mode", ["trainer", "datamodule", "fabric"])
def test_ddp_with_default_distributed_sampler_splits_each_epoch(tmp_path, mode):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(JOB.parents[2]), *sys.path])}
    proc = subprocess.run([sys.executable, str(JOB), str(tmp_path), mode], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"{mode}_rank{r}.json").read_text()) for r in range(2)]
    for epoch in ("0", "1"):
        seen = [ranks[r][epoch] for r in range(2)]
        assert sorted(seen[0] + seen[1]) == list(range(50))  # each rank its own share: no double sharding
        assert len(seen[0]) == len(seen[1]) == 25
        for r in range(2):  # Lightning injected its DistributedSampler and set its epoch, as for torch's loader
            assert seen[r] == distributed_sampler_order(r, int(epoch))
    assert ranks[0]["0"] != ranks[0]["1"]  # a new permutation each epoch
