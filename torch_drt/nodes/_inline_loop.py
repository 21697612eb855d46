"""The inline loop of an ``OrderedMapper`` (``OrderedMapper.inline_batches``): ``next()``'s results as one
generator, one resume per item and no call per stage, at 0 workers and while an adaptive mapper maps inline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import length_hint
from time import perf_counter
from types import FunctionType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from torch_drt.nodes.ordered_map import OrderedMapper

T = TypeVar("T")
R = TypeVar("R")

NOTHING: Any = object()  # no item held (``OrderedMapper._held``)
DUE: Any = object()  # what the loop returns when its countdown ran out (``inline_batches``)


def direct(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn``, or its bound ``__call__`` where that is a Python function: the interpreter then runs it in the
    caller's loop (calling the object goes through C and a new interpreter frame, ~0.1 us)."""
    return fn.__call__ if isinstance(type(fn).__call__, FunctionType) else fn  # type: ignore[operator]  # mypy#5079: false positive


class Countdown:
    """The statistics' countdown of the inline loop: the untimed items left before the timed one, which the loop
    (``inline_batches``) counts down a run of items at a time, not per item.

    ``length_hint()`` tells the ticks left: ``left`` and the items left in ``run``. The loop takes a run's items'
    ticks before it maps them (``left -= length_hint(run)``, ``run`` kept), so an item taken from the run is a tick
    taken, and the loop over the run is the one without statistics; its items left at the end are given back
    (``settle()``; nothing to give back where the run was exhausted). A run drained by anyone else (a reset ends a
    loop so) must be settled before: its items left were not delivered.

    Attributes:
        left: the ticks left, less the items left in ``run``.
        run: the iterator of items (no more than the ticks, whose ``length_hint`` is its items left) being mapped.
    """

    __slots__ = ("left", "run")

    def __init__(self, left: int) -> None:
        self.left, self.run = left, None

    def __length_hint__(self) -> int:
        return self.left if self.run is None else self.left + length_hint(self.run)

    def settle(self) -> None:
        """Give back the run's items not taken, and let it go: items taken from it later are not ticks."""
        if self.run is not None:
            self.left += length_hint(self.run)
            self.run = None


def inline_batches(mapper: OrderedMapper[Any, R], ticks: Countdown | None = None) -> Iterator[R]:
    """``mapper.next()``'s results as a generator: the items its source has planned (``planned()``) mapped in a loop
    while the mapper maps in the calling thread (0 workers, or ``adaptive`` and inline with nothing in flight), the
    mapper's state after each as ``next()`` leaves it; anything else (the workers' items) through ``next()``.

    An adaptive mapper's loop times each item as ``next()`` does and leaves the run when its mean sends the items
    back to the workers (``OrderedMapper._observe``).

    ``ticks`` (the caller's statistics countdown): the loop takes one per item and, when none is left, ends
    returning ``DUE`` (the caller's timed call is due) instead of mapping another. The source's runs are cut at the
    countdown's end and their ticks taken at once (``Countdown``), so the per-item loop is the same with or
    without it. The mapper settles the countdown at a reset (``OrderedMapper.reset``)."""
    planned = getattr(mapper.source, "planned", None)
    mapper._countdown = ticks
    while True:
        if ticks is not None and ticks.run is not None:
            ticks.settle()  # (a run left at a break)
        adaptive = mapper.adaptive  # (a resize changes it: read per run)
        quick = (
            (mapper._inline and not mapper._flight if adaptive else not mapper.num_workers)
            and mapper._held is NOTHING and not mapper.record_next and planned is not None
        )
        # the run ends with its chunk, with the ticks or at a reset (workers started mid-epoch)
        run = (planned() if ticks is None else planned(ticks.left)) if quick and planned is not None else None
        if run is None:
            if ticks is not None:
                if ticks.left <= 0:
                    return DUE
                ticks.left -= 1
            try:
                yield mapper.next()
            except StopIteration:
                return
            continue
        if ticks is not None:  # (the run has no more items than ticks: no item is taken without its tick)
            ticks.left -= length_hint(run)
            ticks.run = run
        map_fn = direct(mapper.map_fn)
        mapper._flight.delivered = None  # none in flight: the source's state is the delivered one
        if adaptive:  # the loop below, timed as OrderedMapper._next_inline times: a change to one is one to all
            # three (kept apart so that the 0-worker loop runs no check and no clock per item)
            observe = mapper._observe
            for item in run:
                mapper._held = item  # (a KeyboardInterrupt keeps it: next() maps the same item)
                if mapper.record_next:  # to be timed: next() maps it with its clock
                    break
                try:
                    t0 = perf_counter()
                    out = map_fn(item)
                    observe(perf_counter() - t0, True)
                except StopIteration:  # ends the epoch, as next() lets it (and torch's loader); in a generator
                    mapper._held = NOTHING  # it would become a RuntimeError
                    return
                except Exception:
                    mapper._held = NOTHING  # a failed item counts as delivered
                    raise
                mapper._held = NOTHING
                yield out
                if not mapper._inline:  # slower items: the next ones go to the workers
                    break
            else:
                if ticks is not None:
                    ticks.run = None  # (exhausted: nothing to give back)
            continue
        for item in run:
            mapper._held = item  # (a KeyboardInterrupt keeps it: next() maps the same item)
            if mapper.record_next:  # to be timed: next() maps it with its clock
                break
            try:
                out = map_fn(item)
            except StopIteration:  # (as above)
                mapper._held = NOTHING
                return
            except Exception:
                mapper._held = NOTHING  # a failed item counts as delivered
                raise
            mapper._held = NOTHING
            yield out
        else:
            if ticks is not None:
                ticks.run = None  # (exhausted: nothing to give back)
