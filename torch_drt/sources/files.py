"""FileDataset: item i is the content of its path."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from torch_drt.sources._base import DEFAULT_MAX_BYTES, LocatedDataset, check_size
from torch_drt.sources._locations import Locations
from torch_drt.sources._timed import run_with_timeout


class FileDataset(LocatedDataset):
    """File contents, read to the end after a size check (never more than ``max_bytes + 1`` bytes). A map-style
    dataset (use ``item_concurrency`` to read several files of a batch at once).

    Args:
        paths: one path (str or ``os.PathLike``) per item; a single str or path is refused (``TypeError``).
        timeout: seconds per attempt (None: no limit): a hung network file system fails the attempt.
        retries: further attempts after a transient failure (``sources.retry.is_transient``: a time-out, an
            interrupted read; a missing file or an I/O error is not retried).
        backoff: base wait in seconds.
        max_backoff: longest wait.
        max_bytes: largest accepted file (checked from its size before reading, and while reading).

    Raises (from ``ds[i]``):
        OSError: a failed read, of the failure's type (``FileNotFoundError``, ``PermissionError``, ...) with its
            errno and the attempt count.
        TimeoutError: the last attempt ran out of time.
        ValueError: a file over ``max_bytes``.
        TypeError: an index that is not an int.
        IndexError: an index out of range.
    """

    kind = "path"

    def __init__(
        self,
        paths: Iterable[str | os.PathLike] | Locations,
        *,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(
            paths, timeout=timeout, retries=retries, backoff=backoff, max_backoff=max_backoff, max_bytes=max_bytes
        )

    @classmethod
    def from_template(
        cls, template: str, columns: Mapping[str, Any] | None = None, *, length: int | None = None, **options: Any
    ) -> FileDataset:
        """Item i's path is ``template`` with item i's column values (a str may not hold ``/``, ``\\`` or NUL)."""
        return cls(Locations.from_template(template, columns, "path", length), **options)

    def _read(self, path: str) -> bytes:
        chunks, size = [], 0
        with open(path, "rb", buffering=0) as f:
            expected = os.fstat(f.fileno()).st_size
            check_size(expected, self.max_bytes, "the file")
            while size <= self.max_bytes:  # a raw read may return less than asked (network and FUSE file systems)
                chunk = f.read(min(max(expected - size, 1 << 16), self.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        check_size(size, self.max_bytes, "the file (while reading)")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def __getitem__(self, index: int) -> bytes:
        path = self.locations[index]
        return self.policy.run(lambda: run_with_timeout(lambda: self._read(path), self.timeout), f"reading {path}")
