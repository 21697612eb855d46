"""Set builds whose parts are written by local worker processes (``num_workers``): the same set as one process
writes, a killed worker's part written again, a part that kills every worker failed and finished by a rerun."""

from __future__ import annotations

import os

import pytest
from build_helpers import (
    QUIET,
    BadAt,
    KillAt,
    PidTag,
    ThreadTag,
    make_rows,
    manifest_inodes,
    read_all,
    tree_bytes,
)

from torch_drt.build import build_cache_set, split_rows


def _alone(rows, root, fn=None):
    """The reference: the same build written part after part in this process."""
    report = build_cache_set(split_rows(rows, fn, rows_per_part=7), root, "s", writer_config=QUIET)
    assert report.ok, report.summary()
    return tree_bytes(root / "s")


def test_worker_processes_build_the_same_set_as_one_process(tmp_path):
    rows, pids = make_rows(50), tmp_path / "pids"
    pids.mkdir()
    report = build_cache_set(split_rows(rows, PidTag(pids), rows_per_part=7), tmp_path / "w", "s",
                             writer_config=QUIET, num_workers=2)
    assert report.ok, report.summary()
    assert [p.status for p in report.parts] == ["written"] * 8 and report.sample_count == 50
    workers = {int(p.name) for p in pids.iterdir()}
    assert os.getpid() not in workers and len(workers) == 2  # the first two parts went to two idle workers
    assert tree_bytes(tmp_path / "w" / "s") == _alone(rows, tmp_path / "one")
    assert [m["label"] for _, m, _, _ in read_all(tmp_path / "w" / "s")] == list(range(50))  # same rows, same order


def test_a_worker_converts_its_next_part_ahead_while_a_part_ends_and_the_set_is_the_same(tmp_path):
    rows, ahead = make_rows(50), tmp_path / "ahead"
    ahead.mkdir()
    report = build_cache_set(split_rows(rows, ThreadTag(ahead), rows_per_part=7), tmp_path / "w", "s",
                             writer_config=QUIET, num_workers=2)
    assert report.ok and [p.status for p in report.parts] == ["written"] * 8, report.summary()
    early = sorted(int(p.name) for p in ahead.iterdir())
    assert early and min(early) >= 14, early  # parts 2 and 3 were the first two hints (rows 14-27)
    assert {row // 7 for row in early} >= {2, 3}, early
    assert tree_bytes(tmp_path / "w" / "s") == _alone(rows, tmp_path / "one")


def test_a_killed_worker_is_replaced_and_its_part_written_again_within_the_build(tmp_path):
    rows = make_rows(50)
    report = build_cache_set(split_rows(rows, KillAt(23, tmp_path / "killed"), rows_per_part=7), tmp_path / "w",
                             "s", writer_config=QUIET, num_workers=2)
    assert (tmp_path / "killed").exists() and report.ok, report.summary()
    assert tree_bytes(tmp_path / "w" / "s") == _alone(rows, tmp_path / "one")


def test_a_part_that_kills_its_workers_fails_alone_and_the_rerun_finishes_it(tmp_path):
    rows = make_rows(50)
    first = build_cache_set(split_rows(rows, KillAt(23, None), rows_per_part=7), tmp_path / "w", "s",
                            writer_config=QUIET, num_workers=2)
    assert not first.ok
    (failed,) = first.failures
    assert failed.name == "s-00003" and "exit code -9" in failed.message, failed
    assert [p.status for p in first.parts].count("written") == 7
    assert not (tmp_path / "w" / "s" / "s-00003").exists()  # nothing half-written is published
    before = manifest_inodes(tmp_path / "w" / "s")
    again = build_cache_set(split_rows(rows, rows_per_part=7), tmp_path / "w", "s", writer_config=QUIET,
                            num_workers=2)
    assert again.ok and [p.status for p in again.parts] == ["reused"] * 3 + ["written"] + ["reused"] * 4
    assert all(manifest_inodes(tmp_path / "w" / "s")[k] == v for k, v in before.items())  # reused, not rewritten
    assert tree_bytes(tmp_path / "w" / "s") == _alone(rows, tmp_path / "one")


def test_a_failing_row_in_a_worker_names_its_part_and_row(tmp_path):
    report = build_cache_set(split_rows(make_rows(50), BadAt(30), rows_per_part=7), tmp_path, "s",
                             writer_config=QUIET, num_workers=2)
    (failed,) = report.failures
    assert (failed.name, failed.row) == ("s-00004", 30) and "undecodable row 30" in failed.message
    assert report.count("written") == 7 and not report.ok


def test_spawned_workers_build_the_same_set(tmp_path):
    rows = make_rows(30)
    report = build_cache_set(split_rows(rows, rows_per_part=7), tmp_path / "w", "s", writer_config=QUIET,
                             num_workers=2, multiprocessing_context="spawn")
    assert report.ok, report.summary()
    assert tree_bytes(tmp_path / "w" / "s") == _alone(rows, tmp_path / "one")


def test_invalid_worker_settings(tmp_path):
    parts = split_rows(make_rows(4), rows_per_part=2)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="num_workers"):
            build_cache_set(parts, tmp_path, "s", writer_config=QUIET, num_workers=bad)
    with pytest.raises(ValueError, match="multiprocessing_context"):
        build_cache_set(parts, tmp_path, "s", writer_config=QUIET, num_workers=2, multiprocessing_context="nope")


