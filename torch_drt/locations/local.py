"""The local backend: a cache directory on this machine, its shards and index memory-mapped read-only.

Mapped pages are shared by every process reading the cache. A mapped file that shrinks under a reader would
make the next access to a vanished page kill the process with SIGBUS, so each gather first checks the size of
every file it reads from (one ``fstat`` per file and gather) and raises ``CacheCorruptError`` instead. A file
truncated while a gather copies from it can still fault: the check narrows that window to the copy itself.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import cast

from torch_drt.checksums import sha256_file
from torch_drt.locations.base import CacheBackend, StoredFile
from torch_drt.locations.errors import CacheCorruptError, MissingFile
from torch_drt.locations.location import register_backend

# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a cache file that is a link is refused
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW


class LocalFile(StoredFile):
    """A regular file mapped read-only."""

    lasting = True

    def __init__(self, where: Path, fd: int, size: int) -> None:
        super().__init__(where, size)
        # an empty file cannot be mapped; b"" slices the same way (every range of it is empty). The mmap keeps
        # its own duplicate of the descriptor, which ``mmap.size()`` fstats.
        self._map: mmap.mmap | bytes = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else b""

    def gather(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        mm = self._map
        return [mm[a:b] for a, b in zip(starts, ends)]

    def view(self) -> memoryview:
        return memoryview(self._map)

    def check(self) -> None:
        if not self.size:
            return
        assert isinstance(self._map, mmap.mmap)  # a file of size > 0 is mapped
        actual = self._map.size()
        if actual != self.size:
            raise CacheCorruptError(
                self.where, f"file is {actual} bytes but was {self.size} when the cache was opened (truncated?)"
            )

    def close(self) -> None:
        if isinstance(self._map, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view of it is still alive: the map goes with its last user
                self._map.close()


class LocalBackend(CacheBackend):
    """A cache directory on a local file system.

    Args:
        location: the directory (a str or ``Path``).
    """

    def __init__(self, location: str | Path) -> None:
        super().__init__(str(location))
        self.path = Path(location)

    def where(self, rel: str = "") -> Path:
        return self.path / rel if rel else self.path

    def check_root(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(f"cache path does not exist: {self.path}") from None
        except OSError as e:
            raise CacheCorruptError(self.path, f"cache path cannot be read: {e.strerror or e}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise CacheCorruptError(self.path, "not a directory (a cache is a directory)")

    def names(self) -> list[str]:
        if not self.path.is_dir():
            raise FileNotFoundError(f"no such directory: {self.path}")
        return sorted(p.name for p in self.path.iterdir() if p.is_file())

    def is_dir(self) -> bool:
        return self.path.is_dir()

    def _open_regular(self, rel: str) -> tuple[int, int]:
        """Open ``rel`` and return (fd, size); only regular files pass."""
        path = self.where(rel)
        try:
            for parent in PurePosixPath(rel).parents[:-1]:  # a linked directory inside the cache, "shards" say
                if os.path.islink(self.path / parent):
                    raise OSError(errno.ELOOP, f"{parent} is a link")
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            raise MissingFile(path, "file is missing") from None
        except NotADirectoryError:
            raise CacheCorruptError(path, f"{path.parent} is not a directory") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise CacheCorruptError(
                    path, "is a symbolic link, not a regular file of the cache (links are never followed)"
                ) from None
            raise CacheCorruptError(path, f"file cannot be opened: {e.strerror or e}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise CacheCorruptError(path, "not a regular file (a FIFO, device or directory is no cache file)")
        return fd, st.st_size

    def size(self, rel: str) -> int:
        fd, size = self._open_regular(rel)
        os.close(fd)
        return size

    def read(self, rel: str, limit: int, *, checksum: tuple[str, str] | None = None) -> bytes:
        fd, size = self._open_regular(rel)
        try:
            if size > limit:
                raise CacheCorruptError(self.where(rel), f"file is {size} bytes, more than the {limit} allowed")
            chunks, got = [], 0
            while got < size:
                chunk = os.read(fd, size - got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as e:
            raise CacheCorruptError(self.where(rel), f"file cannot be read: {e.strerror or e}") from None
        finally:
            os.close(fd)
        if got != size:
            raise CacheCorruptError(self.where(rel), f"file changed while it was read ({got} of {size} bytes)")
        return b"".join(chunks)

    def open(
        self, rel: str, size: int, *, checksum: tuple[str, str] | None = None, ranges_ok: bool = False
    ) -> LocalFile:
        fd, actual = self._open_regular(rel)
        if actual != size:
            os.close(fd)
            raise CacheCorruptError(
                self.where(rel), f"file is {actual} bytes but the manifest records {size} (truncated?)"
            )
        try:
            return LocalFile(self.where(rel), fd, size)
        except (OSError, ValueError) as e:
            raise CacheCorruptError(self.where(rel), f"file cannot be mapped: {e}") from None
        finally:
            os.close(fd)

    def sha256(self, rel: str) -> str:
        return sha256_file(self._regular(rel))

    def _regular(self, rel: str) -> Path:
        fd, _ = self._open_regular(rel)
        os.close(fd)
        return self.where(rel)

    def gather(
        self, files: Sequence[StoredFile], numbers: Sequence[int], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        """Slice the maps directly, one check per file touched (no regrouping: maps are random access)."""
        return self.gather_parts(files, numbers, starts, ends)(0, len(starts))

    def gather_parts(
        self, files: Sequence[StoredFile], numbers: Sequence[int], starts: Sequence[int], ends: Sequence[int]
    ) -> Callable[[int, int], list[bytes]]:
        """Check each file touched once; each part is then sliced from the maps when it is asked for."""
        touched = set(numbers)
        for number in touched:
            files[number].check()
        mapped = cast("Sequence[LocalFile]", files)  # this backend's files: it opened them
        if len(touched) == 1:  # one map: slice it directly
            mm = mapped[next(iter(touched))]._map
            return lambda i, j: [mm[a:b] for a, b in zip(starts[i:j], ends[i:j])]
        return lambda i, j: [mapped[s]._map[a:b] for s, a, b in zip(numbers[i:j], starts[i:j], ends[i:j])]


register_backend("file", LocalBackend)
