"""The 0-worker loop of an ``OrderedMapper`` (``OrderedMapper.inline_batches``): ``next()``'s results as one
generator, one resume per item and no call per stage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import compress
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
    return fn.__call__ if isinstance(type(fn).__call__, FunctionType) else fn


def inline_batches(mapper: OrderedMapper[Any, R], ticks: Iterator[bool] | None = None) -> Iterator[R]:
    """``mapper.next()``'s results as a generator at 0 workers: the items its source has planned (``planned()``)
    mapped in a loop, the mapper's state after each as ``next()`` leaves it; anything else through ``next()``.

    ``ticks`` (``repeat(True, n)``, the caller's statistics countdown): the loop takes one per item and, when none
    is left, ends returning ``DUE`` (the caller's timed call is due) instead of mapping another. The source's runs
    are cut at the countdown's end, so the per-item loop is the same with or without it (``compress`` takes the
    ticks, in C)."""
    planned = getattr(mapper.source, "planned", None)
    while True:
        quick = not mapper.num_workers and mapper._held is NOTHING and not mapper.record_next and planned is not None
        run = planned(ticks) if quick else None  # it ends with its chunk, with the ticks or at a reset (workers
        if run is None:  # started mid-epoch)
            if ticks is not None and next(ticks, None) is None:
                return DUE
            try:
                yield mapper.next()
            except StopIteration:
                return
            continue
        if ticks is not None:
            run = compress(run, ticks)  # (the run has no more items than ticks: no item is taken without its tick)
        map_fn = direct(mapper.map_fn)
        mapper._flight.delivered = None  # none in flight: the source's state is the delivered one
        for item in run:
            mapper._held = item  # (a KeyboardInterrupt keeps it: next() maps the same item)
            if mapper.record_next:  # to be timed: next() maps it with its clock
                break
            try:
                out = map_fn(item)
            except Exception:
                mapper._held = NOTHING  # a failed item counts as delivered
                raise
            mapper._held = NOTHING
            yield out
