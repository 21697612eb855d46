"""Packing algorithms: place document pieces into bins of ``L`` tokens, working on lengths only.

A packer sees pieces ``(doc, start, n)`` (tokens ``[start, start+n)`` of document ``doc``) and emits *plans*:
flat lists ``[doc, start, n, doc, start, n, ...]`` naming the pieces of one sequence, in order. It never touches
tokens, so every rank can plan the global stream cheaply and read only the sequences it delivers.

- ``concat``: concatenate pieces and cut every ``L`` tokens (a piece may be cut across two sequences).
- ``first_fit``: up to ``buffer_size`` open bins; a piece goes into the oldest open bin with room.
- ``best_fit``: up to ``buffer_size`` open bins; a piece goes into the bin it fills most tightly.

In both fit methods a bin filled exactly is emitted at once; when no open bin has room for a piece and all
``buffer_size`` bins are open, the fullest bin is emitted (only that one) and the piece opens a new bin. A piece
of exactly ``L`` tokens is emitted as its own sequence. ``flush()`` emits the open bins oldest first. Ties are
broken by age (first fit) or bin number (best fit), so the plans are a pure function of the pieces fed in.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import Any

from torch_drt._state_fields import MAX_COUNT, StateFields

CONCAT = "concat"
FIRST_FIT = "first_fit"
BEST_FIT = "best_fit"
METHODS = (CONCAT, FIRST_FIT, BEST_FIT)


class Packer:
    """Common part of the packers: the queue of emitted plans, open bins by number, and their state.

    Args:
        length: tokens per sequence (``L``).
        buffer_size: open bins at most.
    """

    BINS_KEY = "bins"
    READY_KEY = "ready"

    def __init__(self, length: int, buffer_size: int) -> None:
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"{length=} must be an int > 0")
        if not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"{buffer_size=} must be an int > 0")
        self.length = length
        self.buffer_size = buffer_size
        self.ready: deque[list[int]] = deque()
        self._bins: list[list[int] | None] = [None] * buffer_size
        self._free = list(range(buffer_size))  # a min-heap of unused bin numbers
        self._age: list[int] = []  # open bin numbers, oldest first

    def add(self, doc: int, start: int, n: int) -> None:
        """Place tokens ``[start, start+n)`` of ``doc`` (``0 < n <= L``, except ``concat``: any ``n > 0``)."""
        raise NotImplementedError

    def _open(self, *segment: int) -> int:
        """Open a bin under the lowest unused number, holding ``segment`` (or nothing)."""
        slot = heapq.heappop(self._free)
        self._bins[slot] = list(segment)
        self._age.append(slot)
        return slot

    def _emit(self, slot: int) -> None:
        self.ready.append(self._bins[slot])  # type: ignore[arg-type]
        self._bins[slot] = None
        self._age.remove(slot)
        heapq.heappush(self._free, slot)

    def _remaining(self, slot: int) -> int:
        return self.length - sum(self._bins[slot][2::3])  # type: ignore[index]

    def flush(self) -> None:
        """Emit every open bin, oldest first."""
        for slot in list(self._age):
            self._emit(slot)
        self._rebuild()

    def _rebuild(self) -> None:
        """Recompute the method's index of open bins from ``self._bins``."""

    def state(self) -> dict[str, Any]:
        """Open bins (oldest first) and emitted-but-untaken plans: bounded by ``buffer_size`` (JSON-serialisable)."""
        bins = [[slot, *self._bins[slot]] for slot in self._age]  # type: ignore[misc]
        return {self.BINS_KEY: bins, self.READY_KEY: [list(p) for p in self.ready]}

    def check_state(self, fields: StateFields) -> None:
        """Refuse a ``state()`` that does not fit this packer: bins of ``[bin, doc, start, n, ...]`` under distinct
        bin numbers below ``buffer_size``, at most ``L`` tokens each, and plans of ``[doc, start, n, ...]``.

        Raises:
            ValueError: naming the field.
        """
        seen: set[int] = set()
        for key in (self.BINS_KEY, self.READY_KEY):
            plans = fields.get(key)
            bins = key == self.BINS_KEY
            if not isinstance(plans, list) or not all(isinstance(p, list) for p in plans):
                raise fields.error(key, "must be a list of lists of ints")
            for plan in plans:
                pieces = plan[1:] if bins else plan
                if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_COUNT for x in plan) or (
                    len(pieces) % 3 or (not bins and not pieces)
                ):
                    raise fields.error(key, f"holds {plan!r}: not [{'bin, ' if bins else ''}doc, start, n, ...]")
                if bins and (not plan or not 0 <= plan[0] < self.buffer_size or plan[0] in seen):
                    slot = plan[0] if plan else None
                    raise fields.error(key, f"holds an invalid bin {slot} for buffer_size={self.buffer_size}")
                if sum(pieces[2::3]) > self.length:
                    raise fields.error(key, f"holds a sequence over length={self.length}: {plan!r}")
                if bins:
                    seen.add(plan[0])

    def restore(self, state: dict[str, Any]) -> None:
        """Return to ``state`` (from ``state()`` of a packer with the same settings).

        Raises:
            ValueError: for a state that does not fit this packer (``check_state``).
        """
        self.check_state(StateFields(state, "packer", keys=(self.BINS_KEY, self.READY_KEY)))
        self._bins = [None] * self.buffer_size
        self._age = []
        for slot, *segments in state[self.BINS_KEY]:
            self._bins[slot] = list(segments)
            self._age.append(slot)
        self._free = [s for s in range(self.buffer_size) if self._bins[s] is None]
        self.ready = deque(list(p) for p in state[self.READY_KEY])
        self._rebuild()


