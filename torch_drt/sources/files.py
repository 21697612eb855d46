"""FileDataset: item i is the content of its path."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from torch_drt.sources._base import DEFAULT_MAX_BYTES, Locations, check_size, make_policy
from torch_drt.sources._timed import run_with_timeout

__all__ = ["FileDataset"]

_TRANSIENT = (TimeoutError, InterruptedError, BlockingIOError)


class FileDataset:
    """File contents, read with one ``read`` after a size check. A map-style dataset (use ``item_concurrency``
    to read several files of a batch at once).

    Args:
        paths: one path per item.
        timeout: seconds per attempt (None: no limit): a hung network file system fails the attempt.
        retries: further attempts after a time-out or an interrupted read (nothing else is retried).
        backoff: base wait in seconds.
        max_backoff: longest wait.
        max_bytes: largest accepted file (checked from its size before reading, and while reading).

    Raises (from ``ds[i]``):
        OSError: a failed read (FileNotFoundError, PermissionError, ...) with the attempt count.
        TimeoutError: the last attempt ran out of time.
        ValueError: a file over ``max_bytes``.
        IndexError: an index out of range.
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike] | Locations,
        *,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.locations = paths if isinstance(paths, Locations) else Locations([os.fspath(p) for p in paths], "path")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"{timeout=} must be > 0 or None")
        self.timeout, self.max_bytes = timeout, max_bytes
        self.policy = make_policy(retries, backoff, max_backoff, max_bytes)

    @classmethod
    def from_template(
        cls, template: str, columns: Mapping[str, Any] | None = None, *, length: int | None = None, **options: Any
    ) -> FileDataset:
        """Item i's path is ``template`` with item i's column values (a str may not hold ``/``, ``\\`` or NUL)."""
        return cls(Locations.from_template(template, columns, "path", length), **options)

    def __len__(self) -> int:
        return len(self.locations)

    def _read(self, path: str) -> bytes:
        with open(path, "rb", buffering=0) as f:
            check_size(os.fstat(f.fileno()).st_size, self.max_bytes, path)
            data = f.read(self.max_bytes + 1)
        check_size(len(data), self.max_bytes, path)
        return data

    def __getitem__(self, index: int) -> bytes:
        import time

        path = self.locations[index]
        attempts = self.policy.attempts
        for attempt in range(attempts):
            try:
                return run_with_timeout(lambda: self._read(path), self.timeout)
            except _TRANSIENT as e:
                if attempt == attempts - 1:
                    if isinstance(e, TimeoutError):
                        raise TimeoutError(f"reading {path} timed out ({e}) after {attempts} attempt(s)") from None
                    raise OSError(e.errno, f"reading {path} failed after {attempts} attempt(s): {e.strerror}") from None
                time.sleep(self.policy.delay(attempt))
            except OSError as e:
                raise OSError(
                    e.errno, f"reading {path} failed after {attempt + 1} attempt(s): {e.strerror}", path
                ) from None
        raise AssertionError("unreachable")
