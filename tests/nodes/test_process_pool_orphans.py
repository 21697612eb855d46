"""Worker processes watch their pool's process: when it dies without closing them (killed, ``os._exit``), they
exit instead of waiting for tasks forever (torch's loader workers do the same)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from torch_drt._processes.pool import ProcessPool

    pool = ProcessPool(abs, 2, sys.argv[1], torch_threads=None)
    task = pool.submit(-7)
    assert pool.wait(task, 60) and pool.result(task) == 7
    with open(sys.argv[2], "w") as f:
        f.write(" ".join(map(str, pool.pids())))
    os._exit(0)  # dies without closing its pool: no daemon clean-up, no atexit
    """
)

EARLY = textwrap.dedent(  # the pool's process dies before its workers may have started
    """
    import os, sys
    from torch_drt._processes.pool import ProcessPool

    pool = ProcessPool(abs, 2, sys.argv[1], torch_threads=None)
    with open(sys.argv[2], "w") as f:
        f.write(" ".join(map(str, pool.pids())))
    os._exit(0)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("context, script", [("fork", SCRIPT), ("spawn", SCRIPT), ("fork", EARLY)],
                         ids=["fork", "spawn", "fork-before-the-workers-start"])
def test_workers_exit_when_their_pool_process_dies_without_closing_them(context, script, tmp_path):
    temp = tempfile.mkdtemp(prefix="orphans")  # the killed pool's process leaves its multiprocessing directory here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=temp)
    with open(tmp_path / "err", "w") as err:  # a file, not a pipe: orphans holding a pipe would block its reader
        code = subprocess.call([sys.executable, "-c", script, context, str(tmp_path / "pids")],
                               stdout=subprocess.DEVNULL, stderr=err, timeout=120, env=env)
    assert code == 0, (tmp_path / "err").read_text()
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60  # the bug: they waited for tasks forever
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if _alive(p)]
    for p in left:
        os.kill(p, 9)
    shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"worker processes {left} outlived their pool's process"