_FIRST_USE = """
import json, sys, tempfile
from pathlib import Path
import torch_drt as drt
from torch_drt.build import build_cache_set, split_rows

out, workers = Path(sys.argv[1]), int(sys.argv[2])

def note_modules(row):  # in a worker: the modules it was forked with
    if workers and not (out / "child.json").exists():
        (out / "child.json").write_text(json.dumps(sorted(sys.modules)))
    return drt.CacheInput(bytes([row % 256]), {"label": row})

before = set(sys.modules)
build_cache_set(split_rows(range(8), note_modules, num_parts=2), tempfile.mkdtemp(), "w",
                writer_config=drt.WriterConfig(show_progress=False), num_workers=workers)
if not workers:  # in this process: what a first build imports
    (out / "writer.json").write_text(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_forked_workers_inherit_the_writers_first_use_imports(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for workers in (0, 1):
        proc = subprocess.run([sys.executable, "-c", _FIRST_USE, str(tmp_path), str(workers)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
    child = set(json.loads((tmp_path / "child.json").read_text()))
    missing = sorted(m for m in json.loads((tmp_path / "writer.json").read_text()) if m not in child)
    assert not missing, missing  # each worker would import them on its first part (pandas alone: ~0.3 s of CPU)


_PID_SOURCE = '''
import os
from pathlib import Path

import torch_drt as drt


class Rows:
    """Ten rows; each process that reads one leaves a file named for its pid in PIDS."""

    name = "rows"

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if not 0 <= i < 10:
            raise IndexError(i)
        Path(os.environ["PIDS"], str(os.getpid())).touch()
        return drt.CacheInput(f"row {i}".encode() * (i + 1), {"label": i})

    def __iter__(self):
        return (self[i] for i in range(10))
'''


def test_cli_num_workers_builds_the_same_set_in_worker_processes(tmp_path, monkeypatch, capsys):
    from torch_drt.cli import main

    (tmp_path / "pid_rows.py").write_text(_PID_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("PIDS", str(pids))
    spec = ["--source-spec", "pid_rows:Rows", "--parts", "4", "--quiet"]
    assert main(["cache", "build", str(tmp_path / "w"), *spec, "--num-workers", "2"]) == 0
    workers = {int(p.name) for p in pids.iterdir()}
    assert workers and os.getpid() not in workers  # the rows were read in worker processes
    assert main(["cache", "build", str(tmp_path / "one"), *spec]) == 0
    assert tree_bytes(tmp_path / "w" / "rows") == tree_bytes(tmp_path / "one" / "rows")
    capsys.readouterr()
    assert main(["cache", "build", str(tmp_path / "x"), "--source-spec", "pid_rows:Rows", "--num-workers", "2"]) == 2
    assert "--num-workers" in capsys.readouterr().err and not (tmp_path / "x" / "rows").exists()
