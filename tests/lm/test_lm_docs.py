"""docs/language-models.md's pretraining example runs and checks itself (the page's blocks run in tests/docs/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(args, tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_pretraining_example_resumes_on_three_ranks_identically(tmp_path):
    out = run_python([str(ROOT / "examples" / "lm_pretraining.py"), str(tmp_path / "work")], tmp_path)
    assert "checkpoint after 4 steps on 2 ranks (16 sequences)" in out
    assert "resumed on 3 ranks: 40 sequences in all" in out and "identical to one rank: yes" in out
