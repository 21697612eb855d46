"""The build benchmark's rounds: every side once a round, the order rotated from round to round, and the medians.

A side that always ran first (or right after the heaviest one) would meet the machine in the same state each
round; rotating the order spreads that over the sides. Ratios between sides are taken within each round (the
two ran minutes apart at most, under the same load) and their median reported.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

Result = tuple["float | str", "float | None"]  # seconds (or why it did not run), CPU seconds (None: not measured)


def run_rounds(sides: dict[str, Callable[[int], Result]], repeats: int) -> tuple[dict[str, list], dict[str, list]]:
    """Run each side ``repeats`` times, round ``r`` in the order rotated by ``r``; each side's seconds and CPU
    seconds, in round order."""
    names = list(sides)
    times: dict[str, list] = {name: [None] * repeats for name in names}
    cpu: dict[str, list] = {name: [None] * repeats for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name][r], cpu[name][r] = sides[name](r)
    return times, cpu


def summarize(times: dict[str, list], cpu: dict[str, list], n: int, skipped: str) -> dict:
    """Each side's medians: seconds, samples/s and CPU seconds where measured; or why it did not run."""
    out = {}
    for name, runs in times.items():
        errors = [x for x in runs if isinstance(x, str)]
        if errors or not runs:
            out[name] = {"error": errors[0] if errors else skipped}
            continue
        seconds = statistics.median(runs)
        out[name] = {"seconds": seconds, "rate": n / seconds, "runs": runs}
        if all(c is not None for c in cpu.get(name, [None])):
            out[name]["cpu"] = statistics.median(cpu[name])
    return out


def round_ratios(times: dict[str, list], pairs: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """For each ``label: (a, b)``, side ``a``'s rate over side ``b``'s within each round: the median and range."""
    out = {}
    for label, (a, b) in pairs.items():
        if any(isinstance(x, str) for x in times.get(a, ["-"]) + times.get(b, ["-"])):
            continue
        ratios = [tb / ta for ta, tb in zip(times[a], times[b])]
        out[label] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return out
