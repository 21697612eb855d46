"""LoaderIterator: one epoch of a pipeline loader, delivered in order."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from operator import length_hint
from time import perf_counter_ns
from types import GeneratorType
from typing import TYPE_CHECKING, Any
from weakref import ref

from torch_drt.loader._stats_recorder import count_items
from torch_drt.loader.device import move_to_device
from torch_drt.nodes._inline_loop import DUE, Countdown

if TYPE_CHECKING:
    from torch_drt.loader.base import PipelineLoader

_SPENT: Iterator[Any] = iter(())  # a countdown with no untimed call left (shared: an exhausted iterator stays so)


Fetched = tuple[Any, Any, bool]
"""What the fetch stage returns for one batch: ``(batch, indices, last)``, a plain tuple (a NamedTuple's instance
costs a C call and a second tuple per batch): the collated batch, what ``return_indices`` yields with it, and
whether it is its epoch's last batch."""


class LoaderIterator:
    """Yields this rank's batches of one epoch, in order; reports the end of the epoch to the loader's position.

    Only one thread may advance it at a time (a second gets ``RuntimeError``); a newer ``iter(loader)`` or
    ``load_state_dict()`` supersedes it. An exception from the dataset, transform, collate or a worker (a time-out,
    a dead process) propagates with its own type and the failed batch counts as delivered: the next ``next()``
    continues with the following batch. A ``KeyboardInterrupt`` counts nothing: the same batch comes next.
    """

    def __init__(self, loader: PipelineLoader, generation: int) -> None:
        self._loader = loader
        self._generation = generation
        self._baton = [True]  # held (popped) by the thread advancing it: list.pop is atomic, a Lock's acquire(False)
        # parses its arguments (~4x the cost)
        self._done = False
        self._device, self._with_indices = loader._device, loader.return_indices
        self._in_order = loader.in_order  # out of order, the batch marked last may come before others
        self._stats = loader._stats  # a StatsRecorder, or None; it times one call in `_period` (see _timed_next)
        self._period = 1
        # (statistics on) the countdown to the next timed call costs no Python code per batch (which costs ~1% of a
        # 100k-ints batch): `_ticks` holds one tick per untimed call left (`_arm`). A generator (the inline loop,
        # `inline_batches`: 0 workers, or threads that map cheap batches inline) is given the ticks (a `Countdown`):
        # it takes them a run of batches at a time and returns DUE when none is left, so an untimed call runs the
        # statistics-off code; a method's calls are preceded by next(_ticks, True) in __next__ (`_check`), in C.
        # `_ticks`: an iterator of ticks while `_check` (next() takes them), a Countdown given to a loop, or None
        # (statistics off); Any, as `__next__` relies on `_check` for next() (a check there would cost per batch)
        self._ticks: Any = None
        self._check = False
        self._armed: Countdown | None = None  # the countdown `_next` was made with, for the calls after the first
        self._exact = 0  # untimed batches counted exactly since the last timed call
        self._started = self._starting = False
        stats = self._stats
        if stats is not None:  # (run once per epoch, on cold caches: each line here costs ~1 us more than in a loop)
            if stats.live is not None:  # a superseded iterator's batches are counted before this one takes over
                stats.flush()
            stats.live = ref(self)
            # the countdown carries on from the last iterator: the first call goes to _timed_tuned (its ticks are
            # spent), which times it when it is due (`left` 1), else its wait only (start-up) and arms the countdown:
            # a loop's is made now, counting that call down too (`_startup_next`), so the epoch runs one loop
            self._period, self._starting = stats.left, stats.left > 1
            self._ticks, self._check = _SPENT, True
            if self._starting:
                self._armed = Countdown(self._period - 1)
        self._next = loader._mode.next_fn(self._armed)  # reset by iter(loader): no BaseNode.__next__ check
        tune = loader._autotune  # a LoaderAutotune still searching, told of each batch delivered
        self._tune = tune if tune is not None and not tune.done else None
        if self._tune is not None:
            self._tune.started(loader)  # the pipeline starts afresh: the trial running starts with it
        if stats is None:
            self._pull = self._next

    def __iter__(self) -> LoaderIterator:
        return self

    def __len__(self) -> int:
        """Batches left in this epoch on this rank (after a resume too)."""
        if self._done or self._stale():
            return 0
        return self._loader._mode.remaining(self._loader._position.cursor())

    def _stale(self) -> bool:
        return self._generation != self._loader._generation

    def __next__(self) -> Any:
        try:
            self._baton.pop()
        except IndexError:
            raise RuntimeError(
                "another thread is advancing this loader iterator; use one thread per iterator"
            ) from None
        except BaseException:  # a signal's exception, raised as the call returns: the baton was taken
            self._baton.append(True)
            raise
        try:
            if self._done:
                raise StopIteration
            if self._generation != self._loader._generation:
                raise RuntimeError("this iterator was superseded by a newer iter(loader) or load_state_dict()")
            if self._check and next(self._ticks, True):
                return self._startup_next() if self._starting else self._timed_tuned()
            try:
                batch, indices, last = self._pull()
            except StopIteration as stop:
                if stop.value is DUE:  # the countdown ran out (the epoch goes on): a timed call, by a new loop
                    self._next = self._loader._mode.next_fn()
                    return self._timed_tuned()
                self._finish()
                if self._ticks is not None:
                    self._undo_tick()
                    self.flush_stats(perf_counter_ns())
                raise
            except BaseException:
                self._next = self._loader._mode.next_fn()  # (a generator ends at its first exception)
                self._undo_tick()  # (statistics off: it sets _pull)
                raise
            if last and self._in_order:  # roll over now, so a checkpoint taken after this batch starts the next epoch
                self._finish()
                if self._stats is not None:  # an epoch's last batch may be short: count it exactly
                    self._stats.counted(1, count_items(indices))
                    self._exact += 1
                    self.flush_stats(perf_counter_ns())
            if self._device is not None:
                batch = move_to_device(batch, self._device)
            if self._tune is not None:
                self._tuned(batch)
            return (batch, indices) if self._with_indices else batch
        finally:
            self._baton.append(True)

    def _timed_tuned(self) -> Any:
        """``_timed_next``, told to the autotune."""
        out = self._timed_next()
        if self._tune is not None:
            self._tuned(out)
        return out

    def _tuned(self, batch: Any) -> None:
        """Tell the loader's autotune a batch was delivered (it may change the workers for the next ones)."""
        assert self._tune is not None  # (called only while an autotune searches)
        self._tune.delivered(self._loader, batch)
        if self._tune.done:
            self._tune = None

    def _timed_next(self) -> Any:
        """``__next__``'s body, timed; it stands for the ``_period`` calls since the previous timed one."""
        if self._starting:
            return self._startup_next()
        stats, weight, first = self._stats, self._period, not self._started
        assert stats is not None  # (a timed call: statistics on)
        mapper = getattr(self._loader._mode, "mapper", None)
        if mapper is not None:
            mapper.record_next = weight  # an inline fetch is timed with this call
        items, last = None, False
        t0 = perf_counter_ns()
        try:
            out, items, last = self._deliver(weight)
            return out
        finally:
            t1 = perf_counter_ns()
            untimed = weight - 1 - self._exact  # the batches before this one since the last timed call
            stats.counted(untimed, untimed * (stats.size or items or 0))
            stats.timed(t0, t1, items, weight, first)
            self._started = True
            if items is not None and not last:  # an epoch's last batch may be short: not the usual size
                stats.size = items
            self._period = stats.every
            self._arm(self._period - 1)
            self._exact = 0

    def _deliver(self, weight: int) -> tuple[Any, int, bool]:
        """One batch from the mode's next function, for the statistics' calls: what ``__next__`` returns, its
        items, and whether it is the epoch's last. ``weight`` > 0 times the device copy as that many batches."""
        try:
            batch, indices, last = self._next()
        except StopIteration:
            self._finish()
            raise
        except BaseException:
            self._next = self._loader._mode.next_fn()
            raise
        if last and self._in_order:
            self._finish()
        if self._device is not None:
            t1 = perf_counter_ns()
            batch = move_to_device(batch, self._device)
            if weight:
                assert self._stats is not None  # (a timed call: statistics on)
                self._stats.add("device", perf_counter_ns() - t1, 0, weight)
        return ((batch, indices) if self._with_indices else batch), count_items(indices), last

    def _startup_next(self) -> Any:
        """``__next__``'s body for a first call that the carried countdown does not time: its wait only (start-up),
        one clock read pair; its batch is counted exactly."""
        stats, items, last = self._stats, None, False
        assert stats is not None  # (statistics on)
        t0 = perf_counter_ns()
        try:
            out, items, last = self._deliver(0)
        finally:
            stats.started(t0, perf_counter_ns(), items)  # (its batch counted)
            self._started, self._starting = True, False
            armed, self._armed = self._armed, None
            if items is None:  # nothing delivered: not a call of the period
                self._arm(self._period - 1)
            else:
                self._exact += 1
                if armed is not None and isinstance(getattr(self._next, "__self__", None), GeneratorType):
                    self._ticks, self._check, self._pull = armed, False, self._next  # (its loop took this call's tick)
                else:
                    self._arm(self._period - 2)
                if last and self._in_order:
                    self.flush_stats(perf_counter_ns())
        if self._tune is not None:
            self._tuned(out)
        return out

    def _arm(self, untimed: int) -> None:
        """Set ``_pull`` for ``untimed`` calls before the next timed one (statistics off: ``_next`` itself)."""
        if self._stats is None:
            self._pull = self._next
            return
        self._check = not isinstance(getattr(self._next, "__self__", None), GeneratorType)
        if self._check:
            self._ticks, self._pull = repeat((), untimed), self._next
        else:  # a new loop, counting the ticks down itself
            self._ticks = Countdown(untimed)
            self._next = self._pull = self._loader._mode.next_fn(self._ticks)

    def _undo_tick(self) -> None:
        """An untimed call delivered nothing: it does not count towards the period."""
        self._arm(0 if self._ticks is None else length_hint(self._ticks) + 1)

    def flush_stats(self, end_ns: int | None = None) -> None:
        """Count the batches delivered since the last timed call (``loader.stats()`` calls it); at an epoch's end
        (``end_ns``), their time too."""
        if self._ticks is None:
            return
        stats = self._stats
        assert stats is not None  # (ticks are kept with statistics on only)
        left = self._period if self._starting else length_hint(self._ticks) + 1  # calls until the next timed one,
        calls = self._period - left  # that one included
        untimed = calls - self._exact
        if untimed > 0:
            stats.counted(untimed, untimed * stats.size)
        if end_ns is not None and calls > 0:
            stats.elapsed(end_ns, calls)
        self._period, self._exact = left, 0
        if stats.live is not None and stats.live() is self:  # (not a superseded iterator, collected later)
            stats.left, stats.waited = left, 0

    def _finish(self) -> None:
        self._done = True
        self._loader._position.finish_epoch()
        self._loader._end_epoch()

    def __del__(self) -> None:
        if self.__dict__.get("_ticks") is not None:
            self.flush_stats()
            assert self._stats is not None  # (ticks are kept with statistics on only)
            live = self._stats.live
            if live is not None and live() is self:  # (the next iterator has none to flush)
                self._stats.live = None

    def close(self) -> None:
        """End this iterator; batches in flight are discarded and the loader keeps the delivered position."""
        if not self._done and not self._stale():
            self._loader._position.stop()
        self._done = True
