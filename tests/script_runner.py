"""Run a Python snippet in a fresh interpreter that must exit: hangs and crashes fail the test, not pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def script_env() -> dict[str, str]:
    """The environment of a child interpreter: this tree first on ``sys.path``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}


def run_script(body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``body`` (dedented); on time-out kill its whole process group (workers included) and fail."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=script_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the interpreter did not exit within {timeout}s; output: {out!r} {err[-3000:]!r}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
