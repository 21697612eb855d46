"""Every line of ``tests/slow_tier.txt`` still names a test, so a rename cannot silently move a test back."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from conftest import slow_tier

ROOT = Path(__file__).resolve().parents[2]


@cache
def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_each_slow_tier_line_names_a_test_function():
    tier = slow_tier()
    assert len(tier) > 50
    missing = []
    for test_id in sorted(tier):
        file, _, rest = test_id.partition("::")
        name = rest.split("[")[0].split("::")[-1]
        path = ROOT / file
        if not path.is_file() or name not in _test_names(path):
            missing.append(test_id)
    assert missing == [], f"tests/slow_tier.txt names tests that do not exist: {missing}"

