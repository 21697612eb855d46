"""Closing process workers does not wait for them to exit (an epoch's end ``next()`` paid their exit: ~20 ms forked,
~60 ms through a fork server), yet no worker is ever leaked: the process-wide reaper joins those that exit and kills
those still there after ``EXIT_GRACE_S``. A process is told by its pid and its start time (``/proc/<pid>/stat``), so
a pid reused by another process never passes for the worker."""

from __future__ import annotations

import os
import threading
import time

import pytest

from torch_drt import StatefulDataLoader
from torch_drt._processes import reaper

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="tells processes apart by /proc/<pid>/stat"),
]
_WAIT_S = reaper.EXIT_GRACE_S + 60  # far past the grace: only a leaked worker is still there then


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's closing parenthesis (the state first), or None once
    the process is reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks: field 22) of a process not reaped yet (running or a zombie), else None."""
    fields = _stat(pid)
    return None if fields is None else (pid, int(fields[19]))


def _running(processes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Those of ``processes`` that are still there (the same pid with the same start time: not a reused pid)."""
    return [p for p in processes if _identity(p[0]) == p]


def _zombie(process: tuple[int, int]) -> bool:
    """Whether ``process`` has exited (or was killed) and waits to be reaped."""
    fields = _stat(process[0])
    return fields is not None and fields[0] == "Z"


def _wait_gone(processes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    deadline = time.monotonic() + _WAIT_S
    while _running(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _running(processes)


def _workers(loader: StatefulDataLoader) -> list[tuple[int, int]]:
    processes = [_identity(pid) for pid in loader._mode.mapper.worker_pids()]
    assert len(processes) == loader.num_workers and None not in processes
    return processes


def _linger(worker_id: int) -> None:
    """A worker whose exit waits 10 minutes: a non-daemon thread that the interpreter joins before it ends."""
    threading.Thread(target=time.sleep, args=(600,), daemon=False).start()


@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_the_workers_of_an_ended_epoch_exit_and_are_reaped(context):
    loader = StatefulDataLoader(list(range(8)), batch_size=2, collate_fn=list, num_workers=2,
                                multiprocessing_context=context)
    it = iter(loader)
    assert next(it) == [0, 1]
    processes = _workers(loader)
    assert [batch for batch in it] == [[2, 3], [4, 5], [6, 7]]  # the epoch's end closes its workers
    assert loader._mode.mapper.worker_pids() == []
    assert _wait_gone(processes) == []  # exited, and reaped (no zombie left)
    assert list(loader) == [[0, 1], [2, 3], [4, 5], [6, 7]]  # the next epoch starts new ones
    loader.close()


def test_an_epoch_end_returns_before_slow_workers_exit_and_the_reaper_kills_them_after_the_grace():
    loader = StatefulDataLoader(list(range(8)), batch_size=2, collate_fn=list, num_workers=2,
                                worker_init_fn=_linger, multiprocessing_context="fork")
    it = iter(loader)
    assert next(it) == [0, 1]
    processes = _workers(loader)
    assert [batch for batch in it] == [[2, 3], [4, 5], [6, 7]]  # the end closes the workers, idle: told to stop
    assert _running(processes) == processes and not any(map(_zombie, processes))  # not waited for (it waited 1 s
    # for them, then killed them)
    assert _wait_gone(processes) == []  # killed after EXIT_GRACE_S, and reaped


def test_workers_still_exiting_at_interpreter_exit_are_ended_by_threading_exit_hooks():
    """The reaper is a daemon thread: at exit it is stopped (no torch_drt thread alive at ``atexit``) and the workers
    it still holds are ended then, killed after a short wait, not left behind."""
    from script_runner import run_script

    proc = run_script("""
        import atexit, threading, time
        atexit.register(lambda: print("ALIVE", sorted(t.name for t in threading.enumerate()
                                                      if t.name.startswith("torch_drt"))))
        from torch_drt import StatefulDataLoader

        def linger(worker_id):
            threading.Thread(target=time.sleep, args=(600,), daemon=False).start()

        loader = StatefulDataLoader(list(range(8)), batch_size=2, collate_fn=list, num_workers=2,
                                    worker_init_fn=linger, multiprocessing_context="fork")
        it = iter(loader)
        next(it)
        for pid in loader._mode.mapper.worker_pids():  # pid and start time (/proc/<pid>/stat's field 22)
            print("WORKER", pid, open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19], flush=True)
        assert len(list(it)) == 3  # the epoch's end hands its workers to the reaper
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ALIVE []" in proc.stdout, proc.stdout
    processes = [tuple(map(int, line.split()[1:])) for line in proc.stdout.splitlines() if line.startswith("WORKER ")]
    assert len(processes) == 2
    assert _running(processes) == []  # ended with the interpreter, not orphaned
