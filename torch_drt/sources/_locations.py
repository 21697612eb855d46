"""Item locations: an explicit list, or a ``Template`` that makes them item by item."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from torch_drt._indices import check_index
from torch_drt.sources.template import Kind, Template


def _location(item: Any, kind: Kind) -> str:
    if isinstance(item, str):
        return item
    if kind == "path" and isinstance(item, os.PathLike):
        path = os.fspath(item)
        if isinstance(path, str):
            return path
    accepted = "a str or an os.PathLike" if kind == "path" else "a str"
    raise TypeError(f"each {kind} must be {accepted}, got {type(item).__name__}")


class Locations:
    """Item locations: ``items`` (a list of str, or of paths for ``kind="path"``), or a ``Template``.

    Raises:
        TypeError: a single str, bytes or path instead of a sequence of them, or an item of another type (the
            message names types only, never a location).
    """

    def __init__(self, items: Iterable[Any] | Template, kind: Kind) -> None:
        self.kind = kind
        self.template: Template | None = None
        self._items: list[str] = []
        if isinstance(items, Template):
            self.template = items
            return
        if isinstance(items, str | bytes | os.PathLike):
            raise TypeError(
                f"expected a sequence of {kind}s, got a single {type(items).__name__}: pass a list of one {kind}"
            )
        if not isinstance(items, Iterable):
            raise TypeError(f"expected a sequence of {kind}s, got {type(items).__name__}")
        self._items = [_location(x, kind) for x in items]

    @classmethod
    def from_template(
        cls, template: str, columns: Mapping[str, Any] | None, kind: Kind, length: int | None
    ) -> Locations:
        return cls(Template(template, columns or {}, kind, length), kind)

    def __len__(self) -> int:
        return len(self.template) if self.template is not None else len(self._items)

    def __getitem__(self, index: int) -> str:
        if self.template is not None:
            return self.template.location(index)
        return self._items[check_index(index, len(self._items))]

    def summary(self) -> str:
        """How many locations, and the template they come from (redacted for URLs)."""
        n = len(self)
        counted = f"{n} {self.kind}{'' if n == 1 else 's'}"
        return counted if self.template is None else f"{counted} from template {self.template.shown!r}"

    def __repr__(self) -> str:
        return f"Locations({self.summary()})"
