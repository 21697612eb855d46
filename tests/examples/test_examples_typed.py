"""The examples type-check with ``mypy --strict`` against torch_drt (found from the source tree, whatever the
editable install's mode: pyproject's ``[tool.mypy]``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_examples_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy")
    examples = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), *examples],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert f"Success: no issues found in {len(examples)} source files" in proc.stdout
