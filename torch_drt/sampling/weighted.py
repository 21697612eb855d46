"""Weighted sampling with replacement as a seeded, position-addressable draw stream."""

from __future__ import annotations

import numpy as np

from torch_drt.describe import described
from torch_drt.sampling._counter import derive_key, uniform


def drawable_weights(weights: np.ndarray) -> np.ndarray:
    """Check weights and return them so that their cumulative sum cannot overflow.

    Weights whose sum stays finite are returned as float64, unchanged. Otherwise they are all scaled by one
    power of two (exact in binary floating point, so every ratio between weights is kept) to bring the
    largest below 1.0: ``[1e308, 1e308, 1e308, 1.0]`` draws the first three rows a third of the time each.

    Raises:
        ValueError: for an empty or not 1-D array, or a weight that is not finite and > 0.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 1 or weights.size == 0:
        raise ValueError(f"weights must be a non-empty 1-D array, got shape {weights.shape}")
    bad = ~np.isfinite(weights) | (weights <= 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"weights must be finite and > 0; row {row} is {float(weights[row])!r}")
    with np.errstate(over="ignore"):
        total = np.cumsum(weights)[-1]
    if np.isfinite(total):
        return weights
    _, exponent = np.frexp(weights.max())
    return np.ldexp(weights, -int(exponent))


class WeightedDraws:
    """Draw ``k`` is row ``i`` with probability ``weights[i] / sum(weights)``, a pure function of (seed, k).

    Any window of the stream is computed directly, so three windows of 2 equal one window of 6 and a resume
    at draw 10**9 costs the same as one at draw 0. Memory: one float64 per row (the cumulative weights).

    Args:
        weights: positive, finite weights, one per row (any magnitude: see ``drawable_weights``).
        seed: the stream's seed; ``stream`` separates independent streams of one seed (ranks, sources).
    """

    def __init__(self, weights: np.ndarray, seed: int, stream: int = 0) -> None:
        self._cum = np.cumsum(drawable_weights(weights))
        self._total = float(self._cum[-1])
        self._key = derive_key(seed, stream)
        self.seed = seed
        self.stream = stream

    @classmethod
    def from_cumulative(cls, cumulative: np.ndarray, seed: int, stream: int = 0) -> WeightedDraws:
        """Build from precomputed cumulative weights (e.g. a column of a memory-mapped table: no copy)."""
        self = cls.__new__(cls)
        self._cum = cumulative
        self._total = float(cumulative[-1])
        self._key = derive_key(seed, stream)
        self.seed, self.stream = seed, stream
        return self

    def __len__(self) -> int:
        return len(self._cum)

    def draws(self, start: int, count: int) -> np.ndarray:
        """Rows drawn at stream positions ``start .. start+count-1`` (int64)."""
        if start < 0 or count < 0:
            raise ValueError(f"{start=} and {count=} must be >= 0")
        u = uniform(self._key, start, count) * self._total
        rows = np.searchsorted(self._cum, u, side="right")
        return np.minimum(rows, len(self._cum) - 1).astype(np.int64)

    def __repr__(self) -> str:
        return described(self, rows=len(self._cum), seed=self.seed, stream=self.stream)
