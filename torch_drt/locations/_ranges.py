"""Coalescing byte ranges into fewer requests, and reading them so (used by the remote backend only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


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


def read_coalesced(
    read: Callable[[list[str], list[int], list[int]], list[bytes]],
    files: Sequence[tuple[str, Sequence[int]]],
    starts: Sequence[int],
    ends: Sequence[int],
    gap: int,
    max_len: int,
    out: list[bytes],
) -> None:
    """Fill ``out[i]`` with bytes ``[starts[i], ends[i])`` for the rows ``i`` of each ``(file, rows)``, by one
    ``read(files, starts, ends)`` of the coalesced requests of every file."""
    rels: list[str] = []
    req_starts: list[int] = []
    req_ends: list[int] = []
    plans = []
    for rel, rows in files:
        requests, where = coalesce([starts[i] for i in rows], [ends[i] for i in rows], gap, max_len)
        plans.append((rows, len(rels), where))
        for a, b in requests:
            rels.append(rel)
            req_starts.append(a)
            req_ends.append(b)
    data = read(rels, req_starts, req_ends)
    for rows, first, where in plans:
        for i, (req, offset) in zip(rows, where):
            out[i] = data[first + req][offset : offset + ends[i] - starts[i]]
