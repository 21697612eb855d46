"""A docs page as one Python script: the extraction both docs harnesses use.

``python`` blocks run in page order in one interpreter (a page reads like a tutorial, later blocks use earlier
names), and ``bash``/``sh``/``console``/``shell`` blocks run as shell commands at their place in the page (``$ ``
prompts and comment lines are dropped). Blocks fenced as ``text`` (diagrams, layouts, sample output) are not code.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["SHELL", "blocks", "page_script"]

_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
SHELL = {"bash", "sh", "console", "shell"}


def blocks(page: Path) -> list[tuple[str, str]]:
    """The (language, code) of each fenced block of ``page``, in order."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(page.read_text())]


def page_script(page: Path) -> str | None:
    """The page as one Python script, or None when it has no code."""
    parts = []
    for lang, code in blocks(page):
        if lang == "python":
            parts.append(code)
        elif lang in SHELL:
            for line in code.splitlines():
                command = line.removeprefix("$ ").strip()
                if command and not command.startswith("#"):
                    parts.append(f"__import__('subprocess').run({command!r}, shell=True, check=True)\n")
    return "".join(parts) or None
