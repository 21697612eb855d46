"""docs/building.md runs as written (every block, in order, in one empty directory) and so does its example."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # `python` is this one
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_every_block_of_the_building_page_runs(tmp_path):
    blocks = BLOCK.findall((ROOT / "docs" / "building.md").read_text())
    kinds = [kind for kind, _ in blocks]
    assert kinds.count("python") >= 5 and "bash" in kinds
    for number, (kind, code) in enumerate(blocks):
        command = [sys.executable, "-c", code] if kind == "python" else ["bash", "-euo", "pipefail", "-c", code]
        proc = subprocess.run(command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"block {number} ({kind}):\n{code}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    assert (tmp_path / "caches" / "photos" / "cacheset.json").exists()


def test_the_build_example(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "build_cache_set.py"), str(tmp_path)],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"published set images at {tmp_path / 'images'}: 600 samples in 4 written parts"
    assert lines[1].startswith("first run: part retry-00002, input row 321: ValueError: truncated JPEG (raised at ")
    assert lines[2] == "rerun: retry-00000 reused, retry-00001 reused, retry-00002 written, retry-00003 reused"
    assert lines[3] == "set images: 600 samples in 4 parts; first is (32, 32) label {'label': 0}"
