"""A keyed permutation of [0, n) in O(1) memory: any position maps to its index directly."""

from __future__ import annotations

import numpy as np

from torch_drt.sampling._counter import derive_key, mix64

__all__ = ["KeyedPermutation"]

_ROUNDS = 6


class KeyedPermutation:
    """A bijection of [0, n) keyed by (seed, epoch): a balanced Feistel network with cycle-walking.

    The network permutes [0, 4**k) for the smallest 4**k >= n; a value landing outside [0, n) is fed back
    through it until it lands inside (cycle-walking), which keeps the map a bijection of [0, n). It stores
    nothing per element, so it is the same for every batch size, world size and worker count, and position p
    is computed without computing the positions before it.

    Args:
        n: size of the domain (>= 1).
        seed: the shuffle seed.
        epoch: the epoch; each epoch gets an independent permutation.
    """

    def __init__(self, n: int, seed: int, epoch: int = 0) -> None:
        if n < 1:
            raise ValueError(f"{n=} must be >= 1")
        self.n = n
        self.seed = seed
        self.epoch = epoch
        self._half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
        self._mask = np.uint64((1 << self._half_bits) - 1)
        self._keys = [np.uint64(derive_key(seed, epoch, r)) for r in range(_ROUNDS)]

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        shift = np.uint64(self._half_bits)
        left, right = x >> shift, x & self._mask
        with np.errstate(over="ignore"):
            for key in self._keys:
                left, right = right, left ^ (mix64(right ^ key) & self._mask)
        return (left << shift) | right

    def __call__(self, positions: np.ndarray | int) -> np.ndarray:
        """Map positions in [0, n) to indices in [0, n)."""
        x = np.asarray(positions, dtype=np.uint64)
        if x.size and int(x.max()) >= self.n:
            raise IndexError(f"position {int(x.max())} is outside [0, {self.n})")
        out = self._feistel(x.ravel())
        todo = np.nonzero(out >= self.n)[0]
        while todo.size:
            out[todo] = self._feistel(out[todo])
            todo = todo[out[todo] >= self.n]
        return out.reshape(x.shape).astype(np.int64)
