"""Set builds across real gloo ranks (torch.multiprocessing) and under torchrun (the CLI)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp
from build_helpers import QUIET, make_rows, manifest_inodes, read_all, set_parts, tree_bytes
from set_build_job import killed, scenarios

from torch_drt.build import build_cache_set, split_rows
from torch_drt.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One two-rank job running every scenario of set_build_job.scenarios; what each rank saw."""
    root = tmp_path_factory.mktemp("ranks")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TORCH_DRT_PROGRESS", "1")  # bars in the ranks' stderr files, which are not terminals
        mp.spawn(scenarios, args=(2, free_port(), str(root)), nprocs=2, join=True)
    return root, [json.loads((root / f"rank-{r}.json").read_text()) for r in range(2)]


def test_ranks_build_the_same_set_as_one_process(two_ranks, tmp_path):
    root, ranks = two_ranks
    assert ranks[0] == ranks[1]  # every rank returns the same reports
    same = ranks[0]["same"]
    assert same["ok"] and [p[1] for p in same["parts"]] == ["written"] * 4
    local = build_cache_set(split_rows(make_rows(40), rows_per_part=10), tmp_path, "same", writer_config=QUIET)
    assert set_parts(root / "same") == set_parts(local.path)  # same cache ids, counts, schemas and manifests
    assert read_all(root / "same") == read_all(local.path)
    assert tree_bytes(root / "same") == tree_bytes(local.path)  # byte for byte, every file of every part
    # num_workers under torchrun: each rank writes its two parts in two worker processes, the same bytes
    alone = build_cache_set(split_rows(make_rows(40), rows_per_part=10), tmp_path, "workers", writer_config=QUIET)
    assert ranks[0]["workers"]["ok"] and tree_bytes(root / "workers") == tree_bytes(alone.path)
    pids = {rank: {int(p.name) for p in (root / f"pids-{rank}").iterdir()} for rank in range(2)}
    assert all(len(pids[rank]) == 2 for rank in range(2)), pids


def test_only_rank_zero_shows_the_one_bar(two_ranks):
    root, _ = two_ranks
    shown = (root / "stderr-0").read_text()
    assert "build set same [" in shown and "100%" in shown and "40/40" in shown, shown
    assert (root / "stderr-1").read_text() == ""


def test_bad_row_empty_part_schema_mismatch_existing_set_and_differing_ranks(two_ranks):
    root, (report, _) = two_ranks
    bad = report["bad"]
    assert not bad["ok"] and [p[1] for p in bad["parts"]] == ["written", "failed", "written", "written"]
    assert bad["parts"][1][3] == 17 and bad["parts"][1][4].startswith("ValueError: undecodable row 17 (raised at ")
    assert not (root / "bad" / "bad-00001").exists() and (root / "bad" / "bad-00002" / "manifest.json").exists()
    assert report["empty"]["ok"]
    assert [p[1] for p in report["empty"]["parts"]] == ["written", "empty", "written", "written"]
    assert not report["mixed"]["ok"] and "part mixed-00002 has metadata schema" in report["mixed"]["message"]
    assert report["exists"].startswith("FileExistsError: cache set already exists")
    assert report["exist_ok"]["ok"] and [p[1] for p in report["exist_ok"]["parts"]] == ["reused"] * 4
    assert report["ranks_differ"] == (
        "ValueError: rank 1 planned other parts than rank 0: every rank must pass the same inputs"
    )
    assert not (root / "differ").exists()


def test_a_killed_rank_publishes_nothing_half_written_and_the_rerun_finishes(tmp_path):
    marker = tmp_path / "killed"
    with pytest.raises(mp.ProcessExitedException):
        mp.spawn(killed, args=(2, free_port(), str(tmp_path), str(marker)), nprocs=2, join=True)
    assert marker.exists()
    set_dir = tmp_path / "k"
    assert not (set_dir / "cacheset.json").exists() and not (set_dir / "k-00003").exists()
    assert (set_dir / "k-00001" / "manifest.json").exists()  # the killed rank's first part was published
    before = manifest_inodes(set_dir)
    mp.spawn(killed, args=(2, free_port(), str(tmp_path), str(marker)), nprocs=2, join=True)
    rerun = json.loads((tmp_path / "rerun-0.json").read_text())
    assert rerun["ok"] and rerun["parts"][3][1] == "written"
    assert all(rerun["parts"][int(name[-1])][1] == "reused" for name in before)
    after = manifest_inodes(set_dir)
    assert {k: after[k] for k in before} == before
    assert [m["label"] for _, m, _, _ in read_all(set_dir)] == list(range(40))
    assert not [p for p in set_dir.iterdir() if p.name.startswith(".staging-")]


def test_cache_build_cli_under_torchrun(tmp_path, capsys):
    files = tmp_path / "files"
    files.mkdir()
    for i in range(9):
        (files / f"{i}.txt").write_text(f"file {i}" * i)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), "-m", "torch_drt.cli", "cache", "build", str(tmp_path / "ranks"), str(files),
               "--parts", "3", "--quiet"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("published set files") == 1  # rank 0 speaks for the job
    assert main(["cache", "build", str(tmp_path / "one"), str(files), "--parts", "3", "--quiet"]) == 0
    assert set_parts(tmp_path / "ranks" / "files") == set_parts(tmp_path / "one" / "files")
    capsys.readouterr()
    assert main(["cache", "info", str(tmp_path / "ranks" / "files")]) == 0
    assert main(["cache", "verify", str(tmp_path / "ranks" / "files")]) == 0
    assert main(["cache", "ls", str(tmp_path / "ranks")]) == 0
    out = capsys.readouterr().out
    assert "cache set of 3 parts" in out and "samples:     9" in out and "files-00002" in out
    assert "(set of 3 parts, 9 files verified)" in out and "set of 3 parts" in out.splitlines()[-1]
    assert main(["cache", "build", str(tmp_path / "one"), str(files), "--parts", "3", "--quiet"]) == 2
    assert "cache set already exists" in capsys.readouterr().err


def test_ls_shows_an_unfinished_build_and_verify_names_a_corrupt_part(tmp_path, capsys):
    from build_helpers import BadAt

    build_cache_set(split_rows(make_rows(30), BadAt(12), rows_per_part=10), tmp_path, "u", writer_config=QUIET)
    build_cache_set(split_rows(make_rows(20), rows_per_part=10), tmp_path, "v", writer_config=QUIET)
    shard = tmp_path / "v" / "v-00001" / "shards" / "000000.bin"
    shard.write_bytes(b"x" + shard.read_bytes()[1:])
    assert main(["cache", "ls", str(tmp_path)]) == 0
    assert main(["cache", "verify", str(tmp_path / "v")]) == 1
    out = capsys.readouterr().out
    assert "u                              unfinished set build: 2 of 3 parts published" in out
    assert f"CORRUPT {shard}: checksum mismatch" in out
    assert Path(tmp_path / "v" / "cacheset.json").exists()
