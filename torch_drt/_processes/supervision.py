"""What a ``ProcessPool`` does when a worker dies or is late: restart it, or stop, under deadlines.

The loader's pools restart a worker that dies (its tasks go to the replacement) and have no deadlines: their owner
abandons a late task itself. The cache's writer processes follow dataset-rt instead: a worker that dies, does not
start in time or does not finish a task in time stops the pool (the waits raise ``WorkerExited`` or
``WorkerTimeout``) and its owner closes it; nothing is retried.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any


class WorkerExited(BrokenProcessPool):
    """A worker process died in a pool that does not restart its workers.

    Args:
        exitcode: the process's exit code (negative: the signal that ended it).
    """

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"a worker process exited with code {exitcode}")
        self.exitcode = exitcode


class WorkerTimeout(TimeoutError):
    """A worker process passed its start deadline or its task's.

    Args:
        seconds: the deadline passed.
        starting: the worker's start was late (else a task of a worker that started).
    """

    def __init__(self, seconds: float, starting: bool) -> None:
        super().__init__(f"a worker process took more than {seconds:g} s for {'its start' if starting else 'a task'}")
        self.seconds, self.starting = seconds, starting


@dataclass(frozen=True)
class Supervision:
    """How a pool treats its workers' deaths and how long they may take.

    Args:
        restart: replace a worker that dies (its tasks go to the replacement); False: a worker that dies stops the
            pool (``WorkerExited`` from its waits).
        start_timeout: seconds a worker has to start (to receive its function and run its initializer); None: no
            limit. Past it the waits raise ``WorkerTimeout``.
        task_timeout: seconds a worker has for each task, counted from when it can start it (its start, or its
            previous task's result); None: no limit. Past it the waits raise ``WorkerTimeout``.
    """

    restart: bool = True
    start_timeout: float | None = None
    task_timeout: float | None = None

    def __post_init__(self) -> None:
        for name in ("start_timeout", "task_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value!r} must be > 0 or None")

    def deadline(self, worker: Any) -> float:
        """When ``worker`` is late: its ``since`` (its start; once ``started``, its current task's) plus the limit that
        applies (none to a started worker without ``queued`` tasks)."""
        limit = self.task_timeout if worker.started else self.start_timeout
        return math.inf if limit is None or (worker.started and not worker.queued) else worker.since + limit

    def check(self, workers: Iterable[Any]) -> None:
        """Raise ``WorkerTimeout`` for the first of ``workers`` past its deadline."""
        now = time.monotonic()
        for worker in workers:
            if now >= self.deadline(worker):
                limit = self.task_timeout if worker.started else self.start_timeout
                assert limit is not None
                raise WorkerTimeout(limit, starting=not worker.started)
