"""``torch-drt profile`` (issue 28): the table and verdict of N batches, a PNG whose legend names the stages."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

import torch_drt as drt
from torch_drt._cli_profile import draw_profile, picture_names, profile_loader
from torch_drt.cli import main

pytest.importorskip("matplotlib")

FACTORY = textwrap.dedent(
    """
    import time
    from torch_drt import StatefulDataLoader

    class Ints:
        def __len__(self):
            return 40

        def __getitem__(self, i):
            return i

    def slow_collate(items):
        time.sleep(0.02)
        return list(items)

    def make():
        return StatefulDataLoader(Ints(), batch_size=4, collate_fn=slow_collate, num_workers=2,
                                  worker_method="thread")

    def not_a_loader():
        return [1, 2]
    """
)


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "profile_factory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "profile_factory"
    sys.modules.pop("profile_factory", None)


def test_a_factory_is_profiled_with_a_picture_and_a_verdict(factory_module, tmp_path, capsys):
    png, out = tmp_path / "out.png", tmp_path / "out.json"
    assert main(["profile", f"{factory_module}:make", "--batches", "15", "--png", str(png), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "input-bound" in printed and " collate " in printed  # the verdict names the slow stage
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(out.read_text())
    assert saved["stats"]["batches"] == 15 and "collate" in saved["verdict"]
    assert len(saved["timeline"]) > 2 and saved["timeline"][-1]["batches"] == 15


def test_the_legend_names_the_stages(factory_module, tmp_path):
    import importlib

    loader = importlib.import_module(factory_module).make()
    stats, timeline = profile_loader(loader, 25)  # two epochs and a half: the loop goes on over epochs
    assert stats.batches == 25
    fig = draw_profile(timeline, tmp_path / "p.png")
    labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert {"dataset", "collate", "source"} <= labels
    assert labels == set(stats.stages)
    assert (tmp_path / "p.png").stat().st_size > 0
    names = picture_names(tmp_path / "p.png")  # the PNG keeps the legend and the panels' workers
    assert names == {"stages": sorted(labels), "workers": ["main", "0", "1"]}


def test_a_png_not_drawn_by_profile_is_refused_by_name(tmp_path):
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "plain.png")
    with pytest.raises(ValueError, match=r"plain\.png: not a torch-drt profile picture"):
        picture_names(tmp_path / "plain.png")


def test_a_cache_is_profiled(runtime, tmp_path, capsys):
    from conftest import ListSource

    (res,) = runtime.write_cache([ListSource("prof", 64)], tmp_path, writer_config=drt.WriterConfig(
        show_progress=False))
    assert main(["profile", str(res.path), "--batches", "6", "--batch-size", "8", "--num-workers", "0"]) == 0
    printed = capsys.readouterr().out
    assert "6 batches, 48 items" in printed and "dataset" in printed and "bound" in printed


def test_bad_targets_are_one_line_errors(factory_module, tmp_path, capsys):
    assert main(["profile", f"{factory_module}:not_a_loader", "--batches", "2"]) == 1
    assert "not a torch_drt loader" in capsys.readouterr().err
    assert main(["profile", "no_such_module_here:make"]) == 1
    assert "cannot import 'no_such_module_here'" in capsys.readouterr().err
    assert main(["profile", str(tmp_path / "missing")]) == 2
    assert "neither a cache directory" in capsys.readouterr().err
