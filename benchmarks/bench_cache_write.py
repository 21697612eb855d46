"""Cache creation, interleaved: torch_drt, dataset-rt and MosaicML's ``MDSWriter`` on the same records (issue 26).

Workload: bench_cache.py's, 20,000 records of 4 KiB with an int label. Each round writes once with each library, in
a rotated order, every write into a fresh directory removed after it; the figures are medians over the rounds of
wall time (and CPU time of the writing process, all its threads, for a busy machine). torch_drt syncs every file
and directory to disk before it publishes (its default, ``WriterConfig(durable=True)``); dataset-rt and MDSWriter
sync nothing (no fsync at all: see ``strace -f -e trace=fsync,fdatasync,sync_file_range``), so torch_drt is also
timed at the same level of work, ``durable=False`` (a scratch cache: the same files, hashes and rename, no sync),
and the ratios are printed against both. MDSWriter runs in the peers side environment (benchmarks/setup_peers.sh)
through benchmarks/_side_mds_writer.py; without it, it is reported as skipped.

    python benchmarks/bench_cache_write.py [--samples 20000] [--rounds 5]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _envs import env_python
from _workload import PAYLOAD, payloads, workload_parser
from bench_cache import Source

HERE = Path(__file__).resolve().parent
SAME_WORK = "torch_drt, no sync"  # WriterConfig(durable=False): what the peers do


def _in_process(lib, work: Path, payloads: list[bytes], **config):
    rt = lib.DatasetRuntime(num_workers=2)
    cfg = lib.WriterConfig(show_progress=False, **config)
    count = [0]

    def write() -> tuple[float, float]:
        count[0] += 1
        name = f"w{count[0]}"
        t0, c0 = time.perf_counter(), time.process_time()
        (res,) = rt.write_cache([Source(name, payloads, lib.CacheInput)], work, writer_config=cfg)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert type(res).__name__ == "CacheWriteSuccess", res
        shutil.rmtree(work / name)
        return wall, cpu

    return write


def _mds(samples: int):
    python = env_python("peers")
    if not python.exists():
        return f"no peers side environment at {python.parents[1]} (benchmarks/setup_peers.sh)"
    proc = subprocess.Popen([str(python), str(HERE / "_side_mds_writer.py"), str(samples)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if proc.stdout.readline().strip() != "ready":
        return f"the MDSWriter side process did not start (exit {proc.wait()})"

    def write() -> tuple[float, float]:
        proc.stdin.write("write\n")
        proc.stdin.flush()
        wall, cpu = proc.stdout.readline().split()
        return float(wall), float(cpu)

    write.close = lambda: (proc.stdin.close(), proc.wait(60))
    return write


def main() -> None:
    parser = workload_parser(__doc__, "--rounds", 5)
    args = parser.parse_args()
    records = payloads(args.samples)
    work = Path(tempfile.mkdtemp(prefix="bench_cache_write_"))
    import torch_drt

    writers = {
        "torch_drt": _in_process(torch_drt, work / "torch_drt", records),
        SAME_WORK: _in_process(torch_drt, work / "torch_drt_scratch", records, durable=False),
    }
    skipped = {}
    try:
        import dataset_rt

        writers["dataset-rt"] = _in_process(dataset_rt, work / "dataset_rt", records)
    except ImportError as e:
        skipped["dataset-rt"] = f"not installed ({e})"
    mds = _mds(args.samples)
    if isinstance(mds, str):
        skipped["mosaicml-streaming"] = mds
    else:
        writers["mosaicml-streaming"] = mds
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in writers}
    names = list(writers)
    try:
        for name in names:  # one untimed write each: imports, first-use allocations
            writers[name]()
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                times[name].append(writers[name]())
    finally:
        if hasattr(writers.get("mosaicml-streaming"), "close"):
            writers["mosaicml-streaming"].close()
        shutil.rmtree(work, ignore_errors=True)
    wall = {n: statistics.median(w for w, _ in t) for n, t in times.items()}
    cpu = {n: statistics.median(c for _, c in t) for n, t in times.items()}
    print(f"# cache create: {args.samples} x {PAYLOAD} B, int label; {args.rounds} interleaved rounds, medians")
    print("ratios: the library's time / torch_drt's (durable, the default), and / torch_drt's without syncs (the "
          "peers' level of work)")
    print(f"{'library':<20} {'samples/s':>10} {'MB/s':>8} {'CPU s':>7} {'torch_drt ratio':>16} {'by CPU':>7} "
          f"{'no-sync ratio':>14} {'by CPU':>7}")
    for name in names:
        rate = args.samples / wall[name]
        print(f"{name:<20} {rate:>10,.0f} {rate * PAYLOAD / 1e6:>8,.1f} {cpu[name]:>7.3f} "
              f"{wall[name] / wall['torch_drt']:>15.2f}x {cpu[name] / cpu['torch_drt']:>6.2f}x "
              f"{wall[name] / wall[SAME_WORK]:>13.2f}x {cpu[name] / cpu[SAME_WORK]:>6.2f}x")
    for name, reason in skipped.items():
        print(f"{name:<20} skipped: {reason}")
    print("goals: >= 3x dataset-rt, >= 1.5x mosaicml-streaming (wall time, on a quiet machine)")


if __name__ == "__main__":
    main()
