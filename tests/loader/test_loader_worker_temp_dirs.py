"""A worker process that is killed (a busy worker when its iterator is dropped) leaves no ``multiprocessing``
temporary directory behind: torch's tensors sent through file descriptors start a listener socket in the sending
process's ``pymp-*`` directory, which a killed process cannot remove. Workers use their pool's process's directory,
removed when that process exits (``_processes.handle.temp_dir``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from script_runner import script_env

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import gc, sys
import torch
import torch_drt

class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.tensor([i])  # small: sent as torch sends tensors (a file descriptor), not through the ring

if __name__ == "__main__":
    loader = torch_drt.StatefulDataLoader(Items(), batch_size=4, num_workers=2, multiprocessing_context=sys.argv[1])
    for _ in range(3):
        it = iter(loader)
        assert next(it).tolist() == [[0], [1], [2], [3]]
        del it  # the workers are busy with the next batches: they are killed
        gc.collect()
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_killed_workers_leave_no_temporary_directory(tmp_path, context):
    temp = Path(tempfile.mkdtemp(prefix="td"))  # short: a socket's path there must fit AF_UNIX's 108 bytes
    try:
        script = tmp_path / "drop_iterators.py"  # (a file: spawned workers import the dataset's class from it)
        script.write_text(textwrap.dedent(SCRIPT))
        done = subprocess.run([sys.executable, str(script), context], env={**script_env(), "TMPDIR": str(temp)},
                              capture_output=True, text=True, timeout=150)
        assert done.returncode == 0, done.stderr[-3000:]
        assert sorted(p.name for p in temp.iterdir()) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)
