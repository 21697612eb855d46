"""Single-field mutations of a checkpoint and the rule every state parser must keep (issue 22).

A mutated state is either refused by ``load_state_dict`` with one ``ValueError`` that names the field, or it
resumes the identical stream. Never a KeyError/TypeError/IndexError/OverflowError, never a failure that waits
for the first ``next()``, never another stream.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

Path = tuple[Any, ...]
DELETE = "delete"
UNKNOWN = "unknown_key"

# what a field is replaced with: wrong types, out-of-range numbers and None
VALUES: dict[str, Any] = {
    "None": None,
    "'false'": "false",
    "1.5": 1.5,
    "True": True,
    "[]": [],
    "{}": {},
    "-1": -1,
    "2**63": 2**63,
    "2**64": 2**64,
}
# the default suite gives each field 3 of the values above, rotating so that every 3 fields see all 9 (and every
# field is deleted); `make test-all` (TORCH_DRT_ALL_MUTATIONS=1) gives every field every value
ALL_VALUES = os.environ.get("TORCH_DRT_ALL_MUTATIONS") == "1"
PER_FIELD = 3


def _fields(state: Any, path: Path = ()) -> Iterator[Path]:
    """Every key of every mapping, and the first and last element of every list, depth first."""
    if isinstance(state, dict):
        for key, value in state.items():
            yield (*path, key)
            yield from _fields(value, (*path, key))
    elif isinstance(state, list) and state:
        for index in sorted({0, len(state) - 1}):
            yield (*path, index)
            yield from _fields(state[index], (*path, index))


def _parent(state: Any, path: Path) -> Any:
    for key in path[:-1]:
        state = state[key]
    return state


def mutations(state: dict[str, Any]) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """``(path, what, mutated state)`` for every single-field mutation of ``state``."""
    values = list(VALUES.items())
    for number, path in enumerate(_fields(state)):
        original = _parent(state, path)[path[-1]]
        chosen = values if ALL_VALUES else [values[(number * PER_FIELD + k) % len(values)] for k in range(PER_FIELD)]
        changes = dict(chosen)
        if path[-1] == "version" and isinstance(original, int):
            changes["version + 1"] = original + 1
        for what, value in [(DELETE, None), *changes.items()]:
            if what != DELETE and type(value) is type(original) and value == original:
                continue
            mutated = copy.deepcopy(state)
            parent = _parent(mutated, path)
            if what == DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(value)
            yield path, what, mutated
    for path in [(), *(p for p in _fields(state) if isinstance(_parent(state, p)[p[-1]], dict))]:
        mutated = copy.deepcopy(state)
        (_parent(mutated, (*path, None)) if path else mutated)[UNKNOWN] = 1
        yield (*path, UNKNOWN), "added", mutated


def field_name(path: Path) -> str:
    """The innermost mapping key of ``path`` (a list element is named by its list's key)."""
    names = [key for key in path if isinstance(key, str)]
    return names[-1] if names else "state"


def check_mutations(
    fresh: Callable[[], Any],
    state: dict[str, Any],
    stream: Callable[[Any], list[Any]],
    *,
    other_valid: Callable[[Path, str], str | None] = lambda path, what: None,
    skip: Callable[[Path], bool] = lambda path: False,
) -> int:
    """Load every mutation of ``state`` into ``fresh()`` and apply the rule; returns the number of mutations.

    Args:
        fresh: a new object of the kind that took ``state``.
        state: a real checkpoint of that object (JSON-like).
        stream: what the loaded object delivers (a short, finite part of it).
        other_valid: ``(path, what) -> why``: mutations that are another valid state on purpose (a documented
            value such as None for "a whole epoch comes next"); they must load and stream without error.
    """
    expected = _loaded_stream(fresh, copy.deepcopy(state), stream)
    failures, count = [], 0
    for path, what, mutated in mutations(state):
        if skip(path):
            continue
        count += 1
        where = f"state{''.join(f'[{k!r}]' for k in path)} {what}"
        target = fresh()
        try:
            with warnings.catch_warnings():  # "checkpoint settings differ; applied this loader's": the same stream
                warnings.simplefilter("ignore")
                target.load_state_dict(mutated)
        except ValueError as e:
            if field_name(path) not in str(e) and path[-1] != UNKNOWN:
                failures.append(f"{where}: the ValueError does not name {field_name(path)!r}: {e}")
            continue
        except Exception as e:
            failures.append(f"{where}: load_state_dict raised {type(e).__name__}: {e}")
            continue
        if path[-1] == "version" and what != DELETE:  # a state without a version is an older one; others: refused
            failures.append(f"{where}: an unknown version was accepted")
            continue
        try:
            got = stream(target)
        except Exception as e:
            failures.append(f"{where}: accepted, then the stream raised {type(e).__name__}: {e}")
            continue
        if got != expected and not other_valid(path, what):
            failures.append(f"{where}: accepted, and another stream comes")
    assert not failures, f"{len(failures)} of {count} mutations break the rule:\n" + "\n".join(failures[:60])
    return count


def _loaded_stream(fresh: Callable[[], Any], state: dict[str, Any], stream: Callable[[Any], list[Any]]) -> list:
    target = fresh()
    target.load_state_dict(state)
    return stream(target)
