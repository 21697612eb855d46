"""The package is typed: py.typed ships, and its hints hold (mypy over the package reports nothing; mypy on the lazy
face: tests/examples/test_examples_typed.py)."""

from __future__ import annotations

import importlib.resources
import logging
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_py_typed_ships_with_the_package() -> None:
    assert importlib.resources.files("torch_drt").joinpath("py.typed").is_file()
    assert 'torch_drt = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_the_library_logs_nothing_by_default() -> None:
    import torch_drt  # noqa: F401

    handlers = logging.getLogger("torch_drt").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


@pytest.mark.timeout(900)  # mypy over the package from an empty cache: half a minute on a quiet machine
def test_mypy_finds_nothing_in_the_package(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "torch_drt"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("Success: no issues found"), (
        proc.stdout[-8000:] + proc.stderr[-2000:]
    )
