"""Staging directories, the per-name publish lock and the atomic rename that makes a cache visible."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["fsync_dir", "move_aside", "new_staging_dir", "publish_lock", "remove_stale_staging"]

logger = logging.getLogger("torch_drt.cache")

_STAGING = ".staging-"


def new_staging_dir(root: Path, name: str) -> Path:
    """Create and return a fresh hidden staging directory for ``name`` under ``root``.

    Its name carries the writer's pid so that a later writer can tell an abandoned one (its writer died).
    """
    path = root / f"{_STAGING}{name}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    path.mkdir(parents=True)
    return path


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


def remove_stale_staging(root: Path, name: str) -> list[Path]:
    """Delete staging directories of ``name`` whose writer process no longer runs; return them.

    Call it under ``publish_lock``: a staging directory is never published, so removing an abandoned one
    cannot lose a cache.
    """
    removed = []
    prefix = f"{_STAGING}{name}-"
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if not entry.name.startswith(prefix):
            continue
        pid_part = entry.name[len(prefix) :].split("-", 1)[0]
        if pid_part.isdigit() and not _pid_alive(int(pid_part)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def move_aside(path: Path) -> Path:
    """Rename an invalid directory out of the way (kept, never deleted) and return its new path."""
    aside = path.with_name(f".invalid-{path.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
    os.rename(path, aside)
    logger.warning("moved invalid cache directory %s aside to %s", path, aside)
    return aside


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and new entries in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
