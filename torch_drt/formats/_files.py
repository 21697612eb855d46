"""The files of a foreign dataset, read through torch_drt's cache backends (``backend_for``: local maps, or an fsspec
URL through the remote store's retries, time-outs, redaction and coalesced range reads).

A file is a ``(backend, rel)`` pair: the backend of its directory (or URL prefix) and its name there. Nothing here
decides whether a location is a URL: ``backend_for`` does.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_drt._cpu_budget import reading_processes
from torch_drt.cache.errors import FormatError
from torch_drt.formats._file_reads import gather_one
from torch_drt.locations import CacheBackend, StoredFile, backend_for
from torch_drt.locations._remote_file import RemoteFile
from torch_drt.locations.location import Location, is_url
from torch_drt.locations.remote_config import RemoteConfig


def split_location(location: str | Path) -> tuple[str, str]:
    """``(directory, name)`` of a file's path or URL."""
    parsed = Location.parse(location)
    return str(parsed.parent.target), parsed.name


class Files:
    """The backends of a dataset's files (one per directory), made once per process and dropped when pickled.

    Args:
        storage_options: fsspec options of URLs (credentials, endpoint); never shown.
        remote_config: node cache, retries, time-outs and range settings of URLs.
    """

    def __init__(self, storage_options: Mapping[str, Any] | None, remote_config: RemoteConfig | None) -> None:
        self.storage_options = dict(storage_options or {})
        self.remote_config = remote_config
        self._backends: dict[str, CacheBackend] = {}
        self._listed: dict[str, dict[str, tuple[int, str]]] = {}  # directory -> name -> (size, ETag), one listing
        # each, sent to worker processes with the dataset

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_backends": {}}

    def remote(self, directory: str) -> bool:
        """True when ``directory`` is read through the remote backend (whose node cache verifies downloads)."""
        return not self.backend(directory).stats_cheaply

    def backend(self, directory: str) -> CacheBackend:
        """The backend of ``directory`` (a path or URL prefix)."""
        backend = self._backends.get(directory)
        if backend is None:
            backend = self._backends[directory] = backend_for(directory, self.storage_options, self.remote_config)
        return backend

    def where(self, directory: str, rel: str) -> Path | str:
        """The location of a file, as errors name it (a URL holds no credentials)."""
        return self.backend(directory).where(rel)

    def size(self, directory: str, rel: str) -> int:
        return self.backend(directory).size(rel)

    def read(self, directory: str, rel: str, limit: int, checksum: tuple[str, str] | None = None) -> bytes:
        """A whole file of at most ``limit`` bytes (through the node cache when ``checksum`` is a sha256 or
        xxh3_128 the dataset's index records)."""
        return self.backend(directory).read(rel, limit, checksum=checksum)

    def open(
        self, directory: str, rel: str, size: int | None = None, checksum: tuple[str, str] | None = None
    ) -> StoredFile:
        """A file opened for range reads (``size``: what the dataset's index records, when a remote file's size is
        not listed): mapped when local; when remote, downloaded whole into the node cache on
        first read (served by coalesced range requests meanwhile) and mapped from there, so a later epoch, worker
        or process of the node reads it locally.

        A remote file with a ``checksum`` (sha256 or xxh3_128, as the dataset's index records it) is keyed by it
        and every read waits for its verified download; one without is keyed by its URL, size and ETag (a file
        rewritten in place is fetched anew), or, when the store reports no ETag, read by range requests only.
        """
        backend = self.backend(directory)
        if backend.stats_cheaply:  # opened at its own size: the reader compares it with what its index records
            return backend.open(rel, backend.size(rel), ranges_ok=True)
        listed = self._listing(directory).get(rel)
        if listed is not None:
            size = listed[0]
        elif size is None:
            size = backend.size(rel)
        if checksum is not None and checksum[0] in ("sha256", "xxh3_128"):
            return backend.open(rel, size, checksum=checksum)
        if listed is None:
            return backend.open(rel, size, ranges_ok=True)
        identity = hashlib.sha256(json.dumps([str(backend.where(rel)), size, listed[1]]).encode()).hexdigest()
        return backend.open(rel, size, checksum=("object", identity), ranges_ok=True)

    def whole(self, directory: str, rel: str, size: int, checksum: tuple[str, str] | None = None) -> bytes:
        """All ``size`` bytes of a file (through the node cache when remote, as ``open``)."""
        file = self.open(directory, rel, size, checksum)
        try:
            if file.size != size:
                raise FormatError(file.where, f"file is {file.size} bytes, the index records {size}")
            return gather_one(file, 0, size)
        finally:
            file.close()

    def etag(self, directory: str, rel: str) -> str | None:
        """The ETag a remote file was listed with (the directory listed once), None for a local file or one listed
        without."""
        if not self.remote(directory):
            return None
        listed = self._listing(directory).get(rel)
        return None if listed is None else listed[1]

    def list_remote(self, directory: str) -> None:
        """List a remote directory's files now (one request), so that the dataset carries their sizes and ETags
        to its worker processes; nothing for a local one."""
        if self.remote(directory):
            self._listing(directory)

    def _listing(self, directory: str) -> dict[str, tuple[int, str]]:
        """``{name: (size, ETag)}`` of a remote directory's files, listed once (files without an ETag left out)."""
        listed = self._listed.get(directory)
        if listed is None:
            listed = self._listed[directory] = _list_etags(self.backend(directory))
        return listed

    def names(self, directory: str) -> list[str]:
        """The names of the files directly in ``directory``, sorted."""
        return self.backend(directory).names()

    def expand(self, locations: str | Path | Sequence[str | Path], suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
        """``(directory, name)`` of each file: a file as given, a directory as its files ending in ``suffixes``, a
        name with ``*``, ``?`` or ``[...]`` as the files of its directory it matches (``data/train-*.arrow``); each
        sorted by name.

        Raises:
            FileNotFoundError: when a directory or pattern matches no such file, or nothing is given.
        """
        out: list[tuple[str, str]] = []
        for location in many(locations):
            directory, name = split_location(location)
            if any(c in name for c in "*?["):
                names = [n for n in self.names(directory) if fnmatch.fnmatchcase(n, name)]
                if not names:
                    raise FileNotFoundError(f"no file matches {self.where(directory, name)}")
                out.extend((directory, n) for n in names)
            elif self.is_dir(location):
                directory = location.rstrip("/")
                names = [n for n in self.names(directory) if n.endswith(suffixes)]
                if not names:
                    raise FileNotFoundError(f"no {'/'.join(suffixes)} file in {self.where(directory, '')}")
                out.extend((directory, n) for n in names)
            else:
                out.append(split_location(location))
        if not out:
            raise FileNotFoundError("no file given")
        return out

    def is_dir(self, location: str) -> bool:
        """True when ``location`` is a local directory, or a URL prefix (no file of its own)."""
        if is_url(location) and location.endswith("/"):
            return True
        return self.backend(location).is_dir()


def _list_etags(backend: CacheBackend) -> dict[str, tuple[int, str]]:
    """``{name: (size, ETag)}`` of the files directly under a remote backend's location, by one listing (empty
    when it fails)."""
    store = getattr(backend, "store", None)
    if store is None:
        return {}
    root = store.path("")

    def ls() -> list[Any]:
        store.fs.invalidate_cache()
        return store.fs.ls(root, detail=True)

    try:
        found = store.run("listing", "", ls)
    except (OSError, ValueError):
        return {}
    out = {}
    for info in found:
        if not isinstance(info, dict) or info.get("type") == "directory":
            continue
        etag, size = info.get("ETag") or info.get("etag"), info.get("size")
        if etag and isinstance(size, int):
            out[str(info.get("name", "")).rstrip("/").rsplit("/", 1)[-1]] = (size, str(etag))
    return out


def prefetch_files(files: Sequence[StoredFile | None], first: int = 0) -> None:
    """Fetch the remote ``files`` into the node cache ahead of their reads, in this order, by this process's
    prefetcher (replacing its plan; the first ``first`` files are what the next read needs), within its share of
    the node cache's prefetch bytes (``reading_processes``: the node's processes planning like this one); local
    ones (None, or files of a local backend) are left out."""
    remote = [f for f in files if isinstance(f, RemoteFile)]
    if remote:
        remote[0].backend.prefetch(remote, first=first, share=reading_processes())


def demand_files(files: Sequence[StoredFile | None]) -> None:
    """Ask for the remote ``files`` a read needs now that are not in the node cache yet, all at once (downloads in
    parallel, ahead of anything planned)."""
    for f in files:
        if isinstance(f, RemoteFile) and f.downloadable and f.backend.config.read_mode == "shards" and not f.present():
            f.backend.prefetcher.demand(f)


def many(locations: str | Path | Sequence[str | Path]) -> list[str]:
    """One location or several, as strings."""
    if isinstance(locations, (str, Path)):
        return [str(locations)]
    return [str(loc) for loc in locations]
