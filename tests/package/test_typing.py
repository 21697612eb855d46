"""The package is typed: py.typed ships (mypy on the lazy face: tests/examples/test_examples_typed.py)."""

from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_py_typed_ships_with_the_package() -> None:
    assert importlib.resources.files("torch_drt").joinpath("py.typed").is_file()
    assert 'torch_drt = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_the_library_logs_nothing_by_default() -> None:
    import torch_drt  # noqa: F401

    handlers = logging.getLogger("torch_drt").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
