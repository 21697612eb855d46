"""`make demo` installs the package with its runtime dependencies only; `make test` adds the test extras on top."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _plan(target: str, venv: Path) -> list[str]:
    """The commands ``make TARGET`` would run for a fresh ``venv`` (``make -n``: nothing is run)."""
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if not line.startswith("make")]


@pytest.fixture
def venv(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return tmp_path / "venv"


def test_make_demo_installs_no_test_extras(venv):
    plan = _plan("demo", venv)
    installs = [line for line in plan if "pip install" in line and "-e" in line.split()]
    assert installs and all("[test]" not in line for line in installs), plan
    assert plan[-1] == f"{venv}/bin/torch-drt demo"


def test_make_test_adds_the_test_extras_once_on_top_of_the_runtime_install(venv):
    plan = _plan("test", venv)
    editable = [line for line in plan if "pip install" in line and "-e" in line.split()]
    assert len(editable) == 2 and "[test]" not in editable[0] and "'.[test]'" in editable[1], plan
    stamps = [line for line in plan if line.startswith("touch")]
    assert stamps == [f"touch {venv}/.installed-runtime", f"touch {venv}/.installed-test"]


def test_make_test_after_make_demo_installs_only_the_extras(venv):
    venv.mkdir()
    (venv / ".installed-runtime").touch()  # what `make demo` left
    plan = _plan("test", venv)
    assert [line for line in plan if "pip install" in line] == [
        f"{venv}/bin/python -m pip install --quiet -e '.[test]' --config-settings editable_mode=compat "
        "torch==2.14.1 torchvision==0.29.1"
    ], plan
