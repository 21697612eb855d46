"""Running one blocking attempt with a time limit (the attempt's thread is left to finish on its own)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from torch_drt.sources.retry import AttemptError

T = TypeVar("T")


def run_with_timeout(fn: Callable[[], T], timeout: float | None) -> T:
    """``fn()``, or a transient ``AttemptError`` of kind ``TimeoutError`` when it takes longer than ``timeout``
    seconds (None: no limit)."""
    if timeout is None:
        return fn()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    thread = threading.Thread(target=target, name="torch_drt-io-attempt", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AttemptError(f"timed out after {timeout}s", transient=True, kind=TimeoutError)
    if "error" in box:
        raise box.pop("error")
    return box["value"]
