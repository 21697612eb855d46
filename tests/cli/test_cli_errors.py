"""Every CLI failure is one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ListSource

import torch_drt as drt
from torch_drt.cli import main

ROOT = Path(__file__).resolve().parents[2]


def fails(capsys, argv: list[str], status: int = 1) -> str:
    """Run ``torch-drt argv`` in-process: it must return ``status`` with exactly one line on stderr."""
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("torch-drt: error: "), err
    assert "Traceback" not in err
    return err


@pytest.fixture
def caches(tmp_path, runtime):
    """A root with a good cache and several damaged ones."""
    root = tmp_path / "root"
    for name in ("good", "garbage", "listed", "empty-meta", "shards-file", "manifest-dir"):
        (res,) = runtime.write_cache([ListSource(name, 6)], root, writer_config=drt.WriterConfig(show_progress=False))
        assert isinstance(res, drt.CacheWriteSuccess), res
    (root / "garbage" / "manifest.json").write_bytes(b"\xff\x00{not json")
    (root / "listed" / "manifest.json").write_text("[1, 2, 3]")
    (root / "empty-meta" / "metadata.arrow").write_bytes(b"")
    for shard in (root / "shards-file" / "shards").iterdir():
        shard.unlink()
    (root / "shards-file" / "shards").rmdir()
    (root / "shards-file" / "shards").write_bytes(b"x")
    (root / "manifest-dir" / "manifest.json").unlink()
    (root / "manifest-dir" / "manifest.json").mkdir()
    return root


def test_ls_of_a_missing_root_is_one_line(capsys, tmp_path):
    assert "no such directory" in fails(capsys, ["cache", "ls", str(tmp_path / "nonexistent")])
    (tmp_path / "file").write_text("x")
    assert "not a directory" in fails(capsys, ["cache", "ls", str(tmp_path / "file")])


def test_the_real_command_prints_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch_drt.cli", "cache", "ls", str(tmp_path / "nonexistent")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"torch-drt: error: {tmp_path / 'nonexistent'}: no such directory\n"


def test_ls_lists_damaged_caches_and_goes_on(capsys, caches):
    assert main(["cache", "ls", str(caches)]) == 0
    out, err = capsys.readouterr()
    lines = dict(line.split(maxsplit=1) for line in out.splitlines())
    assert lines["good"].startswith("6 samples") and err == ""
    for name in ("garbage", "listed", "empty-meta", "shards-file", "manifest-dir"):
        assert lines[name].startswith("invalid: "), (name, lines[name])


@pytest.mark.parametrize("name", ["garbage", "listed", "empty-meta", "shards-file", "manifest-dir", "missing"])
def test_info_and_verify_of_a_damaged_cache(capsys, caches, name):
    fails(capsys, ["cache", "info", str(caches / name)])
    assert main(["cache", "verify", str(caches / "good"), str(caches / name)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("ok      ") and "Traceback" not in out + err
    assert (f"CORRUPT {caches / name}" in out) != (err.count("\n") == 1)  # a corrupt report, or one error line


@pytest.mark.parametrize(
    "argv, words",
    [
        ([], "required: COMMAND"),
        (["nope"], "invalid choice: 'nope'"),
        (["cache"], "cache: the following arguments are required"),
        (["cache", "build"], "required: root"),
        (["cache", "build", "r", "s", "--compression", "gzip"], "invalid choice: 'gzip'"),
        (["cache", "build", "r", "s", "--max-shard-bytes", "-1"], "-1 must be >= 1"),
        (["cache", "build", "r", "s", "--max-shard-bytes", "lots"], "'lots' is not an integer"),
        (["demo", "--samples", "0"], "0 must be >= 1"),
        (["demo", "--steps", "-3"], "-3 must be >= 1"),
        (["demo", "--workers", "-1"], "-1 must be >= 0"),
        (["demo", "--batch-size", "1.5"], "'1.5' is not an integer"),
        (["cache", "verify"], "required: paths"),
    ],
)
def test_bad_arguments_are_one_line_with_status_2(capsys, argv, words):
    assert words in fails(capsys, argv, status=2)


def _spec(tmp_path, monkeypatch, body: str) -> None:
    (tmp_path / "my_specs.py").write_text("import torch_drt as drt\n" + body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_specs", raising=False)


def test_build_into_an_existing_name_says_so_before_writing(capsys, tmp_path, monkeypatch):
    _spec(tmp_path, monkeypatch, (
        "from pathlib import Path\n"
        "class Numbers:\n"
        "    name = 'numbers'\n"
        "    def __iter__(self):\n"
        "        Path('iterated').touch()\n"
        "        for i in range(3):\n"
        "            yield drt.CacheInput(str(i).encode(), {'n': i})\n"
    ))
    root = tmp_path / "root"
    assert main(["cache", "build", str(root), "--source-spec", "my_specs:Numbers", "--quiet"]) == 0
    (tmp_path / "iterated").unlink()
    before = sorted(p.name for p in root.iterdir())
    err = fails(capsys, ["cache", "build", str(root), "--source-spec", "my_specs:Numbers", "--quiet"])
    assert f"{root / 'numbers'} already exists" in err
    assert not (tmp_path / "iterated").exists()  # not one sample was read
    assert sorted(p.name for p in root.iterdir()) == before  # no staging directory either
    src = tmp_path / "numbers"
    src.mkdir()
    (src / "a.txt").write_text("a")
    assert "already exists" in fails(capsys, ["cache", "build", str(root), str(src), "--quiet"])


@pytest.mark.parametrize(
    "spec, status, words",
    [
        ("my_specs", 2, "must look like package.module:object"),
        ("no_such_module:X", 2, "ModuleNotFoundError"),
        ("my_specs:Missing", 2, "AttributeError"),
        ("my_specs:NotASource", 2, "is not a cache source"),
        ("my_specs:broken", 1, "RuntimeError: the factory failed"),
        ("my_specs:BadName", 1, "invalid source name"),
    ],
)
def test_build_from_a_bad_spec(capsys, tmp_path, monkeypatch, spec, status, words):
    _spec(tmp_path, monkeypatch, (
        "NotASource = 3\n"
        "def broken():\n"
        "    raise RuntimeError('the factory failed')\n"
        "class BadName:\n"
        "    name = 'bad name!'\n"
        "    def __iter__(self):\n"
        "        return iter([])\n"
    ))
    assert words in fails(capsys, ["cache", "build", str(tmp_path / "root"), "--source-spec", spec], status=status)


def test_build_with_bad_paths(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    src = tmp_path / "src"
    src.mkdir()
    assert "is not a directory" in fails(capsys, ["cache", "build", str(tmp_path / "file"), str(src)])
    assert "not both" in fails(capsys, ["cache", "build", str(tmp_path), str(src), "--source-spec", "a:b"], 2)
    assert "is not a directory" in fails(capsys, ["cache", "build", str(tmp_path), str(tmp_path / "nope")], 2)


def test_traceback_flag_shows_the_error(tmp_path, monkeypatch):
    _spec(tmp_path, monkeypatch, "def broken():\n    raise RuntimeError('the factory failed')\n")
    with pytest.raises(RuntimeError, match="the factory failed"):
        main(["--traceback", "cache", "build", str(tmp_path / "root"), "--source-spec", "my_specs:broken"])


def test_a_command_that_exits_with_a_message_fails(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    err = fails(capsys, ["demo", "--workdir", str(tmp_path / "file"), "--samples", "8", "--steps", "1"])
    assert "cache build failed" in err


def test_the_demo_leaves_torchs_thread_count_as_it_found_it(capsys, tmp_path):
    """The demo runs torch on one thread; a process that runs it in-process (``main(["demo"])``) gets its own
    setting back, even when the demo fails (it stayed at 1: later work in the process ran on one thread)."""
    import torch

    outer = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1, whatever this machine runs: the demo's 1 must not stay
    try:
        (tmp_path / "file").write_text("x")
        fails(capsys, ["demo", "--workdir", str(tmp_path / "file"), "--samples", "8", "--steps", "1"])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(outer)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"torch-drt {drt.__version__}\n"
