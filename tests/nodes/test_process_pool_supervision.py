"""The process pool without restarts and with deadlines (``Supervision``), as the cache's writer processes use it:
a worker that dies or passes its start or task deadline stops the pool's waits with a typed error."""

from __future__ import annotations

import os
import time

import pytest

from torch_drt._processes.pool import ProcessPool
from torch_drt._processes.supervision import Supervision, WorkerExited, WorkerTimeout


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _slow_start(seconds: float):
    return lambda index: time.sleep(seconds)  # forked workers inherit it


def test_a_worker_that_dies_stops_a_pool_that_does_not_restart():
    pool = ProcessPool(os._exit, 1, "fork", supervision=Supervision(restart=False))
    try:
        before = pool.pids()
        task = pool.submit(3)
        with pytest.raises(WorkerExited, match="exited with code 3") as raised:
            pool.wait(task, 60)
        assert raised.value.exitcode == 3 and not pool.done(task)
        assert pool.pids() == before  # not replaced
    finally:
        pool.close()


def test_a_worker_that_does_not_start_in_time_stops_the_waits():
    stuck = Supervision(restart=False, start_timeout=0.5, task_timeout=600)
    pool = ProcessPool(abs, 1, "fork", initializer=_slow_start(600), supervision=stuck)
    try:
        task = pool.submit(-1)
        with pytest.raises(WorkerTimeout, match=r"more than 0\.5 s for its start") as raised:
            pool.wait(task, 60)  # returns False after 60 s when the start deadline is not kept
        assert raised.value.starting and raised.value.seconds == 0.5
    finally:
        pool.close()


def test_a_task_over_its_deadline_stops_the_waits():
    pool = ProcessPool(_sleep, 1, "fork", supervision=Supervision(restart=False, task_timeout=0.5))
    try:
        task = pool.submit(600)
        with pytest.raises(WorkerTimeout, match=r"more than 0\.5 s for a task") as raised:
            pool.wait(task, 60)
        assert not raised.value.starting
    finally:
        pool.close()


def test_a_tasks_deadline_counts_from_the_workers_start_not_from_its_submission():
    """The task waits in the pipe while its worker starts (2.5 s here): only its own run counts (0.3 s of 1.5)."""
    late = Supervision(restart=False, start_timeout=600, task_timeout=1.5)
    pool = ProcessPool(_sleep, 1, "fork", initializer=_slow_start(2.5), supervision=late)
    try:
        task = pool.submit(0.3)
        assert pool.wait(task, 60)
        assert pool.result(task) == 0.3
    finally:
        pool.close()


@pytest.mark.parametrize("field", ["start_timeout", "task_timeout"])
@pytest.mark.parametrize("value", [0, -1.0])
def test_deadlines_must_be_positive(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r} must be > 0"):
        Supervision(**{field: value})
