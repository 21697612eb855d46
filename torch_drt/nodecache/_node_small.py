"""The node cache's manifest copies (``small/<name>``): fetched by one process of the node, reused for a time."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from torch_drt.nodecache._node_files import disk_full


class ManifestCopies:
    """``NodeCache``'s small files (its base: it supplies ``directory``, ``_lock``, ``_create`` and ``_again``)."""

    directory: Path
    _lock: Callable[[str], contextlib.AbstractContextManager[bool]]
    _create: Callable[[Path, int], int]
    _again: Callable[[Callable[[], None]], None]

    def small(
        self, name: str, ttl: float, fetch: Callable[[], bytes | None], shown: str = "", limit: int | None = None
    ) -> bytes | None:
        """The small file ``name`` (a manifest, from the URL ``shown``), fetched by one process of the node and reused
        for ``ttl`` seconds. A missing file (``fetch`` returns None) is not remembered: it may be published any
        moment. A copy of more than ``limit`` bytes is not read: it is fetched again.

        Raises:
            OSError: with errno ENOSPC, naming the local file and ``shown``, when the disk is full (nothing is left).
        """
        path = self.directory / "small" / name
        data: bytes | None  # the copy read, else the fetched bytes (None: missing)
        with self._lock(f"locks/small-{name}.lock"):
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(path)  # a copy dated in the future is stale too, and so is one that is no file
                if 0 <= time.time() - st.st_mtime < ttl and stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as f:
                        data = f.read() if limit is None else f.read(limit + 1)
                    if limit is None or len(data) <= limit:
                        return data
            data = fetch()
            if data is not None:
                tmp = path.with_name(f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
                try:
                    with os.fdopen(self._create(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC), "wb") as f:
                        f.write(data)
                    self._again(lambda: os.replace(tmp, path))
                except OSError as e:
                    tmp.unlink(missing_ok=True)
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise disk_full(path, shown or name, len(data)) from None
                    raise
            return data

    def seen_small(self, name: str) -> bool:
        """True when the node holds a copy of the small file ``name``, however old (it read it before)."""
        return (self.directory / "small" / name).exists()

    def forget(self, name: str) -> None:
        """Drop the small file ``name`` (the next ``small`` call fetches it again)."""
        (self.directory / "small" / name).unlink(missing_ok=True)
