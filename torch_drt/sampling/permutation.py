"""A keyed permutation of [0, n) in O(1) memory (small domains, or ones read in many calls: one table): any position
maps to its index directly."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from torch_drt.sampling._counter import derive_key, extend_key, mix64_into

_ROUNDS = 6
_TABLE = 1 << 12  # domains up to this size are tabulated on first use (one pass of the network over all of it)
_TABLE_ONE_CALL = 1 << 16  # larger domains up to this one when a call asks for a 16th of it or more
_TABLE_MAX = 1 << 20  # larger domains up to this one (a 4 MiB table) after domain / 2**14 calls (4 for 2**16)
_CALL_SHARE = 14  # a walk's fixed cost (some 17 rounds of the network) is that of tabulating 2**14 values
_ROUND_TABLE = 1 << 12  # half-words up to this many values: each round's function is tabulated (one lookup a round)
_ROUND_TABLE_MAX = 1 << 16  # up to this many when a call has as many positions (six tables: 3 MiB)


class KeyedPermutation:
    """A bijection of [0, n) keyed by (seed, epoch): a balanced Feistel network with cycle-walking.

    The network permutes [0, 4**k) for the smallest 4**k >= n; a value landing outside [0, n) is fed back
    through it until it lands inside (cycle-walking), which keeps the map a bijection of [0, n). It is the same
    for every batch size, world size and worker count, and position p is computed without computing the
    positions before it. Small domains are tabulated on first use (the network runs once over the whole domain
    and a call is one lookup), domains up to ``2**20`` after ``domain / 2**14`` calls (a batch per call: the walks'
    fixed costs would soon exceed the table's); larger ones store nothing per element. A round's function depends
    on one half-word only: where the half-words take at most ``2**12`` values (domains up to ``2**24``), or up to
    ``2**16`` when a call asks for at least as many positions, each round's is tabulated over them and a round is
    one lookup (the same bits as the SplitMix64 finaliser computed per position).

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
        base = derive_key(seed, epoch)
        self._keys = [np.uint64(extend_key(base, r)) for r in range(_ROUNDS)]  # derive_key(seed, epoch, r)
        self._domain = 1 << (2 * self._half_bits)
        self._table: np.ndarray | None = None
        self._calls = 0  # calls so far, while there is no table
        self._round_tables: list[np.ndarray] | None = None

    def _rounds(self) -> list[np.ndarray]:
        """Each round's function over every half-word ``v``: ``mix64(v ^ key) & mask`` (made once)."""
        if self._round_tables is None:
            halves = np.arange(1 << self._half_bits, dtype=np.uint64)
            self._round_tables = [self._round(halves, key) for key in self._keys]
        return self._round_tables

    def _round(self, right: np.ndarray, key: np.uint64) -> np.ndarray:
        """A round's function of half-words ``right`` (uint64) under its ``key``: ``mix64(right ^ key) & mask``."""
        f = np.bitwise_xor(right, key)
        with np.errstate(over="ignore"):
            mix64_into(f, np.empty_like(f))
        f &= self._mask
        return f

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        """The network over ``x`` (integers in the domain), as uint64: each round ``(left, right) <- (right, left ^
        f(right))``, ``f`` looked up in the round's table (``_rounds``) where the half-words take few values (see the
        class docstring), else computed per position."""
        shift = np.uint64(self._half_bits)
        if self._round_tables is None and (1 << self._half_bits) <= min(_ROUND_TABLE_MAX, max(_ROUND_TABLE, x.size)):
            self._rounds()
        tables = self._round_tables
        x = x.astype(np.uint64, copy=False)
        left, right = x >> shift, x & self._mask
        for r, key in enumerate(self._keys):  # a half-word is below 2**32: an index as it is
            f = self._round(right, key) if tables is None else tables[r].take(right.view(np.int64))
            f ^= left
            left, right = right, f
        left <<= shift
        left |= right
        return left

    def __call__(self, positions: np.ndarray | int) -> np.ndarray:
        """Map positions in [0, n) to indices in [0, n)."""
        x = np.asarray(positions, dtype=np.uint64)
        if x.size and int(x.max()) >= self.n:
            raise IndexError(f"position {int(x.max())} is outside [0, {self.n})")
        if self._table is None:
            self._calls += 1
            domain = self._domain
            if (
                domain <= _TABLE
                or _TABLE_ONE_CALL >= domain <= 16 * x.size
                or _TABLE_MAX >= domain <= self._calls << _CALL_SHARE
            ):
                self._table = self._tabulate()
        out = self._walk(x.ravel()) if self._table is None else self._table[x.ravel()].astype(np.int64)
        return out.reshape(x.shape)

    def _tabulate(self) -> np.ndarray:
        """The walked map of the whole domain as int32: the network runs once over it, the walks are lookups."""
        net = self._feistel(np.arange(self._domain, dtype=np.uint64)).astype(np.int64)
        return self._cycle_walk(net[: self.n].copy(), net.__getitem__).astype(np.int32)

    def _walk(self, x: np.ndarray) -> np.ndarray:
        """The network with cycle-walking over positions ``x`` (uint64, in [0, n)), as int64."""
        return self._cycle_walk(self._feistel(x), self._feistel).astype(np.int64)

    def _cycle_walk(self, out: np.ndarray, step: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Feed the values of ``out`` outside [0, n) through ``step`` until they land inside (in place)."""
        todo = np.flatnonzero(out >= self.n)
        while todo.size:
            out[todo] = step(out[todo])
            todo = todo[out[todo] >= self.n]
        return out
