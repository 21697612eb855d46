"""The first hour: from a fresh clone, the README's quick-start snippet runs as written, and its failure path raises
the documented exception (``CacheSourcesError``, caught by the snippet's own ``except``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BROKEN = '''
class Broken:
    name = "broken_v1"
    def __iter__(self):
        yield drt.CacheInput(data=b"x", metadata={"label": 0})
        raise OSError("the disk went away")
'''


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    target = tmp_path_factory.mktemp("first-hour") / "torch_drt"
    proc = subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(target)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return target


def _snippet(clone: Path) -> str:
    readme = (clone / "README.md").read_text()
    match = re.search(r"## In a few lines\n\n```python\n(.*?)```", readme, re.S)
    assert match, "the README has no quick-start snippet"
    return match.group(1)


def _run(code: str, clone: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(clone)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_readme_snippet_runs_as_written_from_a_fresh_clone(clone, tmp_path):
    code = _snippet(clone) + "print('samples', sum(len(batch) for batch in loader))\nprint(drt.__file__)\n"
    proc = _run(code, clone, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "samples 500"  # the labels below 5: half of the 1000 samples
    assert lines[1].startswith(str(clone))  # the clone's torch_drt, not an installed one
    assert (tmp_path / "caches" / "numbers_v1" / "manifest.json").exists()


def test_the_readme_snippets_failure_path_raises_the_documented_exception(clone, tmp_path):
    snippet = _snippet(clone)
    assert "except drt.CacheSourcesError" in snippet
    code = snippet.replace("import torch_drt as drt\n", "import torch_drt as drt\n" + BROKEN, 1)
    code = code.replace("from_cache_sources(Numbers()", "from_cache_sources(Broken()", 1)
    assert "Broken()" in code
    proc = _run(code, clone, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr  # the snippet's own except caught it
    last = proc.stderr.strip().splitlines()[-1]  # after the writer's progress bar
    assert last.startswith("no dataset: 1 of 1 sources have no cache (broken_v1: OSError: the disk went away"), last
