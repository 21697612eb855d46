"""The node cache's space: what its files hold, eviction (least recently used first, files in use skipped),
room reserved for a download before it starts, and downloads abandoned by processes that died."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from torch_drt.nodecache._node_files import (
    close_lock_fd,
    disk_full,
    downloading,
    entries,
    evict,
    free,
    lock_fd,
    preallocate,
    too_large,
)

logger = logging.getLogger("torch_drt.cache")


class NodeSpace:
    """``NodeCache``'s space accounting (its base: it supplies ``directory``, ``limit``, ``_lock`` and ``_create``)."""

    directory: Path
    limit: int
    _lock: Callable[[str], contextlib.AbstractContextManager[bool]]
    _create: Callable[[Path, int], int]

    def usage(self) -> int:
        """Bytes held: verified files and downloads in progress."""
        return sum(size for sub in ("data", "tmp") for _, size, _ in entries(self.directory / sub))

    def evict(self, need: int = 0) -> int:
        """Remove least recently used files nobody holds until ``need`` more bytes fit under the limit; also remove
        abandoned downloads. Call it under the space lock (``fetch`` does). Returns the bytes freed."""
        return self._evict(need)[0]

    def _evict(self, need: int) -> tuple[int, int]:
        """``evict``: the bytes freed, and the bytes held after."""
        freed, usage = evict(self.directory, self.limit, need, self._abandoned)
        if usage + need > self.limit:
            logger.info("node cache %s holds %d bytes in use; over its limit of %d", self.directory, usage, self.limit)
        return freed, usage

    def downloading(self, key: str) -> bool:
        """True while a process of the node (this one included) downloads ``key``."""
        return not self._abandoned(key)

    def _abandoned(self, key: str) -> bool:
        """True when nobody downloads ``key`` now (its lock is free and no live process has a download of it)."""
        if downloading(self.directory / "tmp", key):
            return False
        path = self.directory / "locks" / f"{key}.lock"
        fd = lock_fd(lambda: self._create(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC))
        try:
            return free(fd)
        finally:
            close_lock_fd(fd)

    def _fit(self, size: int, shown: str) -> None:
        """After a download of unknown size: evict until the cache, the downloaded file included, fits."""
        if size > self.limit:
            raise too_large(self.directory, self.limit, shown, size)
        with self._lock(".space.lock"):
            self.evict(0)

    def _reserve(self, key: str, size: int | None, shown: str, optional: bool = False) -> Path | None:
        """Make room for ``size`` bytes (evicting) and create the download's temporary file at full size; None
        when ``optional`` and the room is not there."""
        tmp = self.directory / "tmp" / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        with self._lock(".space.lock"):
            size = size or 0
            if self._evict(size)[1] + size > self.limit and optional:
                return None
            fd = self._create(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
            try:
                try:
                    preallocate(fd, size)
                except OSError as e:
                    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    self.evict(self.limit + size)  # the disk is fuller than the limit says: free all that is unused
                    preallocate(fd, size)
            except OSError as e:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise disk_full(self.directory, shown, size) from None
                raise
            os.close(fd)
        return tmp

    def _remove_tmp(self, key: str) -> None:
        if downloading(self.directory / "tmp", key):  # a live download (under a lock file since made again)
            return
        for entry in (self.directory / "tmp").glob(f"{key}.*"):
            entry.unlink(missing_ok=True)
