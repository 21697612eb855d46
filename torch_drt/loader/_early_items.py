"""EarlyItems: a sync dataset's items on the item threads, started as the loader submits each batch to a worker.

With thread workers and ``item_concurrency > 1`` the item threads (``num_workers x item_concurrency``) are shared
by every worker. A batch's items started only when a worker takes the batch leave the threads that finished their
item idle until the batch's slowest item is in and the worker takes its next batch. Started as the batches are
submitted (``begin``), the items of the batches in flight wait in one first-in first-out queue, so a thread that
finishes an item takes the next one at once, the oldest batch's first (an async dataset's ``LoopFetch`` does the
same on its event loop).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from torch_drt.nodes.batch_plan import BatchPlan
from torch_drt.nodes.thread_pool import ThreadPool


def submit_items(pool: ThreadPool, plan: BatchPlan) -> list[Future]:
    """Queue ``plan``'s items on ``pool`` (jobs ``(epoch, index, position)``), in order."""
    submit, epoch = pool.submit, plan.epoch
    return [submit((epoch, index, position)) for index, position in zip(plan.indices, plan.positions)]


def results(futures: list[Future]) -> list[Any]:
    """The items, in order; the first failed item's error (in order) is raised with its own type."""
    return [future.result() for future in futures]


class EarlyItems:
    """The item fetches ``begin`` started, by batch, until a worker takes them (``take``) or the loader drops
    them (``dropped``). ``begin`` and ``dropped`` run in the loader's thread, ``take`` on the workers (a dict's
    set and pop are atomic)."""

    def __init__(self) -> None:
        self._started: dict[int, tuple[BatchPlan, list[Future]]] = {}  # id(plan): (plan, its items' futures)

    def __len__(self) -> int:
        return len(self._started)

    def begin(self, pool: ThreadPool, plan: BatchPlan) -> None:
        """Queue ``plan``'s items on ``pool`` now; the worker that takes the batch waits for them."""
        self._started[id(plan)] = (plan, submit_items(pool, plan))

    def take(self, plan: BatchPlan) -> list[Future] | None:
        """The futures of ``plan``'s items if ``begin`` started them (then forgotten here), else None."""
        started = self._started.pop(id(plan), None)
        return started[1] if started is not None and started[0] is plan else None

    def dropped(self) -> None:
        """Cancel the items of the batches no worker took (the loader dropped them); those running finish and
        are discarded."""
        started, self._started = self._started, {}
        for _, futures in started.values():
            for future in futures:
                future.cancel()
