"""Run a Python snippet in a fresh interpreter that must exit: hangs and crashes fail the test, not pytest."""

from __future__ import annotations

import ast
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


INTERRUPT_PRELUDE = """
import sys, threading, time
_granted = []  # join time-outs granted by exit hooks after Ctrl-C
_join = threading.Thread.join
def _recording_join(self, timeout=None):
    if _interrupted:
        _granted.append(timeout)
    return _join(self, timeout)
threading.Thread.join = _recording_join
_interrupted = []
def _after_exit_hooks():  # registered first: runs after torch_drt's threading exit hooks
    print(f"HOOKS {_interrupted[0] if _interrupted else -1:.6f} {time.monotonic():.6f} {_granted}", file=sys.stderr,
          flush=True)
threading._register_atexit(_after_exit_hooks)
"""


def interrupt_script(body: str, *, settle: float = 0.5, limit: float = 20.0, start_limit: float = 120.0) -> dict:
    """Run ``body`` after ``INTERRUPT_PRELUDE``; once it prints ``READY``, wait ``settle`` seconds and send SIGINT to
    its process group (Ctrl-C at a terminal). ``body`` appends ``time.monotonic()`` to ``_interrupted`` when the
    ``KeyboardInterrupt`` reaches it, and re-raises it.

    Returns:
        ``returncode``, ``exit_s`` (SIGINT to exit), ``hooks_s`` (the ``KeyboardInterrupt`` to the end of the
        threading exit hooks), ``granted`` (join time-outs the hooks granted), ``stderr``. Fails the test when it
        does not start within ``start_limit`` or exit within ``limit`` seconds of SIGINT.
    """
    import time

    code = INTERRUPT_PRELUDE + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=script_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + start_limit
        while "READY" not in (line := proc.stdout.readline()):
            if not line or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail(f"the script did not get ready: {proc.communicate()[1][-3000:]}")
        time.sleep(settle)
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        try:
            _, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"Ctrl-C did not end the process within {limit} s: {proc.communicate()[1][-3000:]}")
        exit_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    hooks = [line.split(maxsplit=3) for line in err.splitlines() if line.startswith("HOOKS ")]
    interrupted, done, granted = -1.0, 0.0, []
    if hooks:
        interrupted, done, granted = float(hooks[-1][1]), float(hooks[-1][2]), ast.literal_eval(hooks[-1][3])
    return {"returncode": proc.returncode, "exit_s": exit_s, "hooks_s": done - interrupted if interrupted > 0 else None,
            "granted": granted, "stderr": err}
