"""Brace patterns of shard lists, as webdataset writes them: ``shard-{000000..000099}.tar``, ``{train,val}.tar``."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_MAX_NAMES = 10_000_000


def _first_group(text: str) -> tuple[int, int, list[str]] | None:
    """The span of the first top-level ``{...}`` and its top-level comma-separated parts, or None."""
    start = text.find("{")
    if start < 0:
        return None
    depth, last, parts = 0, start + 1, []
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                parts.append(text[last:i])
                return start, i, parts
        elif c == "," and depth == 1:
            parts.append(text[last:i])
            last = i + 1
    return None


def _expand(text: str, budget: list[int]) -> list[str]:
    group = _first_group(text)
    if group is None:
        if "{" in text or "}" in text:
            raise ValueError(f"{text!r} has an unbalanced brace")
        return [text]
    a, b, parts = group
    m = _RANGE.match(parts[0]) if len(parts) == 1 else None
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if abs(hi - lo) + 1 > budget[0]:
            raise ValueError(f"a brace pattern stands for more than {_MAX_NAMES} names")
        width = len(m.group(1)) if m.group(1).startswith("0") else 0
        step = 1 if hi >= lo else -1
        parts = [str(v).zfill(width) for v in range(lo, hi + step, step)]
    literal = len(parts) == 1 and m is None  # "{a}" stands for itself, as in bash
    tails = _expand(text[b + 1 :], budget)
    out: list[str] = []
    for part in parts:
        for head in ["{" + part + "}"] if literal else _expand(part, budget):
            budget[0] -= len(tails)
            if budget[0] < 0:
                raise ValueError(f"a brace pattern stands for more than {_MAX_NAMES} names")
            out.extend(text[:a] + head + tail for tail in tails)
    return out


def expand_braces(pattern: str) -> list[str]:
    """Every name a brace pattern stands for, in order (a name without braces stands for itself).

    ``{a..b}`` counts from ``a`` to ``b`` (zero-padded to the width of ``a`` when it starts with ``0``), ``{x,y}``
    lists alternatives; braces nest.

    Raises:
        ValueError: for an unbalanced brace, or a pattern of more than ten million names.
    """
    return _expand(pattern, [_MAX_NAMES])
