"""StateFields: a checkpoint read field by field, for every state parser of torch_drt (loaders, nodes, datasets).

A checkpoint is user input. Each parser reads its state through ``StateFields`` when the state is loaded
(``load_state_dict``, a node's ``check_state``), so a state that does not describe the object is refused at once
with one ``ValueError`` naming the field's path, e.g. ``state['node_state']['ended']='false' must be a bool``,
never later, at the first ``next()``, and never as a KeyError, TypeError or OverflowError.
"""

from __future__ import annotations

import builtins  # StateFields.int and .bool shadow the builtins in the annotations that follow them
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

MAX_EPOCH = (1 << 63) - 1
MAX_COUNT = 1 << 62  # positions, offsets and counts: far past any stream, and safe in int64 arithmetic
MAX_SEED = (1 << 64) - 1

_REQUIRED: Any = object()
_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxdict = 60, 60, 6, 6


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class StateFields:
    """The fields of one state mapping, checked as they are read.

    Args:
        state: the state (anything: it is refused unless it is a mapping).
        what: what the state belongs to, for messages (``"loader"``, ``"CacheSampler"``).
        path: where the state sits in the checkpoint (``"state"``, ``"state['node_state']"``).
        keys: keys it must hold.

    Raises:
        ValueError: when ``state`` is not a mapping or lacks one of ``keys``.
    """

    def __init__(self, state: Any, what: str, path: str = "state", keys: tuple[str, ...] = ()) -> None:
        self.what, self.path = what, path
        if not isinstance(state, Mapping):
            raise ValueError(
                f"not a {what} state: {path}={_short.repr(state)} must be a dict with the keys {list(keys)}"
            )
        missing = [key for key in keys if key not in state]
        if missing:
            raise ValueError(
                f"not a {what} state: {path} lacks {', '.join(map(repr, missing))} (it has {sorted(map(str, state))})"
            )
        self.state = state

    @classmethod
    def envelope(
        cls, state: Any, what: str, keys: tuple[str, ...], version: tuple[str, int], written: tuple[str, ...] = ()
    ) -> tuple[StateFields, int]:
        """A loader checkpoint's envelope, read the same way for every loader mode: a mapping holding ``keys`` (the
        first is the epoch's key); when it carries its version (``version``: the key and the version this torch_drt
        writes), every key that version writes (``written``) too; its epoch, an int in ``[0, MAX_EPOCH]``. The mode
        reads its own state and settings from the returned fields (they sit beside the epoch: the envelope is flat,
        as saved since the first release). States from before versions hold ``keys`` only.

        Returns:
            ``(fields, epoch)``.

        Raises:
            ValueError: naming the field at fault.
        """
        fields = cls(state, what, keys=keys)
        if fields.version(*version):  # a versioned state holds every key it writes
            fields.require(*written)
        return fields, fields.int(keys[0], high=MAX_EPOCH)

    def where(self, key: str) -> str:
        """The path of ``key``: ``state['node_state']['position']``."""
        return f"{self.path}[{key!r}]"

    def error(self, key: str, must: str) -> ValueError:
        """The error for field ``key``: its path, its value and what it ``must`` be."""
        return ValueError(f"invalid {self.what} state: {self.where(key)}={_short.repr(self.state.get(key))} {must}")

    def __contains__(self, key: str) -> bool:
        return key in self.state

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value (unchecked: for values the parser compares or checks itself)."""
        return self.state.get(key, default)

    def _value(self, key: str, default: Any) -> Any:
        if key not in self.state:
            if default is _REQUIRED:
                raise ValueError(f"not a {self.what} state: {self.where(key)} is missing")
            return default
        return self.state[key]

    def int(self, key: str, *, low: int = 0, high: int = MAX_COUNT, default: Any = _REQUIRED) -> int:
        """``state[key]``: an int (not a bool, not a float) in ``[low, high]``."""
        value = self._value(key, default)
        if not _is_int(value) or not low <= value <= high:
            raise self.error(key, f"must be an int in [{low}, {high}]")
        return value

    def optional_int(
        self, key: str, *, low: builtins.int = 0, high: builtins.int = MAX_COUNT, default: Any = _REQUIRED
    ) -> builtins.int | None:
        """``state[key]``: None or an int in ``[low, high]``."""
        if self._value(key, default) is None:
            return None
        return self.int(key, low=low, high=high)

    def seed(self, key: str) -> builtins.int | None:
        """``state[key]``: None (also when missing) or a seed, an int in ``[0, 2**64)``."""
        return self.optional_int(key, high=MAX_SEED, default=None)

    def bool(self, key: str, *, default: Any = _REQUIRED) -> bool:
        """``state[key]``: a bool (``"false"``, 0 and None are not)."""
        value = self._value(key, default)
        if not isinstance(value, bool):
            raise self.error(key, "must be a bool")
        return value

    def version(self, key: str, current: builtins.int, *older: builtins.int) -> builtins.int | None:
        """The state's version: None when it has none (states from before versions), else ``current`` or one of
        ``older``."""
        if key not in self.state:
            return None
        value = self.state[key]
        if not _is_int(value) or value not in (current, *older):
            raise self.error(key, f"must be one of {[current, *older]}: this torch_drt reads those state versions")
        return value

    def require(self, *keys: str) -> None:
        """``keys`` must be present (a versioned state holds every key its version writes)."""
        for key in keys:
            self._value(key, _REQUIRED)

    def ints(self, key: str, *, ok: Callable[[builtins.int], builtins.bool] = lambda _: True, must: str = "",
             default: Any = _REQUIRED, low: builtins.int = 0, high: builtins.int = MAX_COUNT) -> list[builtins.int]:
        """``state[key]``: a list of ints in ``[low, high]``, each ``ok``."""
        value = self._value(key, default)
        if not isinstance(value, list) or not all(_is_int(v) and low <= v <= high and ok(v) for v in value):
            raise self.error(key, f"must be a list of ints in [{low}, {high}]{' ' + must if must else ''}")
        return value

    def child(self, key: str, what: str | None = None, keys: tuple[str, ...] = ()) -> StateFields:
        """The mapping ``state[key]`` (required), read the same way."""
        value = self._value(key, _REQUIRED)
        return StateFields(value, what or self.what, self.where(key), keys)

    def choice(self, key: str, choices: tuple[Any, ...], *, default: Any = _REQUIRED) -> Any:
        """``state[key]``: one of ``choices``."""
        value = self._value(key, default)
        if not any(type(value) is type(c) and value == c for c in choices):
            raise self.error(key, f"must be one of {list(choices)}")
        return value


def check_node_state(node: Any, state: Any, path: str) -> None:
    """Check ``state`` for ``node`` now, where the node can (torch_drt's nodes have ``check_state``).

    Another node's state is checked by the node itself when it is reset with it.
    """
    check = getattr(node, "check_state", None)
    if callable(check):
        check(state, path)
