"""Coalescing byte ranges into fewer requests (used by the remote backend only)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["coalesce"]


def coalesce(
    starts: Sequence[int], ends: Sequence[int], gap: int, max_len: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Merge ranges that lie within ``gap`` bytes of each other into requests of at most ``max_len`` bytes
    (a single range longer than that stays one request).

    Returns:
        The requests as (start, end) pairs, and for each input range the (request number, offset in it).
    """
    order = sorted(range(len(starts)), key=lambda i: starts[i])
    requests: list[tuple[int, int]] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(starts)
    for i in order:
        a, b = starts[i], ends[i]
        if requests:
            s, e = requests[-1]
            if a <= e + gap and max(e, b) - s <= max_len:
                requests[-1] = (s, max(e, b))
                where[i] = (len(requests) - 1, a - s)
                continue
        requests.append((a, b))
        where[i] = (len(requests) - 1, 0)
    return requests, where
