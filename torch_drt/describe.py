"""Readable, bounded reprs: what torch_drt's datasets, loaders and nodes show when printed.

A repr names the object's settings, never its data: payloads appear as their size (``<4096 bytes>``), containers
as their type and length (``list[1000]``), and nested objects by their own short repr.
"""

from __future__ import annotations

import functools
import types
from typing import Any

__all__ = ["MAX_INNER", "described", "short"]

MAX_INNER = 160  # longest repr of a nested object shown as it is


def short(value: Any) -> str:
    """A short description of ``value``: bytes by size, containers by type and length, others by a short repr."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{value.nbytes if isinstance(value, memoryview) else len(value)} bytes>"
    containers = list | tuple | dict | set | frozenset
    if isinstance(value, containers) and (len(value) > 8 or len(repr(value)) > MAX_INNER):
        return f"{type(value).__name__}[{len(value)}]"
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, functools.partial):
        return f"partial({short(value.func)})"
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        return value.__qualname__.rpartition("<locals>.")[2]
    try:
        text = repr(value)
    except Exception:  # a repr that fails must not hide the outer one
        text = f"<{type(value).__name__}>"
    if len(text) <= MAX_INNER:
        return text
    try:
        size = f"[{len(value)}]"
    except Exception:
        size = ""
    return f"<{type(value).__name__}{size}>"


def described(obj: Any, *positional: Any, **fields: Any) -> str:
    """``Type(positional..., name=value, ...)`` with each value shortened (``short``); None fields are left out."""
    parts = [short(value) for value in positional]
    parts += [f"{name}={short(value)}" for name, value in fields.items() if value is not None]
    return f"{type(obj).__name__}({', '.join(parts)})"
