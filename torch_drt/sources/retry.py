"""The retry policy: what is transient, and how long to wait (the only module that decides either)."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

__all__ = ["TRANSIENT_STATUSES", "RetryPolicy", "parse_retry_after"]

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``retries`` more attempts after a transient failure, waiting ``backoff * 2**n`` seconds (n = the
    retry number from 0) with full jitter in its upper half, never more than ``max_backoff``; a server's
    ``Retry-After`` replaces the computed wait, capped at ``max_backoff`` too.
    """

    retries: int = 3
    backoff: float = 0.1
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries={self.retries} must be >= 0")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError(f"backoff={self.backoff} and max_backoff={self.max_backoff} must be >= 0")

    @property
    def attempts(self) -> int:
        """The most attempts one item gets."""
        return self.retries + 1

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            return min(self.max_backoff, retry_after)
        base = min(self.max_backoff, self.backoff * (2**retry))
        return base * (0.5 + random.random() / 2)

    @staticmethod
    def transient_status(status: int) -> bool:
        """HTTP statuses worth another attempt: 408, 429, 500, 502, 503, 504."""
        return status in TRANSIENT_STATUSES
