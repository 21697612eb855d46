"""Loader benchmarks (issue 4), one run, ratios printed.

1. Overhead: 100,000 integer items, batch 64, identity collate: torch_drt with 0 workers, 2 worker processes (the
   default) and 2 worker threads against torch's DataLoader with 0 workers and with 2 persistent worker processes,
   and dataloader-rs (Python 3.13 side venv); then per item (batch_size=None, 20,000 items): torch_drt's process
   default against torch's processes. Runs interleaved, medians.
   Same interpreter: dataloader-rs needs Python 3.13, torch_drt runs here on 3.11, so that ratio mixes in the
   interpreters' speed. The side venv also runs torch_drt (this tree, on PYTHONPATH) and torch's DataLoader at 0
   workers, rounds interleaved with dataloader-rs's; a bare loop doing the same work without a loader, run in a
   fresh interpreter of each kind in turn, gives the interpreters' own speed ratio.
2. I/O-bound: 1,024 items that each sleep 10 ms, batch 32, 64 items in flight (2 workers x 32), against the ideal
   1,024 x 10 ms / 64.
3. Token stream: a 128 MiB int32 stream, sequence 2,048, batch 8, shuffled and not, against a plain numpy
   memory-map slice loop (the ceiling).

    python benchmarks/bench_loader.py [--repeats 5] [--python313 PATH] [--skip-side]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved_times, machine, median_time, run_side, side_python
from _ints_workload import Ints, drain, identity

from torch_drt import StatefulDataLoader
from torch_drt.storage import TokenStreamStorage, TokenStreamWriter


class Sleepy:
    def __len__(self) -> int:
        return 1024

    def __getitem__(self, i: int) -> int:
        time.sleep(0.01)
        return i


class FewInts(Ints):
    def __len__(self) -> int:
        return 20_000


def overhead(repeats: int) -> dict[str, float]:
    ds, few = Ints(), FewInts()
    two = {"num_workers": 2, "persistent_workers": True}
    loaders = {
        "torch_0": DataLoader(ds, batch_size=64, collate_fn=identity),
        "drt_0": StatefulDataLoader(ds, batch_size=64, collate_fn=identity),
        "torch_2": DataLoader(ds, batch_size=64, collate_fn=identity, **two),
        "drt_2p": StatefulDataLoader(ds, batch_size=64, collate_fn=identity, **two),
        "drt_2": StatefulDataLoader(ds, batch_size=64, collate_fn=identity, worker_method="thread", **two),
        "nodes_0": torchdata_nodes(ds, 0),
        "nodes_2": torchdata_nodes(ds, 2),
        "torch_item_2": DataLoader(few, batch_size=None, **two),
        "drt_item_2p": StatefulDataLoader(few, batch_size=None, **two),
    }
    return interleaved_times({name: drain(loader) for name, loader in loaders.items()}, repeats)


def torchdata_nodes(ds, workers: int):
    """The same work assembled from torchdata's own nodes: Batcher -> ParallelMapper (threads) -> Loader."""
    from torchdata.nodes import Batcher, IterableWrapper, Loader, ParallelMapper

    def fetch(indices):
        return [ds[i] for i in indices]

    node = Batcher(IterableWrapper(range(len(ds))), batch_size=64, drop_last=False)
    return Loader(ParallelMapper(node, map_fn=fetch, num_workers=workers, method="thread"))


def same_interpreter(side: Path, repeats: int) -> dict:
    """The 0-worker loaders on the side interpreter (``_side_same_interpreter.py``), and the bare loop in a fresh
    interpreter of each kind, this one (``host_bare``) and the side's (``bare``) in turn, ``repeats`` rounds of 5
    runs: medians, and their ratio (``interpreter_ratio``: > 1 where the side interpreter is faster)."""
    figures = run_side(side, "_side_same_interpreter.py", str(repeats), tree=True)
    if "error" in figures:
        return figures
    here: list[float] = []
    there: list[float] = []
    for _ in range(repeats):
        for py, times in ((Path(sys.executable), here), (side, there)):
            bare = run_side(py, "_side_same_interpreter.py", "--bare", "5")
            if "error" in bare:
                return bare
            times.append(bare["bare"])
    host_bare, side_bare = statistics.median(here), statistics.median(there)
    return {**figures, "bare": side_bare, "host_python": platform.python_version(), "host_bare": host_bare,
            "interpreter_ratio": host_bare / side_bare}


def io_bound(repeats: int) -> float:
    loader = StatefulDataLoader(Sleepy(), batch_size=32, num_workers=2, item_concurrency=32, collate_fn=identity,
                                worker_method="thread")
    return median_time(drain(loader), repeats)