class ConcatPacker(Packer):
    """Concatenate and chunk: one open bin, pieces cut at every ``L`` tokens."""

    def __init__(self, length: int, buffer_size: int = 1) -> None:
        super().__init__(length, 1)
        self._fill = 0

    def add(self, doc: int, start: int, n: int) -> None:
        length = self.length
        if n == length and not self._fill:  # a whole sequence: no bin to open
            self.ready.append([doc, start, n])
            return
        while n:
            if self._bins[0] is None:
                self._open()
            take = min(n, length - self._fill)
            self._bins[0].extend((doc, start, take))  # type: ignore[union-attr]
            self._fill += take
            start, n = start + take, n - take
            if self._fill == length:
                self._emit(0)
                self._fill = 0

    def _rebuild(self) -> None:
        self._fill = 0 if self._bins[0] is None else self.length - self._remaining(0)


class FirstFitPacker(Packer):
    """First fit over ``buffer_size`` open bins: the oldest open bin with room takes the piece."""

    def __init__(self, length: int, buffer_size: int) -> None:
        super().__init__(length, buffer_size)
        self._room: list[int] = [0] * buffer_size

    def add(self, doc: int, start: int, n: int) -> None:
        if n == self.length:
            self.ready.append([doc, start, n])
            return
        room = self._room
        for slot in self._age:
            r = room[slot]
            if r >= n:
                self._bins[slot].extend((doc, start, n))  # type: ignore[union-attr]
                room[slot] = r - n
                if r == n:
                    self._emit(slot)
                return
        if not self._free:
            self._emit(min(self._age, key=room.__getitem__))  # the fullest; min() keeps the oldest of ties
        room[self._open(doc, start, n)] = self.length - n

    def _rebuild(self) -> None:
        self._room = [0 if b is None else self._remaining(s) for s, b in enumerate(self._bins)]


class BestFitPacker(Packer):
    """Best fit over ``buffer_size`` open bins: the bin with the least room that still fits takes the piece.

    Open bins are kept sorted by (room, number) in one list of integers, so a piece costs a bisection.
    """

    def __init__(self, length: int, buffer_size: int) -> None:
        super().__init__(length, buffer_size)
        self._keys: list[int] = []  # room * buffer_size + bin number, sorted

    def add(self, doc: int, start: int, n: int) -> None:
        if n == self.length:
            self.ready.append([doc, start, n])
            return
        keys, size = self._keys, self.buffer_size
        i = bisect.bisect_left(keys, n * size)
        if i < len(keys):
            room, slot = divmod(keys.pop(i), size)
            self._bins[slot].extend((doc, start, n))  # type: ignore[union-attr]
            if room == n:
                self._emit(slot)
            else:
                bisect.insort(keys, (room - n) * size + slot)
            return
        if not self._free:
            self._emit(keys.pop(0) % size)  # the fullest bin
        slot = self._open(doc, start, n)
        bisect.insort(keys, (self.length - n) * size + slot)

    def _rebuild(self) -> None:
        size = self.buffer_size
        self._keys = sorted(self._remaining(s) * size + s for s, b in enumerate(self._bins) if b is not None)


def make_packer(method: str, length: int, buffer_size: int) -> Packer:
    """A packer for ``method`` (one of ``METHODS``).

    Raises:
        ValueError: for an unknown method or a bad length or buffer size.
    """
    classes = {CONCAT: ConcatPacker, FIRST_FIT: FirstFitPacker, BEST_FIT: BestFitPacker}
    if method not in classes:
        raise ValueError(f"{method=} must be one of {METHODS}")
    return classes[method](length, buffer_size)
