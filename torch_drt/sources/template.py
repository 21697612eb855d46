"""Location templates: ``{name}`` is a column's value for the item, ``{index}`` its index, ``{{``/``}}`` braces.

Locations are made item by item, so no string is kept per item. A str value is made safe for where it goes:
in a URL it is percent-encoded as one component (all but ``A-Z a-z 0-9 - . _ ~``), so it cannot add a segment,
a query or a fragment; in a path or an object key it may not contain ``/``, ``\\`` or NUL, nor be ``.`` or
``..``, and in a key it may not be empty.

A URL template is shown redacted (no credentials, query or fragment) in every message and repr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

import numpy as np

from torch_drt._indices import check_index
from torch_drt.sources._urls import check_http_url, redact

Kind = Literal["url", "path", "key"]
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def _column(name: str, values: Any) -> Sequence[int] | Sequence[str] | np.ndarray:
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise TypeError(f"column {name!r} must be 1-D, got shape {values.shape}")
        if np.issubdtype(values.dtype, np.integer):
            return values
        if values.dtype.kind == "U":
            return values.tolist()
        raise TypeError(f"column {name!r} must hold ints or strs, got numpy dtype {values.dtype}")
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(f"column {name!r} must be a sequence or a numpy integer array, got {type(values).__name__}")
    kinds = {type(v) for v in values}
    if kinds - {int, str} or kinds == {int, str}:
        bad = next((v for v in values if type(v) not in (int, str)), values[0] if values else None)
        raise TypeError(f"column {name!r} must hold only ints or only strs, got {type(bad).__name__} ({bad!r})")
    return values


class Template:
    """A parsed template plus its columns.

    Args:
        template: the template string.
        columns: name -> values (one per item).
        kind: ``"url"``, ``"path"`` or ``"key"`` (what a str value must be safe as).
        length: the item count when there are no columns.

    Raises:
        ValueError: a placeholder without a column, a column the template does not use, unequal column lengths,
            unbalanced braces, no length, or an invalid first location.
        TypeError: a column that is not ints or strs.
    """

    def __init__(self, template: str, columns: Mapping[str, Any], kind: Kind, length: int | None = None) -> None:
        if not isinstance(template, str):
            raise TypeError(f"template must be a str, got {type(template).__name__}")
        self.template, self.kind = template, kind
        shown = self.shown = redact(template) if kind == "url" else template
        self._parts: list[str | tuple[str]] = []  # literal text, or (placeholder name,)
        pos, literal = 0, []
        for m in _TOKEN.finditer(template):
            literal.append(template[pos : m.start()])
            token = m.group(0)
            if token in ("{{", "}}"):
                literal.append(token[0])
            elif token in ("{", "}"):
                raise ValueError(f"unbalanced brace at position {m.start()} of template {shown!r}")
            else:
                name = m.group(1)
                if not name.isidentifier():
                    raise ValueError(f"invalid placeholder in template {shown!r}: use {{name}} with a Python name")
                self._parts.append("".join(literal))
                literal = []
                self._parts.append((name,))
            pos = m.end()
        literal.append(template[pos:])
        self._parts.append("".join(literal))
        used = {p[0] for p in self._parts if isinstance(p, tuple)}
        names = set(columns)
        missing = sorted(used - names - {"index"})
        if missing:
            raise ValueError(f"template placeholder(s) {missing} have no column (columns: {sorted(names)})")
        unused = sorted(names - used)
        if unused:
            raise ValueError(f"column(s) {unused} are not used by the template {shown!r} (a typo?)")
        if "index" in names:
            raise ValueError("'index' is the item index; a column cannot be called 'index'")
        self.columns = {n: _column(n, v) for n, v in columns.items()}
        lengths = {n: len(v) for n, v in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns have unequal lengths: {lengths}")
        if lengths:
            self.length = next(iter(lengths.values()))
            if length is not None and length != self.length:
                raise ValueError(f"{length=} differs from the columns' length {self.length}")
        elif length is None:
            raise ValueError("length= is required when the template has no columns")
        elif isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
            raise ValueError(f"{length=} must be an int >= 0")
        else:
            self.length = int(length)
        if self.length > 0:
            try:
                self.check(self.location(0))
            except ValueError as e:
                raise ValueError(f"invalid first location: {e}") from None

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"Template({self.shown!r}, columns={sorted(self.columns)}, {self.length} items)"

    def _value(self, name: str, index: int) -> str:
        if name == "index":
            return str(index)
        value = self.columns[name][index]
        if isinstance(value, str):
            return self._safe(name, value)
        return str(int(value))

    def _safe(self, name: str, value: str) -> str:
        if value in (".", ".."):
            raise ValueError(f"column {name!r} value {value!r} cannot be used in a {self.kind}")
        if self.kind == "url":
            return quote(value, safe="")
        if "/" in value or "\\" in value or "\x00" in value:
            raise ValueError(f"column {name!r} value {value!r} may not contain '/', '\\\\' or NUL in a {self.kind}")
        if self.kind == "key" and not value:
            raise ValueError(f"column {name!r} value is empty: a key part may not be empty")
        return value

    def location(self, index: int) -> str:
        """The location of item ``index``.

        Raises:
            TypeError: for an index that is not an int or a numpy integer.
            IndexError: for an index outside ``[0, len)``.
            ValueError: for a str value that is not safe where it goes.
        """
        index = check_index(index, self.length)
        return "".join(p if isinstance(p, str) else self._value(p[0], index) for p in self._parts)

    def check(self, location: str) -> str:
        """Validate a made location (a URL needs an http(s) scheme and a host)."""
        if self.kind == "url":
            check_http_url(location)
        elif not location:
            raise ValueError(f"empty {self.kind}")
        return location

