"""Counter-based randomness: value k of a stream is a pure function of (key, k), vectorised over numpy.

The mixing function is SplitMix64's finaliser (Steele, Lea and Flood, 2014) applied to ``key + k * golden``;
it passes BigCrush for this use and lets any position of a stream be computed directly, which is what makes
resume O(1).
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)
_MASK = (1 << 64) - 1


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over a uint64 array or scalar (wrapping arithmetic)."""
    out = np.array(x, dtype=np.uint64)  # a copy
    mix64_into(out, np.empty_like(out))
    return out if out.ndim else out[()]


def mix64_into(x: np.ndarray, scratch: np.ndarray) -> None:
    """``mix64`` in place, with ``scratch`` (an array like ``x``) for the shifted values: no allocation."""
    np.right_shift(x, _S30, out=scratch)
    x ^= scratch
    x *= _M1
    np.right_shift(x, _S27, out=scratch)
    x ^= scratch
    x *= _M2
    np.right_shift(x, _S31, out=scratch)
    x ^= scratch


def _mix64_int(x: int) -> int:
    """``mix64`` of one value, on Python ints (the same bits; no array round trip for the keys)."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def derive_key(*parts: int) -> int:
    """Combine integers (seed, epoch, rank, ...) into one 64-bit stream key."""
    key = 0x6A09E667F3BCC909
    for part in parts:
        key = extend_key(key, part)
    return key


def extend_key(key: int, part: int) -> int:
    """``derive_key(*parts, part)`` from ``key = derive_key(*parts)`` (keys sharing a prefix: mixed once)."""
    return _mix64_int(((key ^ (int(part) & _MASK)) + 0x9E3779B97F4A7C15) & _MASK)


def uniform(key: int, start: int, count: int) -> np.ndarray:
    """Values ``start .. start+count-1`` of stream ``key`` as float64 in [0, 1)."""
    with np.errstate(over="ignore"):
        k = np.arange(start, start + count, dtype=np.uint64)
        x = mix64(np.uint64(key) + k * _GOLDEN)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
