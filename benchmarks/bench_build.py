"""Building a cache from images with 2 worker processes: torch_drt (on Ray, and in local worker processes) against
LitData and MosaicML Streaming.

Workload (issue 15): N generated JPEGs (256-400 px) are each decoded, resized to 224 x 224 and re-encoded
(quality 90, ``_build_work.convert``), with an int label, on two cores:

- torch_drt (Ray): ``torch_drt.ray.build_cache_set`` on a local Ray cluster of 2 CPUs (started once, not timed: a
  Ray user has a cluster), one task per part;
- torch_drt (processes): ``torch_drt.build.build_cache_set(split_rows(...), num_workers=2)``, the build without
  Ray on one machine (``_build_local.py``, in a process of its own: its workers are forked at the build's start,
  timed, and never from a Ray driver);
- LitData: ``optimize(fn, inputs, num_workers=2)``;
- MosaicML Streaming: ``MDSWriter`` in 2 processes, each over half the inputs, then ``merge_index``.

First, with no Ray cluster up (its idle daemons take ~5% of a CPU, which a build using both CPUs would pay
though it does not use Ray), ``--repeats`` rounds of: the ideal, the bare processes, the processes build and the
peers, the order rotated from round to round (``_build_rounds.py``). The ideal is the same conversion (``ToInput``)
in one process forked from a fresh ``_build_local.py`` after the build workers' warm-up, over the build's images
(``--ideal-images`` of them spread evenly, all up to that count), one after another, times the worker count (the
goal: a build at >= 95% of it, issue 26). The bare processes are 2 plain processes forked the same way, each
converting half the images, nothing written: bare/ideal is the machine's own scaling (2 processes on 2 CPUs
beside one), build/bare is torch_drt's overhead. Ratios are medians of the per-round ratios. Then (unless
``--skip-ray``) the Ray cluster starts (not timed) and the Ray build and the ideal again (the Ray row's) run
``--repeats`` rounds. Figures are medians. Both torch_drt builds are in ``--parts`` parts (default: one per 250
images, at least 2 per worker: each part pays a writer's open, fsync and publish). Each torch_drt build's CPU in
all is reported beside the conversion's (a ratio a loaded machine changes far less than the wall-clock share),
with the processes build's accounting (``_build_local.py``). Each ``--samples`` count (default 2,000 and 20,000)
gets its own table. Then the resume: a torch_drt build on Ray is killed once half of its rows are converted (every
worker SIGKILLs itself from then on), and the rerun that finishes it is timed against a full build. torch_drt
runs on warm workers (importing their modules before the timing, again after the kill), as on a long-lived
cluster. Peers run in the peers side environment (``benchmarks/_envs.py``, built by setup_peers.sh) and are
reported as skipped with the reason when it is absent. ``--images DIR`` makes the images there once and reuses
them in later runs.

    python benchmarks/bench_build.py [--samples 2000 20000] [--repeats 3] [--parts N] [--ideal-images 2000]
        [--images DIR] [--json FILE] [--skip-peers] [--skip-ray] [--skip-resume]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _build_inputs import make_images
from _build_rounds import round_ratios, run_rounds, summarize
from _build_table import print_table
from _common import tree_cpu
from _envs import env_python

BENCH = Path(__file__).resolve().parent
PEERS_PYTHON = env_python("peers")
WORKERS = 2
PEERS = ("litdata", "mosaicml-streaming")


class ToInput:
    """Row -> CacheInput through the shared conversion; optionally counts rows and dies once told to stop."""

    def __init__(self, stop_file: str | None = None, count_dir: str | None = None) -> None:
        self.stop_file, self.count_dir, self.rows = stop_file, count_dir, 0

    def __call__(self, row: dict):
        from _build_work import convert, label_of

        import torch_drt as drt

        if self.stop_file and os.path.exists(self.stop_file):
            os.kill(os.getpid(), signal.SIGKILL)  # the kill: this worker dies mid-part
        sample = drt.CacheInput(convert(row["path"]), {"label": label_of(row["path"])})
        self.rows += 1
        if self.count_dir and self.rows % 16 == 0:
            Path(self.count_dir, f"{os.getpid()}-{id(self)}").write_text(str(self.rows))
        return sample


def _warm_up() -> None:
    """Import the conversion's modules in this process (on a Ray worker)."""
    import _build_work  # noqa: F401

    import torch_drt.ray  # noqa: F401


