"""Cache creation and full sequential read: torch_drt against dataset-rt 0.4.8 on the same data, one run.

Workload (issue 2): 20,000 samples of 4 KiB with an int label. Prints samples/s, MB/s and ratios.

It also prints what integrity costs on reads (issue 10), with ``bench_integrity.py``'s workloads and table: reads
as shipped (record checksums and file size checks), without the XXH3 record checks, and without either.

    python benchmarks/bench_cache.py [--samples 20000] [--repeats 3]
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _workload import PAYLOAD, payloads, workload_parser
from bench_integrity import bench_integrity, print_integrity


class Source:
    """The same pre-built payloads for both libraries, so only the cache work is timed."""

    def __init__(self, name: str, payloads: list[bytes], make_input) -> None:
        self.name = name
        self.payloads = payloads
        self.make_input = make_input

    def __len__(self) -> int:
        return len(self.payloads)

    def __iter__(self):
        make = self.make_input
        for i, data in enumerate(self.payloads):
            yield make(data, {"label": i % 1000})


def _median_rate(fn, n: int, repeats: int) -> float:
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def bench_torch_drt(root: Path, payloads: list[bytes], repeats: int) -> tuple[float, float]:
    import torch_drt as drt

    rt = drt.DatasetRuntime(num_workers=2)
    cfg = drt.WriterConfig(show_progress=False)

    def write(r: int) -> None:
        (res,) = rt.write_cache(Source(f"drt{r}", payloads, drt.CacheInput), root, writer_config=cfg)
        assert isinstance(res, drt.CacheWriteSuccess), res

    write_rate = _median_rate(write, len(payloads), repeats)
    ds = rt.cached_dataset([root / "drt0"], reader_config=drt.ReaderConfig(seed=0, shuffle=False))

    def read(_: int) -> None:
        n = 0
        for batch in ds.iter_batches(1024):
            n += len(batch.data)
        assert n == len(payloads)

    return write_rate, _median_rate(read, len(payloads), repeats)


def bench_dataset_rt(root: Path, payloads: list[bytes], repeats: int) -> tuple[float, float] | str:
    try:
        import dataset_rt
    except ImportError as e:
        return f"skipped: dataset-rt not installed ({e})"
    rt = dataset_rt.DatasetRuntime(num_workers=2)
    cfg = dataset_rt.WriterConfig(show_progress=False)

    def write(r: int) -> None:
        (res,) = rt.write_cache([Source(f"drt{r}", payloads, dataset_rt.CacheInput)], root, writer_config=cfg)
        assert isinstance(res, dataset_rt.CacheWriteSuccess), res

    write_rate = _median_rate(write, len(payloads), repeats)
    ds = rt.cached_dataset([root / "drt0"], reader_config=dataset_rt.ReaderConfig(seed=0, shuffle=False))

    def read(_: int) -> None:
        n = 0
        for sample in ds:
            n += len(sample.data) > 0
        assert n == len(payloads)

    return write_rate, _median_rate(read, len(payloads), repeats)


def run_peers(repeats: int) -> dict:
    """MosaicML Streaming and LitData, in their side environment (benchmarks/_envs.py), on the same payloads."""
    import subprocess

    from _envs import env_python

    root = Path(__file__).resolve().parents[1]
    python = env_python("peers")
    if not python.exists():
        reason = f"no peers side environment at {python.parents[1]}; build it with benchmarks/setup_peers.sh"
        return {"mosaicml-streaming": {"error": reason}, "litdata": {"error": reason}}
    proc = subprocess.run(
        [str(python), str(root / "benchmarks" / "_side_peers.py"), str(repeats)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
        return {"mosaicml-streaming": {"error": reason}, "litdata": {"error": reason}}
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = workload_parser(__doc__, "--repeats", 3)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--skip-peers", action="store_true", help="skip MosaicML Streaming and LitData")
    args = parser.parse_args()
    records = payloads(args.samples)
    mb = args.samples * PAYLOAD / 1e6
    work = Path(tempfile.mkdtemp(prefix="bench_cache_"))
    try:
        ours = bench_torch_drt(work / "torch_drt", records, args.repeats)
        theirs = bench_dataset_rt(work / "dataset_rt", records, args.repeats)
        integrity = bench_integrity(work / "integrity", records, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peers = {} if args.skip_peers else run_peers(args.repeats)
    print(f"# cache: {args.samples} samples x {PAYLOAD} B, int label, median of {args.repeats}")
    print(f"{'library':<12} {'write samples/s':>16} {'write MB/s':>11} {'read samples/s':>16} {'read MB/s':>10}")
    rows = [("torch_drt", ours)] + ([("dataset-rt", theirs)] if not isinstance(theirs, str) else [])
    for name, (w, r) in rows:
        print(f"{name:<12} {w:>16,.0f} {w * mb / args.samples:>11,.1f} {r:>16,.0f} {r * mb / args.samples:>10,.1f}")
    if isinstance(theirs, str):
        print(f"dataset-rt   {theirs}")
    else:
        print(f"ratio write torch_drt/dataset-rt: {ours[0] / theirs[0]:.2f}x (target >= 3x)")
        print(f"ratio read  torch_drt/dataset-rt: {ours[1] / theirs[1]:.2f}x (target >= 10x)")
    for name, figures in peers.items():
        if "error" in figures:
            print(f"{name:<12} skipped: {figures['error']}")
        else:
            print(
                f"{name:<12} {figures['write']:>16,.0f} {figures['write'] * mb / args.samples:>11,.1f} "
                f"{figures['read']:>16,.0f} {figures['read'] * mb / args.samples:>10,.1f}   (its torch loader, "
                f"batch 256: {figures['loader']:,.0f} samples/s)"
            )
    print_integrity(integrity, args.repeats)
    if args.json:
        import json

        result = {"torch_drt": {"write": ours[0], "read": ours[1]}, "peers": peers}
        result["integrity"] = dict(integrity)
        result["dataset-rt"] = {"error": theirs} if isinstance(theirs, str) else {"write": theirs[0], "read": theirs[1]}
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
