"""``torch-drt bench``: says what it will do, needs a checkout (one clear line from a wheel), builds the peers'
side environments only when asked and confirmed, and never inside the source tree by default."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUB_RUN_ALL = """\
import json, os, sys
from pathlib import Path
ran = {"argv": sys.argv[1:], "envs": os.environ.get("TORCH_DRT_BENCH_ENVS")}
Path(__file__).with_name("ran.json").write_text(json.dumps(ran))
print("stub benchmarks ran")
"""
STUB_SETUP = 'echo "$TORCH_DRT_BENCH_ENVS" > "$(dirname "$0")/setup-ran"\n'


def run(*args: str, cwd: Path, pythonpath: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("TORCH_DRT_BENCH_ENVS", "PYTHONPATH")}
    environ.update(PYTHONPATH=str(pythonpath), **env)
    return subprocess.run([sys.executable, "-m", "torch_drt.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env=environ, stdin=subprocess.DEVNULL)


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A torch_drt source tree whose benchmarks are stubs (and the real benchmarks/_envs.py)."""
    co = tmp_path / "checkout"
    (co / "torch_drt").mkdir(parents=True)
    (co / "torch_drt" / "__init__.py").write_text("")
    (co / "benchmarks").mkdir()
    (co / "benchmarks" / "run_all.py").write_text(STUB_RUN_ALL)
    (co / "benchmarks" / "setup_peers.sh").write_text(STUB_SETUP)
    shutil.copy(ROOT / "benchmarks" / "_envs.py", co / "benchmarks" / "_envs.py")
    return co


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_from_an_installed_package_it_says_what_is_missing_in_one_line(tmp_path, checkout):
    site = tmp_path / "site"
    shutil.copytree(ROOT / "torch_drt", site / "torch_drt", ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run("bench", "--quick", cwd=elsewhere, pythonpath=site)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "not installed with the package" in proc.stderr
    assert "--source DIR" in proc.stderr
    envs = tmp_path / "envs"
    proc = run("bench", "--quick", "--source", str(checkout), "--envs", str(envs), cwd=elsewhere, pythonpath=site)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((checkout / "benchmarks" / "ran.json").read_text())["argv"][-1] == "--quick"


def test_it_says_what_it_will_do_and_builds_nothing(tmp_path, checkout):
    envs = tmp_path / "envs"
    before = tree(checkout)
    proc = run("bench", "--quick", "--report", "r.md", "--envs", str(envs), "--source", str(checkout), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"running {checkout / 'benchmarks' / 'run_all.py'} (quick run; report: {tmp_path / 'r.md'})" in proc.stdout
    assert f"side environments of the peer libraries: {envs} (peers: missing, py313: missing)" in proc.stdout
    assert "reported as skipped" in proc.stdout and "--setup-peers" in proc.stdout
    assert "stub benchmarks ran" in proc.stdout
    ran = json.loads((checkout / "benchmarks" / "ran.json").read_text())
    assert ran == {"argv": ["--report", "r.md", "--quick"], "envs": str(envs)}
    assert not envs.exists()  # nothing was built
    assert tree(checkout) == sorted([*before, "benchmarks/ran.json"])


def test_setup_peers_asks_first(tmp_path, checkout):
    envs = tmp_path / "envs"
    proc = run("bench", "--setup-peers", "--envs", str(envs), "--source", str(checkout), cwd=tmp_path)
    assert proc.returncode == 1
    assert f"into side environments under {envs}" in proc.stdout and "several GB" in proc.stdout
    assert proc.stderr == "torch-drt: error: not confirmed: rerun with --yes to proceed\n"
    assert not (checkout / "benchmarks" / "setup-ran").exists() and not envs.exists()
    proc = run("bench", "--setup-peers", "--yes", "--envs", str(envs), "--source", str(checkout), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (checkout / "benchmarks" / "setup-ran").read_text().strip() == str(envs)


def test_default_side_environments_are_outside_the_tree(tmp_path, checkout):
    envs_py = checkout / "benchmarks" / "_envs.py"

    def where(**env: str) -> str:
        environ = {k: v for k, v in os.environ.items() if k != "TORCH_DRT_BENCH_ENVS"}
        return subprocess.run([sys.executable, str(envs_py)], capture_output=True, text=True, check=True,
                              env={**environ, **env}).stdout.strip()

    assert where(XDG_CACHE_HOME=str(tmp_path / "xdg")) == str(tmp_path / "xdg" / "torch_drt" / "bench")
    assert where(TORCH_DRT_BENCH_ENVS=str(tmp_path / "mine")) == str(tmp_path / "mine")
    (checkout / ".bench").mkdir()  # one made before (git-ignored) is still used
    assert where(XDG_CACHE_HOME=str(tmp_path / "xdg")) == str(checkout / ".bench")


def test_benchmarks_never_build_a_side_environment(tmp_path):
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from _common import side_python\n"
        "py, reason = side_python(None)\n"
        "assert py is None and 'setup_peers.sh' in reason, reason\n"
    )
    envs = tmp_path / "envs"
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")], capture_output=True, text=True,
                          env={**os.environ, "TORCH_DRT_BENCH_ENVS": str(envs)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not envs.exists()


def _shim(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_setup_peers_script_builds_where_it_is_told(tmp_path):
    """The real setup_peers.sh, with shims for python3.11/python3.13 whose venvs log their pip installs."""
    shims = tmp_path / "shims"
    shims.mkdir()
    fake_venv = (
        'if [[ "$1" == -c ]]; then exit 0; fi\n'
        'if [[ "$1" == -m && "$2" == venv ]]; then mkdir -p "$3/bin"\n'
        '  printf \'#!/usr/bin/env bash\\necho "$@" >> "%s/pip.log"\\n\' "$3" > "$3/bin/pip"\n'
        '  printf \'#!/usr/bin/env bash\\n\' > "$3/bin/python"; chmod +x "$3/bin/pip" "$3/bin/python"; exit 0; fi\n'
        "exit 1\n"
    )
    _shim(shims / "python3.11", fake_venv)
    _shim(shims / "python3.13", fake_venv)
    envs = tmp_path / "envs"
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "TORCH_DRT_BENCH_ENVS": str(envs)}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "setup_peers.sh")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"side environments ready under {envs}/" in proc.stdout
    assert "mosaicml-streaming litdata" in (envs / "peers" / "pip.log").read_text()
    assert "dataloader-rs==0.2.0" in (envs / "py313" / "pip.log").read_text()
