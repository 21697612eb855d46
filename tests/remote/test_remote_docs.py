"""The S3 training example publishes, streams, checkpoints and resumes on an empty node cache identically (the page
docs/remote-caches.md itself runs in tests/docs/test_docs_code_blocks.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=280, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_the_s3_training_example(tmp_path):
    pytest.importorskip("moto.server")
    proc = _run([str(ROOT / "examples" / "train_from_s3.py"), str(tmp_path / "work")], tmp_path)
    out = proc.stdout
    assert proc.stderr == "", proc.stderr[-3000:]  # its own four lines only: no server access log
    assert out.count("\n") == 4
    assert "published s3://training/caches/points" in out
    assert re.search(r"resumed on node B: the same \d+ batches: yes", out) and "accuracy 1.00" in out
