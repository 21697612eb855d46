"""The CLI pipes: ``--json`` prints only JSON, every option has help, a missing source is named as missing."""

from __future__ import annotations

import argparse
import json

import pytest

from torch_drt.cache import publish_cache_set
from torch_drt.cli import build_parser, main


def _parsers(parser: argparse.ArgumentParser, path: str = "torch-drt"):
    """Every parser of the tree, with its command line."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_every_option_argument_and_command_has_help():
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path}: {action.option_strings or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                helped = {a.dest for a in action._choices_actions if a.help}
                missing += [f"{path} {name}" for name in action.choices if name not in helped]
    assert missing == []


def test_the_walk_sees_every_command():  # the help check above covers the whole tree, not only the top
    paths = {path for path, _ in _parsers(build_parser())}
    assert {"torch-drt demo", "torch-drt cache build", "torch-drt cache info", "torch-drt bench",
            "torch-drt convert", "torch-drt info", "torch-drt verify"} <= paths


def test_cache_info_json_prints_only_json(capsys, make_cache):
    path = make_cache("j", n=6)
    assert main(["cache", "info", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    info = json.loads(out)  # the whole of stdout is one JSON document
    assert info["sample_count"] == 6 and info["source_name"] == "j" and info["path"] == str(path)
    assert info["manifest"] == json.loads((path / "manifest.json").read_text())
    assert {"label", "flag", "score", "tag"} <= set(info["schema"])


def test_cache_set_info_json_prints_only_json(capsys, tmp_path, make_cache):
    parts = [make_cache("a", n=3), make_cache("b", n=4)]
    publish_cache_set(tmp_path / "caches" / "both", parts)
    assert main(["cache", "info", str(tmp_path / "caches" / "both"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "cache set" and info["sample_count"] == 7
    assert [p["sample_count"] for p in info["parts"]] == [3, 4]
    assert info["manifest"] == json.loads((tmp_path / "caches" / "both" / "cacheset.json").read_text())


def test_cache_info_without_json_stays_a_text_summary(capsys, make_cache):
    assert main(["cache", "info", str(make_cache("t", n=2))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("path:") and "samples:     2" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_build_without_a_source_says_what_is_missing(capsys, tmp_path):
    assert main(["cache", "build", str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err
    assert "None" not in err and "no source given" in err and "--source-spec" in err, err
    assert err.count("\n") == 1
