"""Progress bars (issue 28): one per job on a terminal, none when stderr is not one, none with ``--quiet``.

Each command runs as a user runs it, in its own process, its stderr a real pseudo-terminal (``pty``) or a pipe.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from remote_fixtures import BUCKET, moto_fixture, unique  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    """This process's environment (the S3 keys the fixtures set included), the checkout first on the path."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}

pytestmark = pytest.mark.timeout(240)


def on_terminal(*argv: str) -> tuple[int, str, str]:
    """``torch-drt argv`` with stderr on a pty: (status, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal's size, as a real one
    proc = subprocess.Popen([sys.executable, "-m", "torch_drt.cli", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=env())
    os.close(slave)
    shown = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        shown.append(data)
    out = proc.stdout.read().decode()
    status = proc.wait(timeout=120)
    os.close(master)
    return status, out, b"".join(shown).decode(errors="replace")


def piped(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_drt.cli", *argv], capture_output=True, text=True, env=env(),
                          timeout=120)


def test_cache_verify_draws_one_bar_per_cache_on_a_terminal_only(make_cache):
    first, second = make_cache("a", n=20), make_cache("b", n=5)
    status, out, shown = on_terminal("cache", "verify", str(first), str(second))
    assert status == 0 and out.count("ok ") == 2
    for path in (first, second):
        assert f"verify {path} [" in shown and "100%" in shown, shown
    assert shown.count("\n") == 2  # one finished line per job

    proc = piped("cache", "verify", str(first))
    assert proc.returncode == 0 and proc.stderr == ""
    status, _, shown = on_terminal("cache", "verify", str(first), "--quiet")
    assert status == 0 and shown == ""


def test_cache_build_and_its_upload_draw_bars_on_a_terminal_only(tmp_path, moto_endpoint):
    source = tmp_path / "files"
    source.mkdir()
    for i in range(30):
        (source / f"{i:02d}.bin").write_bytes(bytes([i]) * 1000)
    flag = ["--storage-options", json.dumps({"client_kwargs": {"endpoint_url": moto_endpoint}})]
    root = f"s3://{BUCKET}/progress"
    name = unique("bar")
    status, out, shown = on_terminal("cache", "build", root, str(source), "--name", name, *flag)
    assert status == 0 and f"wrote 30 samples to {root}/{name}" in out, shown
    assert f"upload {root}/" in shown and "100%" in shown, shown
    assert "samples" in shown  # the writer's bar of the source

    proc = piped("cache", "build", root, str(source), "--name", unique("bar"), *flag)
    assert proc.returncode == 0 and "upload" not in proc.stderr and "samples" not in proc.stderr, proc.stderr
    status, _, shown = on_terminal("cache", "build", root, str(source), "--name", unique("bar"), "--quiet", *flag)
    assert status == 0 and "upload" not in shown and "%" not in shown, shown


def test_formats_verify_draws_a_bar_on_a_terminal_only(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"x": list(range(600))}), path, row_group_size=100)
    status, out, shown = on_terminal("formats", "verify", str(path))
    assert status == 0 and out.startswith("ok "), out + shown
    assert f"verify {path} [" in shown and "600/600 samples" in shown, shown
    proc = piped("formats", "verify", str(path))
    assert proc.returncode == 0 and proc.stderr == ""
    status, _, shown = on_terminal("formats", "verify", str(path), "--quiet")
    assert status == 0 and shown == ""


def test_a_bar_never_shows_a_urls_credentials_or_query(tmp_path):
    from torch_drt._progress import Progress

    master, slave = pty.openpty()
    url = "https://user:secret@host/cache?token=abc"
    with open(slave, "w", closefd=True) as terminal, Progress("upload", url, total=10, unit="B",
                                                               stream=terminal) as bar:
        bar.add(10)
    shown = os.read(master, 65536).decode()
    os.close(master)
    assert "upload https://host/cache [" in shown and "secret" not in shown and "token" not in shown, shown


def test_a_cache_set_build_draws_one_bar_on_a_terminal_only(tmp_path):
    source = tmp_path / "files"
    source.mkdir()
    for i in range(40):
        (source / f"{i:02d}.bin").write_bytes(bytes([i]) * 100)
    status, out, shown = on_terminal("cache", "build", str(tmp_path / "sets"), str(source), "--parts", "2")
    assert status == 0, out + shown
    assert "build set files [" in shown and "40/40 rows" in shown, shown
    proc = piped("cache", "build", str(tmp_path / "piped"), str(source), "--parts", "2")
    assert proc.returncode == 0 and "build set" not in proc.stderr and "%" not in proc.stderr, proc.stderr


def test_the_environment_forces_bars_on_or_off(monkeypatch):
    import io

    from torch_drt._progress import enabled, silenced

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("TORCH_DRT_PROGRESS", raising=False)
    assert enabled(Terminal()) and not enabled(io.StringIO())
    monkeypatch.setenv("TORCH_DRT_PROGRESS", "1")  # a batch job's log
    assert enabled(io.StringIO())
    with silenced():  # --quiet wins
        assert not enabled(io.StringIO())
    monkeypatch.setenv("TORCH_DRT_PROGRESS", "0")
    assert not enabled(Terminal())
