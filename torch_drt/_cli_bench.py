"""``torch-drt bench``: run the benchmark suite of a torch_drt checkout; build the peers' side environments only
when asked (``--setup-peers``) and confirmed, never inside the source tree by default."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from torch_drt._cli_common import CliError

_ENVS_VAR = "TORCH_DRT_BENCH_ENVS"  # read by the checkout's benchmarks/_envs.py, which decides the default


def _is_checkout(path: Path) -> bool:
    return (path / "benchmarks" / "run_all.py").is_file() and (path / "torch_drt" / "__init__.py").is_file()


def _checkout(explicit: str | None) -> Path:
    """The torch_drt source tree whose benchmarks run: ``--source``, else the current directory, else the tree
    this package was imported from (the benchmarks are not installed with the package)."""
    if explicit:
        if not _is_checkout(Path(explicit)):
            raise CliError(f"{explicit} is not a torch_drt checkout (no benchmarks/run_all.py)", 2)
        return Path(explicit).resolve()
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if _is_checkout(candidate):
            return candidate
    raise CliError(
        "the benchmarks are not installed with the package: run `torch-drt bench` in a torch_drt checkout "
        "(git clone it), or pass --source DIR",
        2,
    )


def _envs_module(checkout: Path, envs: str | None) -> ModuleType | None:
    """The checkout's ``benchmarks/_envs.py`` (None in a checkout older than it), after applying ``--envs``."""
    if envs:
        os.environ[_ENVS_VAR] = str(Path(envs).expanduser().absolute())
    path = checkout / "benchmarks" / "_envs.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_torch_drt_bench_envs", path)
    assert spec is not None and spec.loader is not None  # a .py file's location always gives both
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError("not confirmed: rerun with --yes to proceed")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise CliError("cancelled")


def _setup_peers(checkout: Path, envs: ModuleType | None, yes: bool) -> int:
    script = checkout / "benchmarks" / "setup_peers.sh"
    where = envs.envs_dir() if envs is not None else "the directory the script names"
    print(
        f"this runs {script}: it downloads and installs the peer libraries and their own torch "
        f"(several GB) into side environments under {where}"
    )
    _confirm("proceed?", yes)
    status = subprocess.call(["bash", str(script)], env=os.environ.copy())
    if status != 0:
        raise CliError(f"{script.name} failed with exit status {status}")
    return 0


def _describe(envs: ModuleType | None) -> None:
    if envs is None:
        return
    missing = envs.missing()
    state = ", ".join(f"{name}: {'missing' if name in missing else 'ready'}" for name in envs.ENVIRONMENTS)
    print(f"side environments of the peer libraries: {envs.envs_dir()} ({state})")
    if missing:
        print("  peers without one are reported as skipped; `torch-drt bench --setup-peers` builds them (asks first)")


def cmd_bench(args: argparse.Namespace) -> int:
    """``torch-drt bench``: say what will run, then run the checkout's ``benchmarks/run_all.py``."""
    checkout = _checkout(args.source)
    envs = _envs_module(checkout, args.envs)
    if args.setup_peers:
        return _setup_peers(checkout, envs, args.yes)
    script = checkout / "benchmarks" / "run_all.py"
    print(f"running {script} ({'quick' if args.quick else 'full'} run; report: {Path(args.report).absolute()})")
    _describe(envs)
    sys.stdout.flush()
    command = [sys.executable, str(script), "--report", args.report] + (["--quick"] if args.quick else [])
    return subprocess.call(command, env=os.environ.copy())


def add_bench(sub: Any) -> None:
    """Declare ``torch-drt bench`` and its arguments on the subparsers ``sub``."""
    bench = sub.add_parser("bench", help="run the benchmark suite of a torch_drt checkout and write a Markdown report")
    bench.add_argument("--report", default="benchmark-report.md", help="where to write the report")
    bench.add_argument("--quick", action="store_true", help="fewer repeats and smaller workloads")
    bench.add_argument("--source", metavar="DIR", help="the torch_drt checkout (default: the current directory)")
    bench.add_argument(
        "--envs", metavar="DIR", help=f"where the peers' side environments live (default: ${_ENVS_VAR}, else as "
        "benchmarks/_envs.py says: outside the source tree)"
    )
    bench.add_argument(
        "--setup-peers", action="store_true", help="build the side environments (several GB; asks first) and exit"
    )
    bench.add_argument("--yes", action="store_true", help="with --setup-peers: do not ask")
    bench.set_defaults(func=cmd_bench)
