"""The CLI and the examples, run as a user runs them (separate processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ListSource

import torch_drt as drt
from torch_drt.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_example_build_and_read_cache(tmp_path):
    proc = run(str(ROOT / "examples" / "build_and_read_cache.py"), str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "after filter: 16 samples, targets [1]" in proc.stdout


def test_demo_trains_checkpoints_and_resumes_exactly(tmp_path, capfd):
    # 150 images in batches of 16: 9 batches an epoch, the checkpoint at step 10 falls mid-epoch (epoch 1)
    proc = run("-m", "torch_drt.cli", "demo", "--workdir", str(tmp_path), "--samples", "150", "--batch-size", "16",
               "--steps", "20")
    assert proc.returncode == 0, proc.stderr
    assert "150 samples" in proc.stdout and "samples/s" in proc.stdout
    assert "the resumed stream continues exactly where it stopped: yes" in proc.stdout
    assert "max difference 0.00e+00" in proc.stdout
    assert "shapes: 100%" in proc.stderr  # the progress bar
    # again, in this process (a second interpreter costs seconds to start) and for two steps: the complete cache
    # is reused, no bar is drawn
    import torch

    threads = torch.get_num_threads()
    try:
        assert main(["demo", "--workdir", str(tmp_path), "--samples", "150", "--batch-size", "16", "--steps", "2"]) == 0
    finally:
        torch.set_num_threads(threads)  # the demo runs torch on one thread
    out, err = capfd.readouterr()
    assert "150 samples" in out and "exact resume: yes" in out
    assert "shapes:" not in err  # the complete cache is reused


def test_cache_build_info_verify_ls(tmp_path, capsys):
    src = tmp_path / "files"
    src.mkdir()
    for i in range(5):
        (src / f"{i}.txt").write_text(f"file {i}")
    assert main(["cache", "build", str(tmp_path / "root"), str(src), "--quiet", "--compression", "zstd"]) == 0
    assert main(["cache", "info", str(tmp_path / "root" / "files")]) == 0
    assert main(["cache", "ls", str(tmp_path / "root")]) == 0
    assert main(["cache", "verify", str(tmp_path / "root" / "files")]) == 0
    out = capsys.readouterr().out
    assert "wrote 5 samples" in out and "samples:     5" in out and "compression zstd" in out and "ok  " in out
    config = drt.ReaderConfig(seed=0, shuffle=False)
    ds = drt.DatasetRuntime(1).cached_dataset([tmp_path / "root" / "files"], reader_config=config)
    assert [(s.data, s.metadata["path"]) for s in ds] == [(f"file {i}".encode(), f"{i}.txt") for i in range(5)]


def test_cache_verify_names_the_corrupt_file_and_fails(tmp_path, capsys, runtime):
    (res,) = runtime.write_cache([ListSource("v", 8)], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    shard = res.path / "shards" / "000000.bin"
    body = bytearray(shard.read_bytes())
    body[0] ^= 1
    shard.write_bytes(bytes(body))
    assert main(["cache", "verify", str(res.path)]) == 1
    assert f"CORRUPT {shard}: checksum mismatch" in capsys.readouterr().out


def test_cache_build_from_a_source_spec(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_sources.py").write_text(
        "import torch_drt as drt\n"
        "class Numbers:\n"
        "    name = 'numbers'\n"
        "    def __iter__(self):\n"
        "        for i in range(7):\n"
        "            yield drt.CacheInput(str(i).encode(), {'n': i})\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["cache", "build", str(tmp_path / "root"), "--source-spec", "my_sources:Numbers", "--quiet"]) == 0
    assert "wrote 7 samples" in capsys.readouterr().out
    assert main(["cache", "build", str(tmp_path / "root"), "--source-spec", "my_sources:Nope"]) == 2
    assert main(["cache", "build", str(tmp_path / "root"), str(tmp_path / "missing")]) == 2


def test_help_everywhere(capsys):
    proc = run("-m", "torch_drt.cli", "--help")  # the entry point, in its own interpreter
    assert proc.returncode == 0 and "usage: torch-drt" in proc.stdout
    for args in (["cache", "--help"], ["cache", "build", "--help"], ["demo", "--help"], ["bench", "--help"],
                 ["cache", "info", "--help"], ["cache", "verify", "--help"], ["cache", "ls", "--help"]):
        assert main(args) == 0 and "usage: torch-drt" in capsys.readouterr().out, args
