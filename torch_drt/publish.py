"""Publishing a directory atomically: staging directories, the per-name publish lock, durable writes.

Every on-disk store of torch_drt (sample caches, token streams, document storages) is written the same way: into
a hidden staging directory beside its target, each file fsynced, then renamed into place under a per-name lock,
so a reader sees either nothing or the complete directory. A writer holds an advisory lock on its staging
directory for as long as it lives, so a later writer of the same name can tell an abandoned one (its lock is
free) from a live one, whatever the pid says (where a file system has no ``flock`` on directories, the pid in
the name decides).

Names: ``ROOT/.staging-<pid>-<12 hex>-<name>`` (the name comes last and the fields before it have fixed
alphabets, so ``ds`` and ``ds-999999`` never match each other), ``ROOT/.<name>.lock`` and, for a directory moved
out of the way, ``ROOT/.invalid-<name>-<time>-<6 hex>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_drt._scratch import lock_is_free
from torch_drt.describe import described

__all__ = [
    "StagingDir",
    "fsync_dir",
    "fsync_path",
    "fsync_paths",
    "move_aside",
    "publish_lock",
    "remove_stale_staging",
    "staging_name_of",
    "sync_and_close",
    "write_json_atomic",
]

logger = logging.getLogger("torch_drt.publish")

_STAGING = re.compile(r"^\.staging-(\d+)-([0-9a-f]{12})-(.+)$")


def staging_name_of(entry: str) -> str | None:
    """The target name a staging directory entry belongs to, or None when ``entry`` is no staging directory."""
    match = _STAGING.match(entry)
    return match.group(3) if match else None


def sync_and_close(fd: int) -> None:
    """fsync ``fd`` and close it (closed even when the sync fails, whose error is raised)."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path, flags: int = 0) -> None:
    """fsync a file or a directory (opened read-only, with ``flags`` added): the one sync by path."""
    sync_and_close(os.open(path, os.O_RDONLY | flags))


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and new entries in it are durable."""
    fsync_path(path, os.O_DIRECTORY)


def fsync_paths(paths: Sequence[Path]) -> None:
    """fsync files and directories all at once, one thread each, and return once every one is durable.

    Synced together, they share the file system's journal commits (ext4 and XFS commit concurrent syncs as one)
    instead of paying one commit each; the first failure is raised after every sync ended.
    """
    if len(paths) < 2:
        for path in paths:
            fsync_path(path)
        return
    with ThreadPoolExecutor(max_workers=len(paths), thread_name_prefix="torch_drt-fsync") as pool:
        futures = [pool.submit(fsync_path, path) for path in paths]
    for future in futures:
        future.result()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file, fsync and rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def publish_lock(root: Path, name: str) -> Iterator[None]:
    """Hold an exclusive advisory lock for publishing ``name`` under ``root`` (processes on one host)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _writer_gone(path: Path) -> bool:
    """True when the writer of staging directory ``path`` is gone: its lock is free (or, on a file system
    without ``flock`` on directories, its pid no longer runs)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        free = lock_is_free(fd)
    finally:
        os.close(fd)  # closing drops the probe's lock too
    if free is None:  # e.g. NFS: no flock on a read-only descriptor; the name's pid decides
        match = _STAGING.match(path.name)
        return match is not None and not _pid_alive(int(match.group(1)))
    return free


def remove_stale_staging(root: Path, name: str) -> list[Path]:
    """Delete the staging directories of exactly ``name`` whose writer is gone; return them.

    Call it under ``publish_lock``: a staging directory is never published, so removing an abandoned one
    cannot lose data.
    """
    removed: list[Path] = []
    try:  # names only (a set directory holds every part: no Path per entry), staging ones matched by prefix first
        with os.scandir(root) as listing:
            names = [e.name for e in listing if e.name.startswith(".staging-") and e.name.endswith(name)]
    except OSError:
        return removed
    for entry in (root / n for n in names):
        if staging_name_of(entry.name) == name and entry.is_dir() and _writer_gone(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def move_aside(path: Path) -> Path:
    """Rename an invalid directory (or file) out of the way (kept, never deleted) and return its new path."""
    aside = path.with_name(f".invalid-{path.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
    os.rename(path, aside)
    logger.warning("moved invalid cache directory %s aside to %s", path, aside)
    return aside


class StagingDir:
    """A fresh hidden directory beside ``root/name``, locked while this object lives, published by rename.

    It is made and locked under ``publish_lock(root, name)``: a cleanup (``remove_stale_staging``, called under
    that lock) never sees it made and not yet locked. Do not make one while holding that lock.

    Args:
        root: the directory that will hold ``name`` (created when missing).
        name: the target's name (one path component).
    """

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = Path(root), name
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / f".staging-{os.getpid()}-{uuid.uuid4().hex[:12]}-{name}"
        with publish_lock(self.root, name):  # a cleanup (under the lock) must not see it made and not yet locked
            self.path.mkdir()
            self._fd: int | None = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            with contextlib.suppress(OSError):  # no flock here (NFS): the pid in the name tells instead
                fcntl.flock(self._fd, fcntl.LOCK_EX)

    @property
    def target(self) -> Path:
        """Where ``publish`` puts the directory."""
        return self.root / self.name

    def publish(self, sync_root: bool = True, *, durable: bool = True, synced: bool = False) -> Path:
        """Fsync the staging directory, rename it to ``root/name`` and fsync ``root``. Call under ``publish_lock``.

        Args:
            sync_root: False leaves out the sync of ``root`` after the rename: the directory is published whole or
                not at all either way, but a crash may then undo the rename (the target is absent again); for a
                caller that syncs ``root`` itself before anything depends on it (a set build, once for every part).
            durable: False syncs neither directory (a scratch store whose files were not synced either: an
                operating-system crash may leave it incomplete; see ``WriterConfig.durable``).
            synced: the caller synced the staging directory after its last entry was made (the cache writer syncs
                it together with its files), so it is not synced again: one device flush less before the rename.

        Raises:
            OSError: when the rename fails (for instance a non-empty directory is already at the target).
        """
        if durable and not synced:
            fsync_dir(self.path)
        os.rename(self.path, self.target)
        logger.info("published %s", self.target)
        if sync_root and durable:
            fsync_dir(self.root)
        self._release()
        return self.target

    def discard(self) -> None:
        """Remove the staging directory (after a failure, or when another writer published first)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StagingDir:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:  # neither published nor discarded: the write failed
            self.discard()

    def __repr__(self) -> str:
        return described(self, str(self.path))
