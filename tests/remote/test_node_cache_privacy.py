"""The node cache on a shared machine (issue 22): private to its user, never planted by another one.

Another user is a real process of another uid (the tests run as root in CI and switch a forked child to
``nobody``); the checks that need no second user run for any user.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_fixtures import moto_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt.nodecache.node_cache import NodeCache

NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="another user's files need root to be made")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def as_other_user(fn, *args, gid: int = NOBODY) -> None:
    """Run ``fn(*args)`` in a forked child switched to uid ``nobody`` and ``gid`` (a real other local user)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(NOBODY)
            fn(*args)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def plant(directory: str) -> None:
    """What an attacker does first: create the victim's node cache and put a manifest there."""
    os.makedirs(f"{directory}/small", mode=0o755)
    Path(f"{directory}/small/manifest.json").write_text('{"planted": true}')


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A world-writable sticky directory that every user can reach, as /tmp is."""
    public = Path(tempfile.mkdtemp(prefix="drt-public-"))
    public.chmod(0o1777)
    yield public
    shutil.rmtree(public, ignore_errors=True)


def test_a_new_node_cache_is_private(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=1 << 20)
    cache.fetch("sha256-a", 3, lambda fd: os.pwrite(fd, b"abc", 0), lambda p: None, "s3://b/a")
    cache.small("manifest.json", 60, lambda: b"{}")
    assert mode(tmp_path / "n") == 0o700
    assert all(mode(tmp_path / "n" / sub) == 0o700 for sub in ("data", "tmp", "locks", "small"))
    files = [p for p in (tmp_path / "n").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"sha256-a", "manifest.json", "sha256-a.lock", ".space.lock"}
    assert {mode(p) for p in files} == {0o600}


def test_an_own_directory_readable_by_others_is_made_private(tmp_path):
    old = tmp_path / "n"
    for sub in ("data", "tmp", "locks", "small"):
        (old / sub).mkdir(parents=True)
    for path in (old, *old.iterdir()):
        path.chmod(0o755)  # as earlier releases left it
    NodeCache(old, limit=1 << 20)
    assert mode(old) == 0o700 and mode(old / "data") == 0o700


@pytest.mark.parametrize("bits", [0o777, 0o775])
def test_a_directory_others_may_write_is_refused(tmp_path, bits):
    (tmp_path / "n").mkdir()
    (tmp_path / "n").chmod(bits)
    with pytest.raises(PermissionError, match="may write into it"):
        NodeCache(tmp_path / "n", limit=1 << 20)


@as_root
def test_a_cache_planted_by_another_user_is_refused(public_tmp):
    victim = public_tmp / f"torch_drt-node-cache-{os.getuid()}"
    as_other_user(plant, str(victim))
    with pytest.raises(PermissionError, match=f"belongs to uid {NOBODY}.*shared_node_cache"):
        NodeCache(victim, limit=1 << 20)
    assert not (victim / "data").exists()  # nothing was written into it


@as_root
def test_a_planted_symlink_is_refused(public_tmp, tmp_path):
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = public_tmp / "cache"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="symbolic link owned by uid"):
        NodeCache(link, limit=1 << 20)


@as_root
def test_a_cache_shared_on_purpose_is_the_groups(public_tmp):
    shared = public_tmp / "team-cache"
    as_other_user(os.mkdir, str(shared), 0o2770, gid=os.getgid())  # another member of this user's group
    with pytest.raises(PermissionError, match="belongs to uid"):
        NodeCache(shared, limit=1 << 20)  # not without the opt-in
    cache = NodeCache(shared, limit=1 << 20, group=True)
    cache.fetch("sha256-a", 3, lambda fd: os.pwrite(fd, b"abc", 0), lambda p: None, "s3://b/a")
    assert mode(cache.path("sha256-a")) == 0o660


@as_root
def test_a_remote_cache_is_not_read_through_a_planted_node_cache(tmp_path, public_tmp, moto_endpoint):
    from remote_servers import s3_options

    _, url = publish_local(drt.DatasetRuntime(1), tmp_path, moto_endpoint, n=20)
    planted = public_tmp / "node-cache"
    as_other_user(plant, str(planted))
    config = remote_config(tmp_path, cache_dir=str(planted))
    with pytest.raises(PermissionError, match=f"node cache {planted}: it belongs to uid {NOBODY}"):
        drt.DatasetRuntime(1).cached_dataset(url, reader_config=drt.ReaderConfig(seed=0),
                                             storage_options=s3_options(moto_endpoint), remote_config=config)


def test_a_directory_in_a_parent_others_may_write_is_refused(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # not sticky: anyone could rename the cache away and put theirs in its place
    with pytest.raises(PermissionError, match=r"its parent .* is writable by others and not sticky"):
        NodeCache(parent / "n", limit=1 << 20)
    parent.chmod(0o1777)  # sticky, as /tmp: entries can only be renamed by their owner
    NodeCache(parent / "n", limit=1 << 20)


def test_a_lock_that_is_a_link_is_not_followed(tmp_path):
    cache = NodeCache(tmp_path / "n", limit=1 << 20, group=True)
    victim = tmp_path / "id_rsa"
    victim.write_text("secret")
    victim.chmod(0o600)
    (tmp_path / "n" / "locks" / "sha256-a.lock").symlink_to(victim)  # planted by another member of the group
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        cache.fetch("sha256-a", 3, lambda fd: os.pwrite(fd, b"abc", 0), lambda p: None, "s3://b/a")
    assert mode(victim) == 0o600 and victim.read_text() == "secret"
