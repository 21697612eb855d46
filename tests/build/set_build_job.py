"""Real gloo ranks building sets (started by test_build_torchrun.py with torch.multiprocessing.spawn)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch.distributed as dist
from build_helpers import QUIET, BadAt, DropRange, ExtraKeyFrom, KillAt, PidTag, make_rows

import torch_drt as drt
from torch_drt.build import BuildReport, build_cache_set, split_rows


def _join(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _brief(report: BuildReport) -> dict:
    return {
        "ok": report.ok,
        "path": str(report.path),
        "message": report.message,
        "parts": [[p.name, p.status, p.sample_count, p.row, p.message] for p in report.parts],
    }


def _raises(fn) -> str:
    try:
        fn()
    except (FileExistsError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def scenarios(rank: int, world: int, port: int, root: str) -> None:
    """Several builds in one job; every rank writes what it saw to root/rank-N.json."""
    _join(rank, world, port)
    out = {}
    try:
        rows = make_rows(40)
        (Path(root) / f"pids-{rank}").mkdir()
        with open(Path(root) / f"stderr-{rank}", "w") as err, contextlib.redirect_stderr(err):
            report = build_cache_set(split_rows(rows, rows_per_part=10), root, "same", writer_config=drt.WriterConfig())
        out["same"] = _brief(report)
        out["workers"] = _brief(build_cache_set(split_rows(rows, PidTag(Path(root) / f"pids-{rank}"),
                                                           rows_per_part=10), root, "workers", writer_config=QUIET,
                                                num_workers=2))
        out["bad"] = _brief(build_cache_set(split_rows(rows, BadAt(17), rows_per_part=10), root, "bad",
                                            writer_config=QUIET))
        out["empty"] = _brief(build_cache_set(split_rows(rows, DropRange(10, 20), rows_per_part=10), root, "empty",
                                              writer_config=QUIET))
        out["mixed"] = _brief(build_cache_set(split_rows(rows, ExtraKeyFrom(20), rows_per_part=10), root, "mixed",
                                              writer_config=QUIET))
        same = split_rows(rows, rows_per_part=10)
        out["exists"] = _raises(lambda: build_cache_set(same, root, "same", writer_config=QUIET))
        out["exist_ok"] = _brief(build_cache_set(same, root, "same", writer_config=QUIET, exist_ok=True))
        differs = split_rows(make_rows(40 + rank), rows_per_part=10)
        out["ranks_differ"] = _raises(lambda: build_cache_set(differs, root, "differ", writer_config=QUIET))
    finally:
        (Path(root) / f"rank-{rank}.json").write_text(json.dumps(out))
        dist.destroy_process_group()


def killed(rank: int, world: int, port: int, root: str, marker: str) -> None:
    """Build set ``k`` of 4 parts; the rank that reaches row 35 (the last part) is killed on the first run."""
    _join(rank, world, port)
    try:
        inputs = split_rows(make_rows(40), KillAt(35, marker), rows_per_part=10)
        report = build_cache_set(inputs, root, "k", writer_config=QUIET)
        (Path(root) / f"rerun-{rank}.json").write_text(json.dumps(_brief(report)))
    finally:
        dist.destroy_process_group()
