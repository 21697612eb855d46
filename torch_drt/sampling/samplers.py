"""Position samplers: map the global positions of an epoch to dataset indices.

Each is a pure function of (epoch, position), so a loader's whole sampling state is (epoch, offset).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from torch_drt.sampling.permutation import KeyedPermutation

__all__ = ["IndexListSampler", "PositionSampler", "SequentialSampler", "ShuffledSampler"]


class PositionSampler:
    """Base class: ``n`` positions per epoch, ``indices(epoch, positions)`` gives their dataset indices."""

    n: int

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Dataset indices of ``positions`` (int64 array) in ``epoch``."""
        raise NotImplementedError

    def start_epoch(self, epoch: int) -> None:
        """Called when an epoch starts (before any ``indices`` call for it)."""


class SequentialSampler(PositionSampler):
    """Position p is index p."""

    def __init__(self, n: int) -> None:
        self.n = n

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        return positions


class ShuffledSampler(PositionSampler):
    """Position p of epoch e is ``KeyedPermutation(n, seed, e)(p)``; windows of it are computed at once.

    Args:
        n: dataset size.
        seed: the shuffle seed.
        window: positions computed per permutation call (a cache, not state).
    """

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
    """Position p is the p-th index a user sampler yields; the sampler is read whole at each epoch start.

    Raises:
        TypeError: when the sampler is not iterable.
        ValueError: when it yields something other than a non-negative int below ``dataset_len``.
    """

    def __init__(self, sampler: Iterable[int], dataset_len: int) -> None:
        if not hasattr(sampler, "__iter__"):
            raise TypeError(f"sampler must be an iterable of int indices, got {type(sampler).__name__}")
        self.sampler = sampler
        self.dataset_len = dataset_len
        self._epoch: int | None = None
        self._indices = np.empty(0, dtype=np.int64)
        self.n = len(sampler) if hasattr(sampler, "__len__") else 0

    def start_epoch(self, epoch: int) -> None:
        if self._epoch == epoch:
            return
        values = list(iter(self.sampler))
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= int(v) < self.dataset_len:
                raise ValueError(f"sampler item {i} is {v!r}: samplers must yield ints in [0, {self.dataset_len})")
        self._indices = np.asarray(values, dtype=np.int64)
        self.n = len(values)
        self._epoch = epoch

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        self.start_epoch(epoch)
        return self._indices[positions]
