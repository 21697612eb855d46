"""Package faces that load their names on first use (PEP 562): one implementation for every face.

A face lists ``{name: module}`` and binds ``__getattr__, __dir__ = lazy_names(__name__, names)``; the first
lookup of a name imports its module and keeps the value in the face, so later lookups cost nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(face: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the module ``face`` for the lazily loaded ``names``.

    Args:
        face: the face module's ``__name__``.
        names: each lazily loaded name and the module that defines it.
    """

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            setattr(sys.modules[face], name, value)
            return value
        raise AttributeError(f"module {face!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[face])) | set(names))

    return __getattr__, __dir__
