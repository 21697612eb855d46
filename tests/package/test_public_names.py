"""``__all__`` marks what is public: only faces have one, sorted, and every name in it resolves.

Faces are package ``__init__`` modules, the top-level public modules (``torch_drt.lightning``, ``torch_drt.ray``, ...)
and the compat modules that mirror a seed's module paths (``torch_drt.compat.dataloader_rs.transforms``). Every
other module is an implementation detail: its names are imported from it by the package, not advertised by it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import torch_drt

ROOT = Path(torch_drt.__file__).parent


def _is_face(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    if path.name == "__init__.py":
        return True
    if path.name.startswith("_"):
        return False
    return len(rel.parts) == 1 or rel.parts[0] == "compat"


def _declares_all(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order (isort style): CONSTANTS, then Classes, then functions, each alphabetical."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = sorted(ROOT.rglob("*.py"))
FACES = [p for p in MODULES if _is_face(p) and _declares_all(p)]


def test_only_faces_declare_all():
    inner = [str(p.relative_to(ROOT)) for p in MODULES if not _is_face(p) and _declares_all(p)]
    assert inner == [], f"modules that are not faces declare __all__: {inner}"
    assert len(FACES) >= 20  # the package faces are found at all


@pytest.mark.parametrize("path", FACES, ids=lambda p: _module_name(p))
def test_a_faces_all_is_sorted_unique_and_resolves(path: Path):
    module = importlib.import_module(_module_name(path))
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_key), f"{module.__name__}.__all__ is not sorted"
    assert len(names) == len(set(names)), f"{module.__name__}.__all__ repeats a name"
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{module.__name__}.__all__ names what it does not have: {missing}"
