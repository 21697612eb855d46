"""WorkerTurns: the source node of per-worker streams, asking the workers for batches in torch's round robin."""

from __future__ import annotations

from typing import Any, NamedTuple

from torchdata.nodes import BaseNode

from torch_drt.describe import described


class StreamTask(NamedTuple):
    """Ask worker ``worker`` for the next batch of its stream.

    Attributes:
        worker: the worker (the task runs there: ``OrderedMapper`` routes by this attribute).
        epoch: the epoch of the stream.
        start: None to continue the worker's stream; else ``{"state": s}``: (re)open it from ``s`` (None: fresh).
    """

    worker: int
    epoch: int
    start: dict[str, Any] | None


class WorkerTurns(BaseNode[StreamTask]):
    """Cycles over the workers whose streams have not ended, one task per turn (torch's order for an
    ``IterableDataset``: worker 0's first batch, worker 1's first, ..., worker 0's second, ...).

    The state is ``{epoch, turn, exhausted}``: the worker whose turn is next and the workers known to have
    ended. A worker's first task after a reset carries its start (``starts``, set before the reset). The loader
    calls ``retire(worker)`` when a worker's stream ended; tasks already sent to it come back as ended too.

    Args:
        num_workers: workers (each owns one stream).
    """

    EPOCH_KEY = "epoch"
    TURN_KEY = "turn"
    EXHAUSTED_KEY = "exhausted"

    def __init__(self, num_workers: int) -> None:
        super().__init__()
        if num_workers < 1:
            raise ValueError(f"{num_workers=} must be > 0")
        self.num_workers = num_workers
        self.starts: dict[int, Any] = {}
        self.epoch = self.turn = 0
        self.exhausted: set[int] = set()
        self._pending_starts: dict[int, Any] = {}

    def __repr__(self) -> str:
        return described(self, num_workers=self.num_workers)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self.epoch = int(state.get(self.EPOCH_KEY, 0))
        self.turn = int(state.get(self.TURN_KEY, 0)) % self.num_workers
        self.exhausted = {int(w) for w in state.get(self.EXHAUSTED_KEY, ())}
        self._pending_starts = {w: self.starts.get(w) for w in range(self.num_workers)}

    def retire(self, worker: int) -> None:
        """Worker ``worker``'s stream ended: no more turns for it this epoch."""
        self.exhausted.add(worker)

    def next(self) -> StreamTask:
        n = self.num_workers
        worker = next((w % n for w in range(self.turn, self.turn + n) if w % n not in self.exhausted), None)
        if worker is None:
            raise StopIteration
        self.turn = (worker + 1) % n
        start = {"state": self._pending_starts.pop(worker)} if worker in self._pending_starts else None
        return StreamTask(worker, self.epoch, start)

    def get_state(self) -> dict[str, Any]:
        return {self.EPOCH_KEY: self.epoch, self.TURN_KEY: self.turn, self.EXHAUSTED_KEY: sorted(self.exhausted)}
