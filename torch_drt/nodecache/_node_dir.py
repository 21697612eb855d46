"""The node cache's directory on a shared machine: private to its user unless sharing was chosen.

Another local user must not be able to plant files the cache would serve, nor read what it holds (shards of
private buckets). The directory is created ``0700`` (files ``0600``); one found is used only when it is owned by
this user (a symbolic link too) and nobody else may write into it. A directory of this user readable by others
(as older releases created it) is made private. ``shared=True`` is the documented opt-in for a cache shared by
the users of one group: directories ``2770`` (setgid, so the group carries over), files ``0660``; the directory
may then belong to another user of the group, and it must still not be writable by others.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger("torch_drt.cache")

SUBDIRS = ("data", "tmp", "locks", "small")


def file_mode(shared: bool) -> int:
    """The mode the cache creates its files with."""
    return 0o660 if shared else 0o600


def _dir_mode(shared: bool) -> int:
    return 0o2770 if shared else 0o700


def _refuse(directory: Path, why: str, fix: str) -> PermissionError:
    return PermissionError(
        errno.EACCES,
        f"node cache {directory}: {why}; another user could plant the samples it serves or read what it holds. "
        f"{fix}, or choose another RemoteConfig(cache_dir=...) (or $TORCH_DRT_NODE_CACHE)",
    )


def _check(directory: Path, shared: bool) -> None:
    """Refuse a directory this user does not own (or, shared, that others may write); tighten a readable one."""
    uid = os.getuid()
    link = os.lstat(directory)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0):
        raise _refuse(directory, f"it is a symbolic link owned by uid {link.st_uid}", "Remove the link")
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(directory, "it is not a directory", "Remove it")
    if st.st_mode & stat.S_IWOTH:
        raise _refuse(directory, "others may write into it", "Check its contents, then `chmod o-w` it")
    if shared:
        if st.st_uid != uid and st.st_gid not in (os.getegid(), *os.getgroups()):
            raise _refuse(directory, f"it belongs to uid {st.st_uid} and group {st.st_gid}, not one of yours",
                          "Choose a directory of your group")
        return
    if st.st_uid != uid:
        raise _refuse(
            directory,
            f"it belongs to uid {st.st_uid}, not to this user (uid {uid})",
            "Remove it (or, to share one cache between users on purpose, use RemoteConfig(shared_node_cache=True))",
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IRWXO | stat.S_IRWXG):
        if st.st_mode & stat.S_IWGRP:
            raise _refuse(directory, "its group may write into it", "Check its contents, then `chmod 700` it")
        os.chmod(directory, 0o700)
        logger.info("node cache %s: made private (mode 0700)", directory)


def prepare(directory: Path, shared: bool) -> None:
    """Create ``directory`` and its subdirectories with the cache's modes, or check the ones found.

    Raises:
        PermissionError: a directory found that another user owns or may write (the message says what to do).
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    parent = os.stat(directory.parent)
    if not shared and parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX:
        raise _refuse(directory, f"others may rename or replace it: its parent {directory.parent} is writable by "
                      "others and not sticky", "Choose a directory under one only you can write (or a sticky one)")
    mode = _dir_mode(shared)
    for path in (directory, *(directory / sub for sub in SUBDIRS)):
        try:
            os.mkdir(path, mode)
            if shared:
                os.chmod(path, mode)  # the umask may have removed the group's bits
        except FileExistsError:
            _check(path, shared)
