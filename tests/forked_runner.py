"""Run Python code in a forked child of the test process: a native crash (SIGSEGV, SIGBUS) ends the child, not
pytest, and the child starts in milliseconds with what this process has imported already (a fresh interpreter
costs seconds: torch_drt, pyarrow, numpy, and torch where they are imported).

For code that reads hostile bytes and may crash; not for code whose subject is a fresh interpreter (its imports,
its start-up or its exit): use ``conftest.run_isolated`` or ``script_runner.run_script`` for those. The child runs
torch on one thread (OpenMP's threads do not survive a fork: a parallel region in the child would wait forever).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import traceback


def _vm_size() -> int:
    """This process's address-space size in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def run_forked(code: str, *, timeout: float = 120, memory_bytes: int | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented, as ``__main__`` of a fresh namespace) in a forked child; ``run_isolated``'s answer.

    Args:
        code: the program; it prints its results (``print`` goes to the child's captured stdout).
        timeout: seconds before the child is killed (then ``subprocess.TimeoutExpired`` is raised).
        memory_bytes: address space the child may allocate beyond what it inherits (a runaway allocation fails
            there with ``MemoryError``).

    Returns:
        A ``subprocess.CompletedProcess``: stdout, stderr, and ``returncode`` (negative for a signal, e.g. -7 for
        SIGBUS; 1 for an uncaught exception, whose traceback is in stderr).
    """
    with (tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err,
          tempfile.TemporaryDirectory(prefix="forked-") as scratch):
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: it never returns into pytest
            status = 1
            try:
                tempfile.tempdir = os.environ["TMPDIR"] = scratch  # the child ends with os._exit, its finalizers
                os.dup2(out.fileno(), 1)  # unrun: what it leaves in temporary directories goes with ``scratch``
                os.dup2(err.fileno(), 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - left for os._exit
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                if "torch" in sys.modules:  # as torch's loader does in a forked worker: a parallel region would
                    sys.modules["torch"].set_num_threads(1)  # wait forever for the parent's OpenMP threads
                if memory_bytes is not None:
                    limit = _vm_size() + memory_bytes
                    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                exec(compile(textwrap.dedent(code), "<forked>", "exec"), {"__name__": "__main__"})
                status = 0
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(status)
        timer = threading.Timer(timeout, os.kill, (pid, signal.SIGKILL))
        timer.start()
        try:
            _, wait_status = os.waitpid(pid, 0)
        finally:
            timed_out = not timer.is_alive()
            timer.cancel()
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        raise subprocess.TimeoutExpired(["<forked>"], timeout, stdout, stderr)
    returncode = -os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.WEXITSTATUS(wait_status)
    return subprocess.CompletedProcess(["<forked>"], returncode, stdout, stderr)
