"""The package is typed: py.typed ships, and the lazily loaded public names are visible to type checkers."""

from __future__ import annotations

import importlib.resources
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_py_typed_ships_with_the_package() -> None:
    assert importlib.resources.files("torch_drt").joinpath("py.typed").is_file()
    assert 'torch_drt = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_mypy_sees_the_lazy_loader_signature(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch_drt

            loader = torch_drt.StatefulDataLoader(list(range(10)), batch_size="8")
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports", "--no-incremental",
         str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={**os.environ, "MYPYPATH": str(ROOT)},  # mypy cannot see through an editable install's import hook
    )
    assert 'Argument "batch_size" to "StatefulDataLoader" has incompatible type "str"' in proc.stdout, proc.stdout


def test_the_library_logs_nothing_by_default() -> None:
    import torch_drt  # noqa: F401

    handlers = logging.getLogger("torch_drt").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
