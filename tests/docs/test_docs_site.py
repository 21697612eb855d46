"""The documentation site builds with mkdocs --strict (broken links and docstring problems fail)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict_has_no_warnings(tmp_path):
    """The build log is read, not silenced: any WARNING (griffe on a docstring, a link, an anchor) fails the test."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    # the log is really captured (INFO lines come through), so a warning cannot hide behind a quiet flag
    assert "Documentation built" in log or proc.returncode != 0, log
    problems = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert problems == [], "\n".join(problems)
    assert proc.returncode == 0, log
    assert (tmp_path / "site" / "api" / "index.html").exists()
    shutil.rmtree(tmp_path / "site")


def test_every_docs_page_is_in_the_nav():
    import yaml

    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == {p for p in pages if p in nav}, sorted(p for p in pages if p not in nav)
    assert yaml.safe_load(nav.replace("!!python", ""))["strict"] is True
