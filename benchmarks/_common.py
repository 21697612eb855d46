"""Helpers shared by the benchmark scripts: timing, tables and the Python 3.13 side venv."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDE_VENV = ROOT / ".bench" / "py313"
SIDE_PACKAGES = [
    "dataloader-rs==0.2.0",
    "guideloom==1.1.0",
    "numpy",
    "aiohttp",
    "torch==2.14.1",
    "torchdata>=0.11,<0.12",
]


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


def machine() -> str:
    """One line describing this machine."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def side_python(explicit: str | None) -> tuple[Path | None, str]:
    """A Python 3.13 with dataloader-rs and guideloom: ``explicit``, or a venv made once under .bench/.

    Returns:
        (interpreter or None, reason when None).
    """
    if explicit:
        return Path(explicit), ""
    py = SIDE_VENV / "bin" / "python"
    if py.exists():
        return py, ""
    candidates = [shutil.which("python3.13"), *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"))]
    base = next((str(c) for c in candidates if c and _runs(str(c))), None)
    if base is None:
        return None, "no working python3.13 found (pass --python313)"
    try:
        subprocess.run([base, "-m", "venv", str(SIDE_VENV)], check=True, capture_output=True, timeout=300)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", *SIDE_PACKAGES], check=True, capture_output=True, timeout=900
        )
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(SIDE_VENV, ignore_errors=True)
        return None, f"could not build the Python 3.13 venv: {e}"
    return py, ""


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def run_side(py: Path, script: str, *args: str, timeout: float = 900) -> dict:
    """Run a benchmark helper under the side interpreter; it prints one JSON object."""
    proc = subprocess.run(
        [str(py), str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True, timeout=timeout
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
