"""What the I/O datasets share: locations from a list or a template, options, and size checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch_drt.sources.retry import RetryPolicy
from torch_drt.sources.template import Kind, Template

__all__ = ["DEFAULT_MAX_BYTES", "Locations", "check_size"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def check_size(size: int | None, max_bytes: int, where: str) -> None:
    """Raise ``ValueError`` when an item of ``size`` bytes is over ``max_bytes``."""
    if size is not None and size > max_bytes:
        raise ValueError(f"{where} is {size} bytes, over max_bytes={max_bytes}")


class Locations:
    """Item locations: an explicit list, or a ``Template`` that makes them item by item."""

    def __init__(self, items: Sequence[str] | Template, kind: Kind) -> None:
        if isinstance(items, Template):
            self._template: Template | None = items
            self._items: list[str] | None = None
        else:
            if isinstance(items, str | bytes):
                raise TypeError(f"expected a sequence of {kind}s, got a single {type(items).__name__}")
            self._items = [str(x) for x in items]
            self._template = None
        self.kind = kind

    @classmethod
    def from_template(
        cls, template: str, columns: Mapping[str, Any] | None, kind: Kind, length: int | None
    ) -> Locations:
        return cls(Template(template, columns or {}, kind, length), kind)

    def __len__(self) -> int:
        return len(self._template) if self._template is not None else len(self._items)

    def __getitem__(self, index: int) -> str:
        if isinstance(index, bool) or not isinstance(index, int):
            index = int(index)
        n = len(self)
        if not 0 <= index < n:
            raise IndexError(f"index {index} is out of range for {n} items")
        if self._template is not None:
            return self._template.location(index)
        return self._items[index]


def make_policy(retries: int, backoff: float, max_backoff: float, max_bytes: int) -> RetryPolicy:
    """Validate the common options and return the retry policy."""
    if max_bytes < 1:
        raise ValueError(f"{max_bytes=} must be > 0")
    return RetryPolicy(retries, backoff, max_backoff)
