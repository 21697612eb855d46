"""Retries for every source: which failures are transient, how long to wait, the attempt loops, the retry log,
and the error the caller gets (the only module that decides any of these).

Retries are logged at INFO on the ``torch_drt.sources`` logger (silent unless the application configures logging),
naming the redacted location, the attempt and a reason that holds no secret.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno as errnos
import logging
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

logger = logging.getLogger("torch_drt.sources")
T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT = (TimeoutError, InterruptedError, BlockingIOError, ConnectionError)
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError)
# kept as the caller's error type (with the errno); any other failure, a library's own type included, is an OSError
_KEPT_TYPES = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, TimeoutError)


class AttemptError(Exception):
    """A failed attempt as its source describes it: ``reason`` holds no secret; ``transient`` says whether another
    attempt may succeed; ``kind`` is the error type the caller gets; ``retry_after`` is a server's requested wait
    in seconds."""

    def __init__(
        self, reason: str, *, transient: bool, kind: type[Exception] = OSError, retry_after: float | None = None
    ) -> None:
        super().__init__(reason)
        self.reason, self.transient, self.kind, self.retry_after = reason, transient, kind, retry_after


def transient_status(status: int) -> bool:
    """HTTP statuses worth another attempt: 408, 429, 500, 502, 503, 504."""
    return status in TRANSIENT_STATUSES


def _aiohttp_kind(error: BaseException) -> bool | None:
    """True for aiohttp's connection errors and bodies cut short, False for its other errors, None otherwise."""
    aiohttp = sys.modules.get("aiohttp")  # not imported: none of its errors can exist
    if aiohttp is None or not isinstance(error, aiohttp.ClientError):
        return None
    return isinstance(error, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError)


def is_transient(error: BaseException, *, unknown: bool = False) -> bool:
    """Whether another attempt may succeed after ``error``.

    Transient: time-outs, interrupted or would-block calls, connection errors and bodies cut short (aiohttp's too),
    an ``AttemptError`` marked transient (e.g. HTTP 503). Permanent: not found, permission, (not) a directory, bad
    input (``ValueError``, ``TypeError``), other HTTP client errors (redirect loops, invalid URLs). Anything else:
    ``unknown`` (True for object stores, whose clients raise their own types for throttling and server errors;
    False for local files, where an I/O error is not cured by waiting).
    """
    if isinstance(error, AttemptError):
        return error.transient
    if (aiohttp_transient := _aiohttp_kind(error)) is not None:
        return aiohttp_transient
    if isinstance(error, _TRANSIENT):
        return True
    return False if isinstance(error, _PERMANENT) else unknown


def safe_reason(error: BaseException) -> str:
    """What went wrong, without anything the error's text could carry (URLs, requests, credentials): a source's
    own reason, or the error type with the system's text for its errno."""
    if isinstance(error, AttemptError):
        return error.reason
    code = getattr(error, "errno", None)
    if isinstance(error, OSError) and isinstance(code, int) and code in errnos.errorcode:
        return f"{type(error).__name__} ({os.strerror(code)})"
    return type(error).__name__


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None when absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``retries`` more attempts after a transient failure, waiting ``backoff * 2**n`` seconds (n = the
    retry number from 0) with full jitter in its upper half, never more than ``max_backoff``; a server's
    ``Retry-After`` replaces the computed wait, capped at ``max_backoff`` too.

    ``run`` and ``arun`` drive one item's attempts. The error they raise is the ``kind`` of an ``AttemptError``;
    else the failure's own type when it is ``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``,
    ``NotADirectoryError`` or ``TimeoutError`` (its errno kept); else ``OSError``. Its message names the redacted
    location, the attempts made and a reason without secrets (``safe_reason``); it chains no error.
    """

    retries: int = 3
    backoff: float = 0.1
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries={self.retries!r} must be an int >= 0")
        if not 0 <= self.backoff < float("inf") or not 0 <= self.max_backoff < float("inf"):
            raise ValueError(f"backoff={self.backoff} and max_backoff={self.max_backoff} must be >= 0 and finite")

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

    def _wait(self, error: BaseException, attempt: int, what: str, unknown: bool) -> float | None:
        """Seconds to wait before the next attempt, or None to give up (logging the retry)."""
        if attempt >= self.attempts or not is_transient(error, unknown=unknown):
            return None
        wait = self.delay(attempt - 1, getattr(error, "retry_after", None))
        logger.info(
            "%s: attempt %d of %d failed (%s); retry in %.3gs", what, attempt, self.attempts, safe_reason(error), wait
        )
        return wait

    def run(self, attempt: Callable[[], T], what: str | Callable[[], str], *, unknown: bool = False) -> T:
        """``attempt()`` until it succeeds, fails permanently or runs out of attempts.

        Args:
            attempt: one try.
            what: the operation on the redacted location, e.g. ``"reading s3://bucket/key"``, or a function that
                makes it (called only when an attempt fails: a successful item pays nothing for its message).
            unknown: whether an error of no known kind is transient (see ``is_transient``).
        """
        for n in range(1, self.attempts + 1):
            try:
                return attempt()
            except Exception as e:
                error = e
            what = what() if callable(what) else what
            wait = self._wait(error, n, what, unknown)
            if wait is None:
                raise failure(error, what, n)
            time.sleep(wait)
        raise AssertionError("unreachable")

    async def arun(
        self,
        attempt: Callable[[], Awaitable[T]],
        what: str | Callable[[], str],
        failed: BaseException | None = None,
        *,
        unknown: bool = False,
    ) -> T:
        """``run`` for an ``async`` attempt, waiting with ``asyncio.sleep``; ``failed`` is the error of a first
        attempt the caller made itself (its fast path), and the loop goes on from there."""
        error = failed
        for n in range(1, self.attempts + 1):
            if error is None:
                try:
                    return await attempt()
                except Exception as e:
                    error = e
            what = what() if callable(what) else what
            wait = self._wait(error, n, what, unknown)
            if wait is None:
                raise failure(error, what, n)
            error = None
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")


def failure(error: BaseException, what: str, attempts: int) -> Exception:
    """The error the caller gets for ``error`` (raise it outside an ``except`` block: nothing is chained)."""
    message = f"{what} failed after {attempts} attempt(s): {safe_reason(error)}"
    if isinstance(error, AttemptError):
        return error.kind(message)
    kind = next((t for t in _KEPT_TYPES if isinstance(error, t)), OSError)
    code = getattr(error, "errno", None)
    if issubclass(kind, OSError) and isinstance(code, int):
        return kind(code, message)
    return kind(message)
