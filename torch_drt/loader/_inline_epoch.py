"""The 0-worker path of a map-style loader as one generator: plan, fetch and collate with no call per stage.

``OrderedMapper.next`` over a ``BatchPlanner`` and a ``BatchFetcher`` costs three Python calls, a ``Fetched``
and a dozen attribute reads per batch; at 0 workers with a plain dataset (``__getitem__``, no transform, no
``__getitems__``, no pinning) this generator does the same work unrolled, one resume per batch, and leaves the
same state behind after each batch (the planner's offset, the mapper's held item). Every other case (a chunk to
plan, the epoch's end, a batch timed for statistics, a held or first batch, a user's ``batch_scope``, workers
started by autotune) goes through the owners' own ``mapper.next()`` / ``fetcher(plan)``, so the order, the
state, the item scopes and the errors are theirs.

A generator ends at its first exception: the iterator asks ``next_fn()`` for a new one after an error.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_drt.loader._fetch import BatchFetcher
from torch_drt.loader.iterator import Fetched
from torch_drt.nodes.batch_plan import BatchPlanner
from torch_drt.nodes.ordered_map import _NOTHING, OrderedMapper
from torch_drt.random import BatchSlot, current_slot

_fetched = tuple.__new__  # (a NamedTuple's own __new__ costs a Python call)


def runs_inline(mapper: OrderedMapper, planner: BatchPlanner, fetcher: BatchFetcher) -> bool:
    """Whether ``inline_batches`` applies: 0 workers, a plain synchronous dataset, nothing planned per batch."""
    return (
        mapper.num_workers == 0
        and planner.plan_reads is None
        and fetcher._plain  # sync, __getitem__ only, one item at a time, no transform
        and not fetcher.pin
    )


def inline_batches(mapper: OrderedMapper, planner: BatchPlanner, fetcher: BatchFetcher) -> Iterator[Fetched]:
    """The epoch's ``Fetched`` batches, as ``mapper.next()`` delivers them (``runs_inline`` must hold).

    The conditions that hold for a whole chunk (its settings change only with a reset, which plans a new chunk)
    are checked once per chunk; per batch, only whether the batch is to be timed (``mapper.next()`` then loads it,
    and the chunk's position is read anew) and whether the planner was reset (autotune starting workers).
    """
    slow = mapper.next
    size = planner.partition.global_batch_size  # (a user sampler's length may change; the batch geometry not)
    while True:
        chunk, pos = planner._chunk, planner._chunk_pos
        if (
            pos >= len(chunk)
            or mapper.record_next
            or mapper.num_workers
            or mapper._held is not _NOTHING
            or planner._skip
            or not fetcher._checked
        ):
            try:
                out = slow()
            except StopIteration:
                return
            yield out
            continue
        collate, getitem, seed = fetcher.collate_fn, fetcher._getitem, fetcher.seed
        for plan in chunk[pos:]:  # the rest of the planned chunk; settings change only with a reset (a new chunk)
            if mapper.record_next or planner._chunk is not chunk:
                break
            pos += 1
            planner._chunk_pos = pos  # BatchPlanner.next, from a planned chunk
            planner.offset += size
            mapper._held = plan  # (a KeyboardInterrupt keeps it: OrderedMapper.next maps the same plan next)
            slot = current_slot()
            if type(slot) is not BatchSlot:  # first use in this thread, or inside a user's batch_scope
                try:
                    out = fetcher(plan)
                except Exception:
                    mapper._held = _NOTHING  # a failed batch counts as delivered
                    raise
                mapper._held = _NOTHING
                yield out
                continue
            indices = plan[2]
            slot.batch = [seed, plan[0], indices, plan[3]]  # BatchFetcher.__call__'s plain path
            try:
                batch = collate(list(map(getitem, indices)))
            except Exception:
                mapper._held = _NOTHING
                raise
            finally:
                slot.batch = None
            mapper._held = _NOTHING
            yield _fetched(Fetched, (batch, indices, plan[4]))
