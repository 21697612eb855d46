"""Helpers shared by the benchmark scripts: timing, tables and the Python 3.13 side venv (never built here)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _envs import env_python

ROOT = Path(__file__).resolve().parents[1]


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_times(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median wall time of each ``fn()``, the runs interleaved (one of each per round) after ``warmup`` rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def machine() -> str:
    """One line describing this machine."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def side_python(explicit: str | None) -> tuple[Path | None, str]:
    """A Python 3.13 with dataloader-rs and guideloom: ``explicit``, or the ``py313`` side environment.

    Returns:
        (interpreter or None, reason when None).
    """
    if explicit:
        return Path(explicit), ""
    py = env_python("py313")
    if py.exists():
        return py, ""
    return None, f"no Python 3.13 side environment at {py.parents[1]} (build it: benchmarks/setup_peers.sh)"


def run_side(py: Path, script: str, *args: str, timeout: float = 900, tree: bool = False) -> dict:
    """Run a benchmark helper under the side interpreter; it prints one JSON object. ``tree``: torch_drt is imported
    from this source tree (on ``PYTHONPATH``), not from the side environment."""
    env = None
    if tree:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [str(py), str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(title: str, header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table."""
    out = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(machine(), sys.executable)


def tree_cpu() -> dict[int, float]:
    """CPU seconds so far of this process and its descendants (a Ray cluster's daemons and workers), by pid."""
    import psutil  # Ray's own dependency

    out = {}
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = times.user + times.system
    return out
