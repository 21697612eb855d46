"""OrderedMapper: apply a function to each item of a source on worker threads or processes, in order."""

from __future__ import annotations

import multiprocessing
import pickle
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
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


def _timed(fn: Callable[[Any], Any], item: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn(item)
    return time.perf_counter() - t0, result


def _shutdown(executor: Executor) -> None:
    executor.shutdown(wait=False, cancel_futures=True)


class OrderedMapper(BaseNode[R], Generic[T, R]):
    """Maps ``map_fn`` over ``source`` with ``num_workers`` threads or processes, yielding results in order.

    At most ``in_flight`` items are submitted ahead of the consumer. An exception raised by ``map_fn`` is
    re-raised by the ``next()`` that reaches its item, with its own type, and the following ``next()`` goes on
    with the next item. The state is the source's state after the last item *delivered* (items submitted ahead
    are not counted), so resuming never skips or repeats an item whatever ``num_workers`` was.

    Threads cost a hand-off per item. With ``adaptive`` (threads only), items whose ``map_fn`` takes less than
    ``inline_below_s`` on average are mapped in the calling thread instead, once the items in flight are
    drained; if they grow slower again, the workers take over. Order and state are the same either way.

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
        adaptive: map cheap items inline (threads only).
        inline_below_s: the mean ``map_fn`` time under which items are mapped inline.
    """

    SOURCE_KEY = "source"
    _WARMUP = 8
    _ALPHA = 0.1

    def __init__(
        self,
        source: BaseNode[T],
        map_fn: Callable[[T], R],
        num_workers: int = 0,
        in_flight: int | None = None,
        method: Literal["thread", "process"] = "thread",
        multiprocessing_context: str | None = None,
        timeout: float = 0,
        adaptive: bool = True,
        inline_below_s: float = 100e-6,
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
        self.adaptive = adaptive and method == "thread" and num_workers > 0
        self.inline_below_s = inline_below_s
        self._executor: Executor | None = None
        self._finalizer: weakref.finalize | None = None
        self._pending: deque[tuple[dict[str, Any], Future]] = deque()
        self._exhausted = False
        self._delivered: dict[str, Any] | None = None
        self._inline = num_workers == 0
        self._mean: float | None = None
        self._samples = 0

    @property
    def inline(self) -> bool:
        """True while items are mapped in the calling thread."""
        return self._inline

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
        self._delivered = None
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

    def _observe(self, seconds: float) -> None:
        self._samples += 1
        self._mean = seconds if self._mean is None else self._mean + self._ALPHA * (seconds - self._mean)
        if self._samples < self._WARMUP:
            return
        if not self._inline and self._mean < self.inline_below_s:
            self._inline = True  # stop submitting; what is in flight drains first, in order
        elif self._inline and self._mean > 4 * self.inline_below_s:
            self._inline = False

    def _submit(self) -> None:
        assert self._executor is not None
        while not self._exhausted and len(self._pending) < self.in_flight:
            try:
                item = next(self.source)
            except StopIteration:
                self._exhausted = True
                return
            if self.method == "process":
                future = self._executor.submit(_call_installed, item)
            elif self.adaptive:
                future = self._executor.submit(_timed, self.map_fn, item)
            else:
                future = self._executor.submit(self.map_fn, item)
            self._pending.append((self.source.state_dict(), future))

    def _next_inline(self) -> R:
        item = self.source.next()  # reset() initialised the source: skip BaseNode.__next__'s check
        self._delivered = None  # nothing in flight: the source's own state is the delivered one
        if not self.adaptive:
            return self.map_fn(item)
        seconds, result = _timed(self.map_fn, item)
        self._observe(seconds)
        return result

    def _wait(self, future: Future) -> None:
        waited = 0.0
        while not future.done():
            try:
                future.exception(timeout=_POLL_S)  # wakes every _POLL_S, so Ctrl-C interrupts promptly
            except FutureTimeout:
                waited += _POLL_S
                if self.timeout and waited >= self.timeout and not future.done():
                    raise TimeoutError(
                        f"no result from the workers after {self.timeout}s (timeout={self.timeout})"
                    ) from None

    def next(self) -> R:
        if self._inline and not self._pending:
            return self._next_inline()
        if not self._inline:
            self._submit()
        if not self._pending:
            raise StopIteration
        state, future = self._pending[0]
        self._wait(future)  # a KeyboardInterrupt here leaves the item at the head
        self._pending.popleft()
        self._delivered = state
        if not self._inline:
            self._submit()
        result = future.result()
        if self.adaptive:
            seconds, result = result
            self._observe(seconds)
        return result

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict() if self._delivered is None else self._delivered}

    def close(self) -> None:
        """Cancel pending items and shut the worker pool down."""
        self._drop_pending()
        if self._finalizer is not None:
            self._finalizer()
        self._executor = None
