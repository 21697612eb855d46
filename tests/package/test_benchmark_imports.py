"""Every name a benchmark script imports from a sibling helper module (``benchmarks/_*.py``) exists there.

The scripts need peers, servers or valgrind to run, so a helper's renamed or moved name would otherwise show only
when someone runs the benchmark.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _sibling_imports() -> list[tuple[str, str, str]]:
    found = []
    for script in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text(), str(script))):
            if isinstance(node, ast.ImportFrom) and node.module and (BENCHMARKS / f"{node.module}.py").exists():
                found += [(script.name, node.module, alias.name) for alias in node.names]
    return found


def test_the_scripts_import_from_their_helpers():
    assert {module for _, module, _ in _sibling_imports()} >= {"_common", "_ints_workload", "_stats_workload"}


@pytest.mark.parametrize(("script", "module", "name"), _sibling_imports())
def test_each_imported_name_exists(script, module, name, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    helper = importlib.import_module(module)
    assert hasattr(helper, name), f"benchmarks/{script} imports {name} from {module}, which has no such name"
    assert sys.modules[module].__file__ == str(BENCHMARKS / f"{module}.py")
