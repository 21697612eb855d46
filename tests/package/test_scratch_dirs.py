"""Scratch directories left by processes that could not remove them (killed, or ended by ``os._exit``) are removed
by the next one of their kind; a live process's, a directory being created, a link and another user's are not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torch_drt._scratch import MARKER, ScratchDir

PREFIX = "torch_drt-test-"


def _child(code: str, tmp: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True, **kwargs)


def _killed_owner(tmp: Path) -> Path:
    """The directory of a process that made one and was killed."""
    child = _child(f"""
        import os, signal
        from torch_drt._scratch import ScratchDir
        scratch = ScratchDir({PREFIX!r})
        print(scratch.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """, tmp)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == -9
    return Path(out.strip())


def test_a_killed_owners_directory_goes_with_the_next_one_and_a_live_ones_stays(tmp_path):
    left = _killed_owner(tmp_path)
    (left / "staged.bin").write_bytes(b"x" * 1000)
    live = _child(f"""
        import sys
        from torch_drt._scratch import ScratchDir
        scratch = ScratchDir({PREFIX!r})
        print(scratch.path, flush=True)
        sys.stdin.read()  # alive until the test closes stdin
    """, tmp_path)
    try:
        live_dir = Path(live.stdout.readline().strip())
        creating = tmp_path / f"{PREFIX}abcd1234"  # made, its lock and marker not yet: never taken for abandoned
        creating.mkdir()
        with ScratchDir(PREFIX, tmp_path) as new:
            assert not left.exists()
            assert live_dir.is_dir() and (live_dir / MARKER).is_file() and creating.is_dir()
            assert new.path.is_dir() and new.path.parent == tmp_path and oct(new.path.stat().st_mode)[-3:] == "700"
        assert not new.path.exists()
    finally:
        live.communicate("", timeout=120)
    assert live.returncode == 0 and not live_dir.exists()  # removed at its owner's normal exit


def test_links_and_other_users_directories_are_not_touched(tmp_path):
    left = _killed_owner(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    left.rename(elsewhere)  # an abandoned scratch directory, reached through a link with a matching name
    link = tmp_path / f"{PREFIX}link0000"
    link.symlink_to(elsewhere)
    others = None
    if os.getuid() == 0:  # root can make a directory that belongs to someone else
        others = _killed_owner(tmp_path)
        os.chown(others, 12345, 12345)
    ScratchDir(PREFIX, tmp_path).close()
    assert link.is_symlink() and (elsewhere / MARKER).is_file()
    assert others is None or others.is_dir()


def test_a_forked_child_that_exits_leaves_its_parents_directory(tmp_path):
    child = _child(f"""
        import os, sys
        from torch_drt._scratch import ScratchDir
        scratch = ScratchDir({PREFIX!r})
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a normal exit: its finalizers run, with its copy of the object
        os.waitpid(pid, 0)
        print(scratch.path.is_dir(), flush=True)
    """, tmp_path)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0 and out.strip() == "True"
    assert not list(tmp_path.glob(f"{PREFIX}*"))  # and the parent's own exit removed it


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_left_by_a_process_that_ended_with_os_exit_is_removed_by_the_next_loader(make_cache, tmp_path,
                                                                                         workers):
    path = make_cache(n=20)
    code = f"""
        import os, sys
        import torch_drt as drt
        dataset = drt.DatasetRuntime(1).cached_dataset([{str(path)!r}], reader_config=drt.ReaderConfig(seed=0))
        loader = dataset.to_torch_dataloader(batch_size=4, num_workers={workers}, collate_fn=list)
        next(iter(loader))
        print(loader.snapshot_path, flush=True)
        sys.stdout.flush()
        os._exit(0) if sys.argv[-1] == "exit" else loader.close()
    """
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    first = _child(code.replace('sys.argv[-1] == "exit"', "True"), scratch)
    out, _ = first.communicate(timeout=120)
    left = Path(out.strip()).parent
    assert first.returncode == 0 and left.is_dir() and left.name.startswith("torch_drt-loader-")
    second = _child(code.replace('sys.argv[-1] == "exit"', "False"), scratch)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and not left.exists()
    assert not list(scratch.glob("torch_drt-loader-*"))  # the second one's went with it
