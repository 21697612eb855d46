"""Every code block in docs/ runs as written.

A page becomes one Python script: ``python`` blocks run in page order in one interpreter (a page reads like a
tutorial, later blocks use earlier names), and ``bash``/``sh``/``console`` blocks run as shell commands at their
place in the page (``$ `` prompts are stripped). Blocks fenced as ``text`` (diagrams, layouts, sample output) are
not code. An untagged fence is refused: say what a block is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
_SHELL = {"bash", "sh", "console", "shell"}


def blocks(page: Path) -> list[tuple[str, str]]:
    """The (language, code) of each fenced block of ``page``, in order."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(page.read_text())]


def page_script(page: Path) -> str | None:
    """The page as one Python script, or None when it has no code."""
    parts = []
    for lang, code in blocks(page):
        if lang == "python":
            parts.append(code)
        elif lang in _SHELL:
            for line in code.splitlines():
                command = line.removeprefix("$ ").strip()
                if command and not command.startswith("#"):
                    parts.append(f"__import__('subprocess').run({command!r}, shell=True, check=True)\n")
    return "".join(parts) or None


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_every_fence_says_what_it_is(page: Path) -> None:
    untagged = [code.splitlines()[0] if code else "" for lang, code in blocks(page) if not lang]
    assert not untagged, f"{page.name}: tag these blocks (python, bash, text): {untagged}"


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_code_blocks_run(page: Path, tmp_path: Path) -> None:
    script = page_script(page)
    if script is None:
        pytest.skip("no code on this page")
    (tmp_path / "page.py").write_text(script)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "page.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, f"{page.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
