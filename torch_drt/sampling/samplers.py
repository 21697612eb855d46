"""Position samplers: map the global positions of an epoch to dataset indices.

Sequential and shuffled samplers are pure functions of (epoch, position), so a loader's whole sampling state is
(epoch, offset). A user sampler is read lazily, a window at a time, from a fresh iterator at each epoch start.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import cast

import numpy as np

from torch_drt.sampling.permutation import KeyedPermutation


class PositionSampler:
    """Base class: positions ``0 .. n-1`` per epoch; ``indices(epoch, positions)`` gives their dataset indices.

    Attributes:
        n: positions per epoch; None while an unsized user sampler has not ended.
    """

    n: int | None

    def start_epoch(self, epoch: int, offset: int = 0) -> None:
        """Called when an epoch starts (or resumes at ``offset``), before any ``indices`` call for it."""

    def available(self, end: int) -> int:
        """How many of the positions ``[0, end)`` the epoch has (``end`` unless it ends before)."""
        assert self.n is not None
        return min(end, self.n)

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Dataset indices of ``positions`` (an int64 array of available positions) in ``epoch``."""
        raise NotImplementedError

    def index_lists(self, epoch: int, rows: list[range]) -> list[list[int]] | None:
        """The dataset indices of each row of available positions, as lists, where the sampler makes them faster
        than ``indices`` and a ``tolist``; None (the default): use ``indices``."""
        return None


_KEPT_INTS = 1 << 18  # a sequential epoch of up to this many positions keeps its index ints (9 MiB at most)


class SequentialSampler(PositionSampler):
    """Position p is index p."""

    n: int

    def __init__(self, n: int) -> None:
        self.n = n
        self._ints: list[int] | None = None  # 0 .. n-1, made once: every epoch's index lists are slices of it

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_ints": None}

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return positions

    def index_lists(self, epoch: int, rows: list[range]) -> list[list[int]]:
        ints = self._ints
        if ints is None:
            if self.n > _KEPT_INTS:
                return [list(row) for row in rows]
            ints = self._ints = list(range(self.n))
        return [ints[row.start : row.stop : row.step] for row in rows]


class ShuffledSampler(PositionSampler):
    """Position p of epoch e is ``KeyedPermutation(n, seed, e)(p)``; windows of it are computed at once.

    Args:
        n: dataset size.
        seed: the shuffle seed.
        window: positions computed per permutation call (a cache, not state).
    """

    n: int

    def __init__(self, n: int, seed: int, window: int = 1 << 16) -> None:
        self.n = n
        self.seed = seed
        self.window = window
        self._perm: KeyedPermutation | None = None
        self._base = 0
        self._values = np.empty(0, dtype=np.int64)

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        if positions.size == 0:
            return positions
        if self._perm is None or self._perm.epoch != epoch:
            self._perm = KeyedPermutation(self.n, self.seed, epoch)
            self._values = np.empty(0, dtype=np.int64)
        lo, hi = int(positions.min()), int(positions.max())
        if lo < self._base or hi >= self._base + len(self._values):
            self._base = lo
            end = min(self.n, lo + max(self.window, hi - lo + 1))
            self._values = self._perm(np.arange(lo, end, dtype=np.int64))
        return self._values[positions - self._base]


class IndexListSampler(PositionSampler):
    """Position p is the p-th index a user sampler yields, read lazily from a new iterator each epoch.

    Only a window of indices is held at a time, so an endless sampler (``itertools.repeat(0)``) works and
    Ctrl-C interrupts it. A resume at ``offset`` skips that many indices of the new iterator. ``n`` is
    ``len(sampler)`` (an iterator that ends earlier shortens the epoch; as in torch, one that yields more is read
    to its end), or unknown until an unsized sampler ends.

    Raises:
        TypeError: when the sampler is not iterable.
        ValueError: when it yields something other than an int in ``[0, dataset_len)``.
    """

    def __init__(self, sampler: Iterable[int], dataset_len: int) -> None:
        if not hasattr(sampler, "__iter__"):
            raise TypeError(f"sampler must be an iterable of int indices, got {type(sampler).__name__}")
        self.sampler = sampler
        self.dataset_len = dataset_len
        self.sized = hasattr(sampler, "__len__")
        self.n = len(cast(Sized, sampler)) if self.sized else None  # (sized: it has __len__)
        self._iterator: Iterator[int] | None = None
        self._base = 0
        self._window = np.empty(0, dtype=np.int64)

    def start_epoch(self, epoch: int, offset: int = 0) -> None:
        self.n = len(cast(Sized, self.sampler)) if self.sized else None
        self._iterator = iter(self.sampler)
        for _ in itertools.islice(self._iterator, offset):
            pass
        self._base, self._window = offset, np.empty(0, dtype=np.int64)

    def _read(self, count: int) -> list[int]:
        assert self._iterator is not None
        values = list(itertools.islice(self._iterator, count))
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= int(v) < self.dataset_len:
                position = self._base + len(self._window) + i
                raise ValueError(
                    f"sampler item {position} is {v!r}: samplers must yield ints in [0, {self.dataset_len})"
                )
        return values

    def available(self, end: int) -> int:
        have = self._base + len(self._window)
        limit = end if self.n is None else min(end, self.n)
        if have < limit:
            values = self._read(limit - have)
            if self.n is not None and len(values) == self.n - have:
                values += self._read_past_length(end - have - len(values))
            if have + len(values) < (end if self.n is None else limit):
                self.n = have + len(values)  # the iterator ended: the epoch is this long
            self._window = np.concatenate([self._window, np.asarray(values, dtype=np.int64)])
        return min(end, self._base + len(self._window))

    def _read_past_length(self, wanted: int) -> list[int]:
        """At ``len(sampler)``, read on as torch does (its batching reads a sampler until it ends): an iterator
        that ends there may still draw (``RandomSampler`` takes one more ``randperm`` from its generator, which the
        next epoch's order depends on); one that yields more indices than its length is read on as an unsized
        sampler (up to ``wanted`` indices now), to its end."""
        more = self._read(1)
        if more:
            self.n = None
            more += self._read(max(0, wanted - 1))
        return more

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        if positions.size == 0:
            return positions.astype(np.int64)
        lo = int(positions.min())
        if lo > self._base:  # positions only move forward within an epoch: drop what was planned
            self._window, self._base = self._window[lo - self._base :], lo
        return self._window[positions - self._base]
