"""One worker process as its ``ProcessPool`` sees it: its pipes, the tasks it holds (in order), its free ring slots,
and its clock (since its start; once it reported its start, since its current task: what ``Supervision``'s deadlines
count from)."""

from __future__ import annotations

import gc
import itertools
import logging
import multiprocessing.util
import os
from collections import deque
from time import monotonic
from typing import TYPE_CHECKING, Any

from torch_drt._processes.worker import worker_main

if TYPE_CHECKING:
    from torch_drt._processes.transport import SharedMemoryTransport

logger = logging.getLogger("torch_drt.loader")
_UIDS = itertools.count()  # worker ids of every pool of this process (ring file names, torch_drt-worker-<uid>)


def temp_dir() -> str:
    """This process's ``multiprocessing`` temporary directory (made now when it has none; removed when this process
    exits). A process made after it inherits it (``Process`` copies its maker's config, whatever the start method)
    and puts its own files there, so that one killed (a busy worker at a close) leaves no directory behind (torch's
    tensors sent through file descriptors start a listener socket in the sender's)."""
    return multiprocessing.util.get_temp_dir()


def _parent_pid(ctx: Any) -> int | None:
    """The pid a worker's parent has: this process's, but the fork server's with forkserver (None: ask then)."""
    return None if ctx.get_start_method() == "forkserver" else os.getpid()


class WorkerHandle:
    """Starts worker ``index``: a daemon process running ``worker_main`` with its own task and result pipes.

    Args:
        ctx: the pool's multiprocessing context.
        index: the worker's index in its pool (its initializer's argument).
        payload: the function and initializer (pickled unless forked).
        threads: torch's intra-op threads in the worker (None: torch's default).
        transport: the shared-memory transport of its results (None: none; its module imports torch).
        receiver: the pool's pid (ring file names).
    """

    __slots__ = ("answered", "free_slots", "process", "queued", "results", "rings", "since", "started", "tasks", "uid")

    def __init__(
        self,
        ctx: Any,
        index: int,
        payload: Any,
        threads: int | None,
        transport: SharedMemoryTransport | None,
        receiver: int,
    ) -> None:
        self.uid = next(_UIDS)  # unique in this process: two pools' ring files never share a name
        tasks_r, self.tasks = ctx.Pipe(duplex=False)
        self.results, results_w = ctx.Pipe(duplex=False)
        self.rings: str | None = None  # its ring files' prefix
        if transport is not None:
            from torch_drt._processes.transport import ring_prefix

            self.rings = ring_prefix(receiver, self.uid)
        ring = None if self.rings is None else (transport, self.rings)
        temp_dir()  # before the process is made: it copies this process's config, the directory with it
        self.process = ctx.Process(
            target=worker_main,
            args=(payload, index, tasks_r, results_w, ring, threads, _parent_pid(ctx)),
            name=f"torch_drt-worker-{self.uid}",
            daemon=True,
        )
        self.process.start()
        self.started, self.since = False, monotonic()
        logger.debug("started loader worker process %d (pid %d)", index, self.process.pid)
        tasks_r.close()
        results_w.close()
        self.queued: deque = deque()
        self.answered = False
        self.free_slots: list[int] = []
        if transport is not None:
            assert transport.slots is not None  # (sized by its mapper: torch_drt.nodes._mapper_pool.sized_transport)
            self.free_slots = list(range(transport.slots))

    def stop(self) -> None:
        """Tell it to exit: an idle worker is sent the stop, a busy one (or one whose task pipe is gone) killed."""
        try:
            if self.queued or gc.is_finalized(self.tasks):
                self.process.kill()
            else:
                self.tasks.send(None)
        except OSError:  # its pipe is broken: it is exiting already
            pass

    def retire(self, grace: float) -> None:
        """Let it exit within ``grace`` seconds, else kill it; close its pipes and remove its ring files.

        A pipe the garbage collector finalized (this handle was collected in a cycle, then resurrected by a pool's
        or a loader's close) closed its descriptor itself, which may be another file's by now: it is not closed
        again.
        """
        if grace:
            self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        for conn in (self.tasks, self.results):
            if not gc.is_finalized(conn):
                conn.close()
        if self.rings is not None:
            from torch_drt._processes.transport import unlink_rings

            unlink_rings(self.rings)
