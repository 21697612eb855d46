"""The picture on "Is data loading my bottleneck?" is the demo's profile as ``torch-drt profile`` draws it today.

Pixels differ from run to run (timings), so the check is on what the picture names: its legend's stages and its
panels' workers, kept in the PNG's text chunks by ``draw_profile``. A fresh, short profile of the demo's loader
(``torch_drt.demo:loader`` on a small cache) must draw the same names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torch_drt import demo
from torch_drt._cli_profile import draw_profile, picture_names, profile_loader

pytest.importorskip("matplotlib")

DOCS = Path(__file__).resolve().parents[2] / "docs"
PICTURE = DOCS / "bottleneck-demo.png"


def test_the_page_shows_the_demo_picture_and_it_is_small():
    page = (DOCS / "bottleneck.md").read_text()
    assert re.search(r"!\[[^\]]*\]\(bottleneck-demo\.png\)", page)
    assert "torch-drt profile torch_drt.demo:loader" in page  # how the picture was made
    assert PICTURE.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert PICTURE.stat().st_size < 200_000


def test_the_picture_names_what_the_profile_of_the_demo_draws_today(tmp_path):
    loader = demo.loader(tmp_path / "demo", n=256, batch_size=64, workers=2)
    try:
        _, timeline = profile_loader(loader, 6)  # over two epochs of 4 batches
    finally:
        loader.close()
    fig = draw_profile(timeline, tmp_path / "now.png")
    legend = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    today = picture_names(tmp_path / "now.png")
    assert today["stages"] == legend and "transform" in legend  # the demo decodes in its transform
    assert today["workers"] == ["main", "0", "1"]
    assert picture_names(PICTURE) == today
