"""docs/language-models.md: every code block runs as written; the pretraining example runs and checks itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "language-models.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def run_python(args, tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_page_has_code():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_code_block_runs(tmp_path, index):
    script = tmp_path / "block.py"
    script.write_text(BLOCKS[index])
    assert run_python([str(script)], tmp_path)


def test_pretraining_example_resumes_on_three_ranks_identically(tmp_path):
    out = run_python([str(ROOT / "examples" / "lm_pretraining.py"), str(tmp_path / "work")], tmp_path)
    assert "checkpoint after 4 steps on 2 ranks (16 sequences)" in out
    assert "resumed on 3 ranks: 40 sequences in all" in out and "identical to one rank: yes" in out
