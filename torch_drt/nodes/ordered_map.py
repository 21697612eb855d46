"""OrderedMapper: apply a function to each item of a source on worker threads or processes, in order."""

from __future__ import annotations

import multiprocessing
import pickle
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from typing import Any, Generic, Literal, TypeVar

from torchdata.nodes import BaseNode

__all__ = ["OrderedMapper"]

T = TypeVar("T")
R = TypeVar("R")

_POLL_S = 0.1  # a waiting next() wakes this often, so Ctrl-C interrupts it promptly
_installed: Callable[[Any], Any] | None = None


def _install(payload: bytes) -> None:
    global _installed
    _installed = pickle.loads(payload)


def _call_installed(item: Any) -> Any:
    assert _installed is not None
    return _installed(item)


def _shutdown(executor: Executor) -> None:
    executor.shutdown(wait=False, cancel_futures=True)


class OrderedMapper(BaseNode[R], Generic[T, R]):
    """Maps ``map_fn`` over ``source`` with ``num_workers`` threads or processes, yielding results in order.

    At most ``in_flight`` items are submitted ahead of the consumer. An exception raised by ``map_fn`` is
    re-raised by the ``next()`` that reaches its item, with its own type, and the following ``next()`` goes on
    with the next item. The state is the source's state after the last item *delivered* (items submitted ahead
    are not counted), so resuming never skips or repeats an item whatever ``num_workers`` was.

    The worker pool is created by ``reset()`` on first use and reused by later resets (persistent workers);
    ``close()`` shuts it down. With ``method="process"`` the function is pickled once per worker process.

    Args:
        source: the node whose items are mapped.
        map_fn: the function applied to each item.
        num_workers: 0 maps in the calling thread; n > 0 uses n workers.
        in_flight: items submitted ahead (default ``2 * num_workers``); at least ``num_workers``.
        method: ``"thread"`` or ``"process"``.
        multiprocessing_context: start method for processes (``"spawn"``, ``"fork"``, ``"forkserver"``).
        timeout: seconds a ``next()`` waits for its item before raising ``TimeoutError`` (0: forever).
    """

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[T],
        map_fn: Callable[[T], R],
        num_workers: int = 0,
        in_flight: int | None = None,
        method: Literal["thread", "process"] = "thread",
        multiprocessing_context: str | None = None,
        timeout: float = 0,
    ) -> None:
        super().__init__()
        if num_workers < 0:
            raise ValueError(f"{num_workers=} must be >= 0")
        if method not in ("thread", "process"):
            raise ValueError(f"{method=} must be 'thread' or 'process'")
        in_flight = 2 * num_workers if in_flight is None else in_flight
        if num_workers and in_flight < num_workers:
            raise ValueError(f"{in_flight=} must be >= {num_workers=}")
        self.source = source
        self.map_fn = map_fn
        self.num_workers = num_workers
        self.in_flight = in_flight
        self.method = method
        self.multiprocessing_context = multiprocessing_context
        self.timeout = timeout
        self._executor: Executor | None = None
        self._finalizer: weakref.finalize | None = None
        self._pending: deque[tuple[dict[str, Any], Future]] = deque()
        self._exhausted = False
        self._delivered: dict[str, Any] | None = None

    def _make_executor(self) -> Executor:
        if self.method == "thread":
            return ThreadPoolExecutor(self.num_workers, thread_name_prefix="torch_drt-worker")
        ctx = multiprocessing.get_context(self.multiprocessing_context)
        payload = pickle.dumps(self.map_fn)
        return ProcessPoolExecutor(self.num_workers, mp_context=ctx, initializer=_install, initargs=(payload,))

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._drop_pending()
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])
        self._delivered = self.source.state_dict()
        self._exhausted = False
        if self.num_workers and (self._executor is None or getattr(self._executor, "_broken", False)):
            if self._executor is not None:
                _shutdown(self._executor)
            self._executor = self._make_executor()
            self._finalizer = weakref.finalize(self, _shutdown, self._executor)

    def _drop_pending(self) -> None:
        for _, future in self._pending:
            future.cancel()  # ones already running finish in the background and are discarded
        self._pending.clear()

    def _submit(self) -> None:
        assert self._executor is not None
        fn = self.map_fn if self.method == "thread" else _call_installed
        while not self._exhausted and len(self._pending) < self.in_flight:
            try:
                item = next(self.source)
            except StopIteration:
                self._exhausted = True
                return
            self._pending.append((self.source.state_dict(), self._executor.submit(fn, item)))

    def next(self) -> R:
        if not self.num_workers:
            item = next(self.source)
            self._delivered = self.source.state_dict()
            return self.map_fn(item)
        self._submit()
        if not self._pending:
            raise StopIteration
        state, future = self._pending[0]
        waited = 0.0
        while not future.done():  # not result(timeout): map_fn may raise TimeoutError itself
            wait((future,), timeout=_POLL_S)  # a KeyboardInterrupt here leaves the item at the head
            waited += _POLL_S
            if self.timeout and waited >= self.timeout and not future.done():
                raise TimeoutError(f"no result from the workers after {self.timeout}s (timeout={self.timeout})")
        self._pending.popleft()
        self._delivered = state
        self._submit()
        return future.result()

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._delivered}

    def close(self) -> None:
        """Cancel pending items and shut the worker pool down."""
        self._drop_pending()
        if self._finalizer is not None:
            self._finalizer()
        self._executor = None
