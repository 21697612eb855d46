"""Where the bytes of a cache come from: one small base class; each backend is one module beside it.

A backend answers for one location. The read path asks it for three things only (the three methods a backend
overrides, as an fsspec implementation overrides ``spec.py``'s defaults): the size of a file, a small file read
whole (manifest, index, metadata), and an opened file (a shard or the index) from which byte ranges are gathered.
Everything above it (validation, checksums, decompression, samples) is shared, so a new place to keep caches is
one new module that subclasses ``CacheBackend`` and registers its scheme (``register_backend``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_drt.locations.location import Location


class StoredFile(ABC):
    """One opened file of a cache, read by byte ranges.

    Attributes:
        where: the file's location, for error messages.
        size: its size in bytes when it was opened.
    """

    def __init__(self, where: Path | str, size: int) -> None:
        self.where = where
        self.size = size

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.where)!r}, size={self.size})"

    @abstractmethod
    def gather(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """Return the bytes ``[starts[i], ends[i])`` for each ``i``; every range lies inside ``[0, size]``."""

    lasting = False  # True when ``view()`` stays valid until ``close()`` (a local map)

    def view(self) -> memoryview | None:
        """The whole file as a read-only buffer, or None when the backend reads by ranges only (or has no copy of
        the file now)."""
        return None

    @abstractmethod
    def check(self) -> None:
        """Raise ``CacheCorruptError`` when the file no longer has the size it was opened with."""

    def close(self) -> None:  # noqa: B027 - optional for backends that hold nothing
        """Release what the file holds."""

    def recheck(self) -> bool:
        """After a read of this file failed its checks: True when a local copy was found damaged and replaced
        (read again); False when there is nothing to replace (the error stands).

        Raises:
            CacheCorruptError: naming the local copy, when it was damaged again after it was replaced.
        """
        return False


class CacheBackend(ABC):
    """The files of one cache, addressed by paths relative to it (``"manifest.json"``, ``"shards/000000.bin"``).

    Args:
        location: the cache's location (a directory path for the local backend).

    Attributes:
        stats_cheaply: True when a file's size costs no request (opening then checks every shard's size; a remote
            backend checks each shard's size and checksum when it fetches it instead).
    """

    stats_cheaply = True

    def __init__(self, location: str) -> None:
        self.location = location

    def __reduce__(self):  # a backend travels as its location and is reopened on the other side
        return (type(self), (self.location,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    @classmethod
    def from_location(cls, location: Location) -> CacheBackend:
        """The backend of ``location`` (what ``Location.backend()`` calls; the default passes its target)."""
        return cls(location.url if location.is_remote else str(location.path))

    def where(self, rel: str = "") -> Path | str:
        """The location of ``rel`` (or of the cache itself), as errors name it."""
        return f"{self.location}/{rel}" if rel else self.location

    def check_root(self) -> None:  # noqa: B027 - a store without directories has nothing to check
        """Raise ``FileNotFoundError`` when nothing is at the location, ``CacheCorruptError`` when it is no cache
        directory (by default nothing is checked: a missing manifest is reported by its read)."""

    @abstractmethod
    def size(self, rel: str) -> int:
        """The size of a regular file.

        Raises:
            MissingFile: when it is missing.
            CacheCorruptError: when it is not a regular file, or cannot be read.
        """

    @abstractmethod
    def read(self, rel: str, limit: int, *, checksum: tuple[str, str] | None = None) -> bytes:
        """Read a whole regular file of at most ``limit`` bytes.

        ``checksum`` (algorithm, hex digest), when the manifest records one, lets a backend serve the file from a
        verified copy it keeps (the caller still verifies what it gets).

        Raises:
            MissingFile: when it is missing.
            CacheCorruptError: when it is not a regular file (a FIFO, a device), larger than ``limit``, or
                cannot be read.
        """

    @abstractmethod
    def open(
        self, rel: str, size: int, *, checksum: tuple[str, str] | None = None, ranges_ok: bool = False
    ) -> StoredFile:
        """Open a regular file that must be ``size`` bytes, for range reads.

        ``checksum`` (algorithm, hex digest) is what the manifest records for the whole file; ``ranges_ok`` says
        every record read from it is verified by its own checksum (a remote backend may then read byte ranges
        without the whole file).

        Raises:
            MissingFile: when it is missing.
            CacheCorruptError: when it is not a regular file, or of another size.
        """

    def names(self) -> list[str]:
        """The names of the files directly at this location, sorted (how foreign formats list a directory; a
        backend that cannot list leaves this out).

        Raises:
            FileNotFoundError: when no directory is there.
        """
        raise NotImplementedError(f"{type(self).__name__} does not list {self.where()}")

    def is_dir(self) -> bool:
        """True when the location is a directory (a URL prefix with no file of its own)."""
        raise NotImplementedError(f"{type(self).__name__} does not tell directories from files")

    def expect(self, rels: Sequence[str]) -> None:  # noqa: B027 - local: nothing to fetch ahead
        """A hint: ``rels`` are read right after the next manifest read (an open reads the index and metadata
        next). A remote backend that must fetch the manifest fetches them with it when its node has never read
        that manifest (one round trip instead of two); the files are still verified against the manifest when
        read. A no-op for local caches."""

    def prefetch(  # noqa: B027 - local: no fetching
        self, files: Sequence[StoredFile], first: int = 0, share: int = 1
    ) -> None:
        """Fetch ``files`` of this backend ahead of the reads that need them, in this order (replacing the previous
        plan); after a start or a resume the ``first`` of them first; ``share``: the node's processes planning
        reads (``torch_drt._cpu_budget.node_processes``), whose prefetch windows split the node's. A no-op for
        local caches."""

    def sha256(self, rel: str) -> str:
        """The hex SHA-256 of a whole file, read in chunks (the strong check of ``validate_cache=True``)."""
        import hashlib

        size = self.size(rel)
        file = self.open(rel, size)
        h, chunk = hashlib.sha256(), 1 << 22
        try:
            for start in range(0, size, chunk):
                h.update(file.gather([start], [min(start + chunk, size)])[0])
        finally:
            file.close()
        return h.hexdigest()

    def gather(
        self, files: Sequence[StoredFile], numbers: Sequence[int], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        """Bytes ``[starts[i], ends[i])`` of ``files[numbers[i]]`` for each ``i``, in order, one gather per file.

        Each file read from is checked first (``StoredFile.check``).
        """
        groups: dict[int, list[int]] = {}
        for i, number in enumerate(numbers):
            groups.setdefault(number, []).append(i)
        out: list[bytes] = [b""] * len(numbers)
        for number, rows in groups.items():
            file = files[number]
            file.check()
            for i, data in zip(rows, file.gather([starts[i] for i in rows], [ends[i] for i in rows])):
                out[i] = data
        return out

    def forget(self, rel: str) -> None:  # noqa: B027 - optional for backends that remember nothing
        """Drop what this node remembers of ``rel`` (a manifest copy or a "missing" answer), after it was published
        here, say; backends that remember nothing do nothing."""

    def gather_parts(
        self, files: Sequence[StoredFile], numbers: Sequence[int], starts: Sequence[int], ends: Sequence[int]
    ) -> Callable[[int, int], list[bytes]]:
        """``gather`` in parts: ``part(i, j)`` returns its items ``i`` to ``j - 1`` (a reader copies and hashes a
        batch a part at a time, each while it is in the CPU's cache). Each file is checked once, before ``gather_parts``
        returns; here the whole gather is read at once and handed out in slices."""
        data = self.gather(files, numbers, starts, ends)
        return lambda i, j: data[i:j]
