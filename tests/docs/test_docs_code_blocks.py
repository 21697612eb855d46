"""Every code block in docs/ runs as written.

A page becomes one Python script (``doc_pages.page_script``): ``python`` blocks run in page order in one
interpreter (a page reads like a tutorial, later blocks use earlier names), and ``bash``/``sh``/``console`` blocks
run as shell commands at their place in the page (``$ `` prompts are stripped). Blocks fenced as ``text``
(diagrams, layouts, sample output) are not code. An untagged fence is refused: say what a block is. Pages that
need servers start them themselves (``remote-caches.md`` starts moto's S3 server on loopback). Where a page prints
results it states in comments, ``PRINTED`` holds what its output must contain.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_pages import blocks, page_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PRINTED = {
    "index.md": ["['broken_v1'] [PosixPath('caches/records_v1')]"],
    "remote-caches.md": ["s3://datasets/caches/images", "CacheWriteError True", "ok      s3://datasets/caches/images",
                         "2000 64"],
}


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
    missing = [text for text in PRINTED.get(page.name, []) if text not in proc.stdout]
    assert not missing, f"{page.name} did not print {missing}:\n{proc.stdout[-3000:]}"
