"""Clear node-cache errors: a full disk while a manifest copy is stored names the local file and the URL and leaves
nothing; a file of a cache two users share that one of them did not share is a PermissionError saying what to do."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from torch_drt.nodecache.node_cache import NodeCache

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
URL = "s3://bucket/caches/images/manifest.json"


def _tmpfs_runner() -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return ["unshare", "-rm"] if probe.returncode == 0 else None


def test_a_full_disk_while_a_manifest_copy_is_stored_is_named_and_leaves_nothing(tmp_path):
    runner = _tmpfs_runner()
    if runner is None:
        pytest.skip("no user namespaces here to mount a small tmpfs")
    small = tmp_path / "small"
    small.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(textwrap.dedent(f"""
        import errno, os
        from torch_drt.nodecache.node_cache import NodeCache
        cache = NodeCache({str(small / "node")!r}, 1 << 20)
        fd = os.open({str(small / "filler")!r}, os.O_WRONLY | os.O_CREAT)  # the disk fills up (another job, say)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError:
            os.close(fd)
        try:
            cache.small("m", 60.0, lambda: b"{{}}" * 20000, {URL!r})
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            print("ERROR", e)
        print("SMALL", sorted(os.listdir({str(small / "node" / "small")!r})))
    """))
    command = f"mount -t tmpfs -o size=65536 none {small} && {sys.executable} {script}"
    proc = subprocess.run([*runner, "sh", "-c", command], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert "ERROR" in lines, proc.stdout
    assert "no space left" in lines["ERROR"] and URL in lines["ERROR"], lines["ERROR"]
    assert str(small / "node" / "small" / "m") in lines["ERROR"]
    assert lines["SMALL"] == "[]"  # no partial copy left behind
    assert errno.ENOSPC


def _fetch_as_member(directory: str, out: str) -> None:
    """In a forked child: a member of the directory's group (another user) fetches a file there."""
    os.setgroups([])
    os.setgid(0)
    os.setuid(NOBODY)
    cache = NodeCache(directory, 1 << 20, group=True)
    try:
        cache.fetch("sha256-k", 3, lambda fd: os.pwrite(fd, b"abc", 0), lambda path: None, "s3://b/k")
    except PermissionError as e:
        Path(out).write_text(f"PermissionError {e}")
    except Exception as e:
        Path(out).write_text(f"{type(e).__name__} {e}")
    else:
        Path(out).write_text("ok")


def test_a_file_another_user_did_not_share_is_a_clear_error():
    root = Path(tempfile.mkdtemp(prefix="drt-shared-"))  # under /tmp: every user reaches it
    try:
        _not_shared(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _not_shared(root: Path) -> None:
    root.chmod(0o755)
    directory = root / "shared"
    NodeCache(directory, 1 << 20, group=True)  # a cache shared by group 0 on purpose
    lock = directory / "locks" / "sha256-k.lock"
    lock.write_bytes(b"")
    lock.chmod(0o600)  # made by a user who does not share (an older release, or without shared_node_cache)
    out = root / "out"
    out.touch()
    out.chmod(0o666)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _fetch_as_member(str(directory), str(out))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    text = out.read_text()
    assert text.startswith("PermissionError"), text
    assert str(lock) in text and "shared_node_cache=True" in text and "cache_dir" in text, text