def token_stream(repeats: int, workdir: Path) -> dict[str, float]:
    seq, batch = 2048, 8
    with TokenStreamWriter(workdir, "tokens", "int32", shard_elements=8 << 20) as writer:
        writer.write(np.arange(32 << 20, dtype=np.int32))  # 128 MiB over 4 shards
    storage = TokenStreamStorage(workdir / "tokens")
    n = storage.total_elements // seq
    mm = np.memmap(next((workdir / "tokens").glob("000000.bin")), dtype=np.int32, mode="r")
    maps = [np.memmap(p, dtype=np.int32, mode="r") for p in sorted((workdir / "tokens").glob("*.bin"))]
    flat = np.concatenate(maps) if len(maps) > 1 else mm  # the ceiling reads one contiguous array
    order = {"sequential": np.arange(n), "shuffled": np.random.default_rng(0).permutation(n)}
    figures = {}
    for name, idx in order.items():

        def ceiling(idx=idx):
            for b in range(0, n - batch + 1, batch):
                np.stack([flat[s * seq : (s + 1) * seq] for s in idx[b : b + batch]])

        loader = StatefulDataLoader.from_storage(
            storage,
            np.stack,
            sequence_length=seq,
            local_batch_size=batch,
            shuffle=name == "shuffled",
            shuffle_seed=0 if name == "shuffled" else None,
            num_workers=2,
        )
        tokens = n // batch * batch * seq
        figures[f"ceiling_{name}"] = tokens / median_time(ceiling, repeats)
        figures[f"drt_{name}"] = tokens / median_time(drain(loader), repeats)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--python313", help="a Python 3.13 with dataloader-rs installed (default: a venv in .bench)")
    parser.add_argument("--skip-side", action="store_true", help="do not run dataloader-rs")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    print(f"# loader benchmarks on {machine()}, median of {args.repeats}")

    side, reason = (None, "skipped by --skip-side") if args.skip_side else side_python(args.python313)
    rs = run_side(side, "_side_dataloader_rs.py", str(args.repeats)) if side else {"error": reason}

    ov = overhead(args.repeats)
    print("\n## overhead: 100,000 int items, batch 64, identity collate (seconds per epoch)")
    print(f"torch DataLoader, 0 workers:                 {ov['torch_0']:.4f}")
    print(f"torch DataLoader, 2 persistent processes:    {ov['torch_2']:.4f}")
    print(
        f"torch_drt, 0 workers:                        {ov['drt_0']:.4f}  ({ov['torch_0'] / ov['drt_0']:.2f}x torch, "
        "target >= 2x)"
    )
    print(
        f"torch_drt, 2 worker processes (default):     {ov['drt_2p']:.4f}  ({ov['torch_2'] / ov['drt_2p']:.2f}x torch, "
        "target >= 1x)"
    )
    print(
        f"torch_drt, 2 worker threads:                 {ov['drt_2']:.4f}  ({ov['torch_2'] / ov['drt_2']:.2f}x torch, "
        "target >= 5x)"
    )
    print(
        f"per item (batch_size=None, 20,000 items), 2 processes: torch {ov['torch_item_2']:.4f}, torch_drt "
        f"{ov['drt_item_2p']:.4f} ({ov['torch_item_2'] / ov['drt_item_2p']:.2f}x torch, target >= 1x)"
    )
    for w in (0, 2):
        print(
            f"torchdata nodes, {w} threads:                  {ov[f'nodes_{w}']:.4f}  "
            f"(torch_drt/torchdata nodes {ov[f'nodes_{w}'] / ov[f'drt_{w}']:.2f}x)"
        )
    if "error" in rs:
        print(f"dataloader-rs: skipped ({rs['error']})")
    else:
        for w in (0, 2):
            theirs = rs[f"overhead_{w}"]
            print(
                f"dataloader-rs, {w} workers:                   {theirs:.4f}  ({ov[f'torch_{w}'] / theirs:.2f}x torch; "
                f"torch_drt/dataloader-rs {theirs / ov[f'drt_{w}']:.2f}x)"
            )

    same = same_interpreter(side, args.repeats) if side else {"error": reason}
    if "error" in same:
        print(f"\nsame interpreter: skipped ({same['error']})")
    else:
        print(f"\n## same interpreter (Python {same['python']}): 100,000 int items, 0 workers (seconds per epoch)")
        print(f"torch_drt:        {same['drt_0']:.4f}  (torch_drt/dataloader-rs {same['rs_0'] / same['drt_0']:.2f}x, "
              f"{same['torch_0'] / same['drt_0']:.2f}x torch)")
        print(f"dataloader-rs:    {same['rs_0']:.4f}")
        print(f"torch DataLoader: {same['torch_0']:.4f}")
        print(f"bare loop:        {same['bare']:.4f} (Python {same['host_python']}: {same['host_bare']:.4f}; "
              f"Python {same['python']} {same['interpreter_ratio']:.2f}x as fast)")

    io = io_bound(args.repeats)
    ideal = 1024 * 0.010 / 64
    print("\n## I/O-bound: 1,024 items x 10 ms sleep, batch 32, 2 workers x 32 items in flight")
    print(f"torch_drt: {io:.3f}s, ideal {ideal:.3f}s, ratio {io / ideal:.2f} (target <= 1.3)")
    if "error" not in rs:
        print(f"dataloader-rs (same settings): {rs['io']:.3f}s, ratio {rs['io'] / ideal:.2f}")

    work = Path(tempfile.mkdtemp(prefix="bench_tokens_"))
    try:
        tok = token_stream(args.repeats, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gl = run_side(side, "_side_guideloom.py", str(args.repeats)) if side else {"error": reason}
    print("\n## token stream: 128 MiB int32, sequence 2,048, batch 8, 2 worker threads (tokens/s)")
    for name in ("sequential", "shuffled"):
        ours, ceil = tok[f"drt_{name}"], tok[f"ceiling_{name}"]
        line = (
            f"{name:<10} torch_drt {ours / 1e6:8.1f} M/s, numpy memmap loop {ceil / 1e6:8.1f} M/s, "
            f"{ours / ceil:.0%} of the ceiling (target >= 50%)"
        )
        print(line + ("" if "error" in gl else f"; guideloom {gl[name] / 1e6:.1f} M/s"))
    if "error" in gl:
        print(f"guideloom: skipped ({gl['error']})")
    if args.json:
        import json

        figures = {
            "overhead": ov,
            "io": {"drt": io, "ideal": ideal},
            "tokens": tok,
            "dataloader-rs": rs,
            "same_interpreter": same,
            "guideloom": gl,
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
