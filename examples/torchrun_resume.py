"""A torchrun job: ranks share one epoch, checkpoint mid-epoch, and resume at another world size.

    torchrun --nproc_per_node 2 examples/torchrun_resume.py WORKDIR --stop-after 3    # writes WORKDIR/state.json
    torchrun --nproc_per_node 3 examples/torchrun_resume.py WORKDIR --resume           # finishes the epoch

Each rank writes the indices it saw; the second run checks that together they cover the epoch exactly once.
Runs offline (gloo backend, CPU).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch.distributed as dist

from torch_drt import StatefulDataLoader

N = 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--stop-after", type=int, default=None, help="steps before the checkpoint")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = StatefulDataLoader(
        list(range(N)), batch_size=4, shuffle=True, seed=11, num_workers=2, collate_fn=list, split_by_rank=True
    )  # torch_drt's own split by rank: rank and world size from the process group, resumable at another world size
    state_file = args.workdir / "state.json"
    if args.resume:
        loader.load_state_dict(json.loads(state_file.read_text()))
    seen = []
    for step, batch in enumerate(loader, 1):
        seen += batch
        dist.barrier()  # a collective each step: every rank takes the same number of steps
        if args.stop_after and step == args.stop_after:
            break
    if rank == 0 and args.stop_after:
        state_file.write_text(json.dumps(loader.state_dict()))
        print(f"checkpoint after {args.stop_after} steps on {world} ranks: {loader.state_dict()}")
    phase = "resume" if args.resume else "first"
    (args.workdir / f"{phase}_{rank}.json").write_text(json.dumps(seen))
    dist.barrier()
    if rank == 0 and args.resume:
        first = [x for p in args.workdir.glob("first_*.json") for x in json.loads(p.read_text())]
        rest = [x for p in args.workdir.glob("resume_*.json") for x in json.loads(p.read_text())]
        ok = sorted(first + rest) == list(range(N))
        print(
            f"resumed on {world} ranks: {len(first)} samples before, {len(rest)} after; "
            f"every sample exactly once: {'yes' if ok else 'NO'}"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
