"""Types: the examples pass ``mypy --strict`` against torch_drt (found from the source tree, whatever the editable
install's mode: pyproject's ``[tool.mypy]``), and mypy sees the signatures behind the lazily loaded public names.
One mypy run checks both (mypy's start-up is most of its time)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WRONG = textwrap.dedent(
    """
    import torch_drt

    loader = torch_drt.StatefulDataLoader(list(range(10)), batch_size="8")
    """
)


@pytest.mark.timeout(900)  # mypy --strict over the examples and torch_drt: a minute on a quiet machine
def test_the_examples_pass_mypy_strict_and_a_wrong_call_through_the_lazy_face_is_caught(tmp_path):
    pytest.importorskip("mypy")
    examples = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))
    wrong = tmp_path / "wrong_call.py"
    wrong.write_text(WRONG)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), *examples, str(wrong)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert errors, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert all(line.startswith(str(wrong)) for line in errors), "\n".join(errors)
    assert any('Argument "batch_size" to "StatefulDataLoader" has incompatible type "str"' in e for e in errors), (
        "\n".join(errors)
    )
    assert f"in 1 file (checked {len(examples) + 1} source files)" in proc.stdout, proc.stdout[-2000:]
