"""The base of the I/O datasets: item i is the bytes at location i; the options, checks and repr they share."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar

from torch_drt.sources._locations import Locations
from torch_drt.sources.retry import AttemptError, RetryPolicy
from torch_drt.sources.template import Kind, Template

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def check_size(size: int | None, max_bytes: int, what: str) -> None:
    """Fail the attempt (permanently, as a ``ValueError``) when ``what`` has ``size`` bytes, over ``max_bytes``."""
    if size is not None and size > max_bytes:
        raise AttemptError(f"{what} is {size} bytes, over max_bytes={max_bytes}", transient=False, kind=ValueError)


def check_timeout(name: str, value: float | None) -> None:
    """Raise ``ValueError`` unless ``value`` is None or a finite number of seconds > 0."""
    if value is not None and not (isinstance(value, int | float) and 0 < value < math.inf):
        raise ValueError(f"{name}={value!r} must be a number > 0 or None")


class LocatedDataset:
    """A map-style dataset whose item i is the bytes at ``locations[i]``, fetched under a ``RetryPolicy``.

    Subclasses set ``kind`` (what a location is) and fetch in ``__getitem__`` (and ``aget``).
    """

    kind: ClassVar[Kind]

    def __init__(
        self,
        locations: Iterable[Any] | Locations | Template,
        *,
        timeout: float | None,
        retries: int,
        backoff: float,
        max_backoff: float,
        max_bytes: int,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"{max_bytes=} must be an int > 0")
        check_timeout("timeout", timeout)
        self.locations = locations if isinstance(locations, Locations) else Locations(locations, self.kind)
        self.timeout, self.max_bytes = timeout, max_bytes
        self.policy = RetryPolicy(retries, backoff, max_backoff)

    def __len__(self) -> int:
        return len(self.locations)

    def _repr_args(self) -> list[str]:
        """What the repr shows (never a credential, a query or a header value)."""
        return [
            self.locations.summary(),
            f"timeout={self.timeout}",
            f"retries={self.policy.retries}",
            f"max_bytes={self.max_bytes}",
        ]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_args())})"
