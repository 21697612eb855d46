"""Checks for loader checkpoints: a state that does not describe the loader is refused with a ValueError."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_EPOCH", "require_mapping", "state_int", "state_seed"]

MAX_EPOCH = (1 << 63) - 1


def require_mapping(state: Any, what: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """``state`` if it is a mapping holding ``keys``.

    Raises:
        ValueError: naming the missing keys.
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"not a {what} state: expected a dict with {keys}, got {type(state).__name__}")
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(f"not a {what} state: it lacks {missing} (got keys {sorted(map(str, state))})")
    return state


def state_int(state: Mapping[str, Any], key: str, *, low: int = 0, high: int = MAX_EPOCH, what: str = "loader") -> int:
    """``state[key]`` if it is an int (not a bool, not a float) in ``[low, high]``.

    Raises:
        ValueError: naming the key, its value and the allowed range.
    """
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"invalid {what} state: {key}={value!r} must be an int in [{low}, {high}]")
    return value


def state_seed(state: Mapping[str, Any], key: str, *, what: str = "loader") -> int | None:
    """``state[key]`` if it is None or a seed (an int in ``[0, 2**64)``)."""
    value = state.get(key)
    if value is None:
        return None
    return state_int(state, key, high=(1 << 64) - 1, what=what)
