"""The example of docs/building.md runs (the page's own blocks run in tests/docs/test_docs_code_blocks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # `python` is this one
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_the_build_example(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "build_cache_set.py"), str(tmp_path)],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"published set images at {tmp_path / 'images'}: 600 samples in 4 written parts"
    assert lines[1].startswith("first run: part retry-00002, input row 321: ValueError: truncated JPEG (raised at ")
    assert lines[2] == "rerun: retry-00000 reused, retry-00001 reused, retry-00002 written, retry-00003 reused"
    assert lines[3] == "set images: 600 samples in 4 parts; first is (32, 32) label {'label': 0}"
