"""Every example runs offline, as a user runs it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_train_cached(tmp_path):
    out = run(str(EXAMPLES / "train_cached.py"), str(tmp_path)).stdout.splitlines()
    assert out == ["torch.Size([8, 2]) torch.Size([8])"] * 4


def test_remote_images():
    assert "fetched, decoded and batched 96 tiles" in run(str(EXAMPLES / "remote_images.py")).stdout


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_torchrun_checkpoint_and_resume_at_another_world_size(tmp_path):
    script = str(EXAMPLES / "torchrun_resume.py")
    first = run("-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", _port(), script,
                str(tmp_path), "--stop-after", "3")
    assert "checkpoint after 3 steps on 2 ranks" in first.stdout
    second = run("-m", "torch.distributed.run", "--nproc_per_node", "3", "--master_port", _port(), script,
                 str(tmp_path), "--resume")
    assert "resumed on 3 ranks: 24 samples before, 36 after; every sample exactly once: yes" in second.stdout