def warm_workers() -> None:
    """Start (or restart, after a kill) the cluster's worker processes and import their modules, untimed, so
    that every timed build runs on warm workers as a long-lived cluster's jobs do."""
    import ray

    task = ray.remote(num_cpus=1)(_warm_up)
    ray.get([task.remote() for _ in range(WORKERS * 2)])


def torch_drt_build(paths: list[str], root: Path, name: str, parts: int, fn: ToInput, **kw) -> tuple[float, object]:
    import ray

    from torch_drt.ray import build_cache_set

    t0 = time.perf_counter()
    dataset = ray.data.from_items([{"path": p} for p in paths])
    report = build_cache_set(dataset, root, name, fn=fn, num_parts=parts, **kw)
    return time.perf_counter() - t0, report


def ray_build(paths: list[str], root: Path, name: str, parts: int) -> tuple[float, float]:
    """Seconds and CPU seconds (driver, daemons, workers) of one full torch_drt build on Ray."""
    from torch_drt import WriterConfig

    before = tree_cpu()
    quiet = WriterConfig(show_progress=False)
    seconds, report = torch_drt_build(paths, root, name, parts, ToInput(), writer_config=quiet)
    after = tree_cpu()
    assert report.ok, report.summary()
    shutil.rmtree(root / name)
    return seconds, sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def local_build(list_file: Path, out: Path, parts: int) -> dict:
    """Seconds, CPU seconds (the process and its workers) and the CPU accounting of one torch_drt build in local
    worker processes (``_build_local.py``)."""
    proc = subprocess.run([sys.executable, str(BENCH / "_build_local.py"), "build", str(list_file), str(out),
                           str(parts), str(WORKERS)], capture_output=True, text=True, timeout=7200)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the local build failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peer_build(peer: str, list_file: Path, out: Path) -> float | str:
    """Seconds of one peer conversion (in the side venv), or why it could not run."""
    if not PEERS_PYTHON.exists():
        return f"no peers side environment at {PEERS_PYTHON.parents[1]} (benchmarks/setup_peers.sh)"
    script = BENCH / "_side_build_peers.py"
    arg = "streaming" if peer == "mosaicml-streaming" else peer
    proc = subprocess.run([str(PEERS_PYTHON), str(script), arg, str(list_file), str(out), str(WORKERS)],
                          capture_output=True, text=True, timeout=7200)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def local_row(mode: str, list_file: Path, *args: object) -> tuple[float, float]:
    """Seconds and CPU seconds of the ideal or the bare processes (``_build_local.py``, a fresh process)."""
    proc = subprocess.run([sys.executable, str(BENCH / "_build_local.py"), mode, str(list_file), *map(str, args)],
                          capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"the {mode} run failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["seconds"], out["cpu"]


def resume(paths: list[str], work: Path, parts: int) -> dict:
    """Kill a build once half the rows are converted, then time the rerun that finishes it."""
    from torch_drt import WriterConfig

    quiet = WriterConfig(show_progress=False)
    counts, stop = work / "counts", work / "stop"
    counts.mkdir(parents=True)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            converted = sum(int(f.read_text() or 0) for f in counts.iterdir())
            if converted >= len(paths) // 2:
                stop.touch()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, killed = torch_drt_build(paths, work, "resume", parts, ToInput(str(stop), str(counts)), writer_config=quiet,
                                max_retries=0)
    done.set()
    watcher.join()
    warm_workers()
    published = sum(p.sample_count for p in killed.parts if p.status == "written")
    seconds, report = torch_drt_build(paths, work, "resume", parts, ToInput(), writer_config=quiet)
    assert report.ok, report.summary()
    return {"rerun": seconds, "published_before": published / len(paths), "killed": not killed.ok}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, nargs="+", default=[2_000, 20_000],
                        help="image counts: a table each (the images are made once, for the largest)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", type=int, help="parts of the torch_drt builds (default: samples / 250, >= 4)")
    parser.add_argument("--ideal-images", type=int, default=2000,
                        help="images the single-process rate is timed on, spread evenly over the build's (all of "
                             "them up to this count)")
    parser.add_argument("--images", help="make the images in this directory and keep them (reused when there)")
    parser.add_argument("--json", help="also write the figures to this JSON file (the largest count's at the top)")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--skip-ray", action="store_true", help="leave out the Ray rows and the resume")
    parser.add_argument("--skip-resume", action="store_true", help="leave out the kill-and-rerun measurement")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_build_"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), str(BENCH.parent), os.environ.get("PYTHONPATH", "")])
    by_samples = {}
    try:
        images = make_images(Path(args.images or work / "images"), max(args.samples), WORKERS)
        parts = {n: args.parts or max(2 * WORKERS, n // 250) for n in args.samples}  # >= 2 per worker
        for n in args.samples:  # before the Ray cluster starts: its idle daemons would take CPU from these builds
            by_samples[n] = measure_local(images[:n], work / f"n{n}", parts[n], args)
        if not args.skip_ray:
            measure_ray_all(images, work, parts, args, by_samples)
    finally:
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()
        shutil.rmtree(work, ignore_errors=True)
    for n in args.samples:
        print_table(by_samples[n], WORKERS, PEERS)
    if args.json:
        largest = by_samples[max(args.samples)]  # with the resume
        Path(args.json).write_text(json.dumps({**largest, "by_samples": by_samples}, indent=2))


def measure_local(paths: list[str], work: Path, parts: int, args: argparse.Namespace) -> dict:
    """The figures of one image count without Ray: the ideal, the bare processes, the processes build and the
    peers, ``args.repeats`` rounds (``_build_rounds.py``)."""
    work.mkdir(parents=True)
    list_file = work / "inputs.txt"
    list_file.write_text("\n".join(paths))
    accounts = []

    def build(r: int) -> tuple[float, float]:
        accounts.append(local_build(list_file, work / f"local{r}", parts))
        return accounts[-1]["seconds"], accounts[-1]["cpu"]

    sides = {"ideal": lambda r: local_row("ideal", list_file, args.ideal_images, WORKERS),
             "bare": lambda r: local_row("bare", list_file, WORKERS), "processes": build}
    for peer in () if args.skip_peers else PEERS:
        sides[peer] = lambda r, peer=peer: (peer_build(peer, list_file, work / f"{peer}{r}"), None)
    times, cpu = run_rounds(sides, args.repeats)
    figures = summarize(times, cpu, len(paths), "no run")
    figures.update({peer: {"error": "skipped (--skip-peers)"} for peer in PEERS if peer not in figures})
    figures["processes"]["accounting"] = sorted(accounts, key=lambda a: a["seconds"])[len(accounts) // 2]
    figures["ratios"] = round_ratios(times, {"build/ideal": ("processes", "ideal"), "bare/ideal": ("bare", "ideal"),
                                             "build/bare": ("processes", "bare"),
                                             **{f"build/{p}": ("processes", p) for p in PEERS}})
    figures.update(samples=len(paths), parts=parts, repeats=args.repeats)
    return figures


def measure_ray_all(images: list[str], work: Path, parts: dict, args: argparse.Namespace, by_samples: dict) -> None:
    """Start the Ray cluster (not timed) and add the Ray figures of every image count to ``by_samples``."""
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False, configure_logging=False)
    init_s = time.perf_counter() - t0
    warm_workers()
    for n in args.samples:
        resume_too = not args.skip_resume and n == max(args.samples)  # once, at the largest count
        by_samples[n].update(measure_ray(images[:n], work / f"n{n}", parts[n], args, resume_too), ray_init=init_s)


def measure_ray(paths: list[str], work: Path, parts: int, args: argparse.Namespace, resume_too: bool) -> dict:
    """The figures of one image count on the Ray cluster: its build and the ideal again (beside the cluster),
    ``args.repeats`` rounds; then the kill and rerun when asked."""
    list_file = work / "inputs.txt"
    sides = {"ideal_ray": lambda r: local_row("ideal", list_file, args.ideal_images, WORKERS),
             "torch_drt": lambda r: ray_build(paths, work, f"full{r}", parts)}
    times, cpu = run_rounds(sides, args.repeats)
    figures = summarize(times, cpu, len(paths), "no run")
    figures["ray_ratios"] = round_ratios(times, {"build/ideal": ("torch_drt", "ideal_ray")})
    if resume_too:
        rerun = resume(paths, work / "resume_root", parts)
        full = figures["torch_drt"]["seconds"]
        figures["resume"] = {**rerun, "full": full, "ratio": rerun["rerun"] / full}
    return figures


if __name__ == "__main__":
    sys.exit(main())
