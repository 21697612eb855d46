"""Set builds on a real local Ray cluster (started once for this module with two CPUs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray
from build_helpers import (
    QUIET,
    BadAt,
    DropRange,
    ExtraKeyFrom,
    KillAt,
    make_rows,
    manifest_inodes,
    read_all,
    set_parts,
    tree_bytes,
)

import torch_drt as drt
from torch_drt.build import build_cache_set as build_locally
from torch_drt.build import split_rows
from torch_drt.ray import build_cache_set

HERE = Path(__file__).resolve().parent


def _start_ray(tries: int = 3) -> None:
    """``ray.init``, again after a start-up time-out: Ray gives its raylet a fixed 30 s to register, which a busy
    machine (CI runs beside other work) can exceed."""
    for attempt in range(tries):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
            return
        except Exception as e:
            ray.shutdown()
            if attempt == tries - 1 or "timed out during startup" not in str(e):
                raise


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """One local cluster for the module; workers import the test helpers through PYTHONPATH."""
    saved = os.environ.get("PYTHONPATH")
    paths = [str(HERE), str(HERE.parent), str(HERE.parents[1]), *([saved] if saved else [])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    _start_ray()
    yield
    ray.shutdown()
    if saved is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = saved


def rows_dataset(n: int):
    return ray.data.from_items(make_rows(n), override_num_blocks=3)


def test_same_parts_and_samples_as_a_single_process_build(tmp_path):
    report = build_cache_set(rows_dataset(40), tmp_path / "ray", "s", rows_per_part=10, writer_config=QUIET)
    assert report.ok and [p.status for p in report.parts] == ["written"] * 4
    local = build_locally(split_rows(make_rows(40), rows_per_part=10), tmp_path / "local", "s", writer_config=QUIET)
    assert local.ok
    # same cache ids, counts and part manifests (whose checksums cover every byte of every part)
    assert set_parts(tmp_path / "ray" / "s") == set_parts(tmp_path / "local" / "s")
    assert tree_bytes(tmp_path / "ray" / "s") == tree_bytes(tmp_path / "local" / "s")
    assert read_all(tmp_path / "ray" / "s") == read_all(tmp_path / "local" / "s")
    assert [m["label"] for _, m, _, _ in read_all(tmp_path / "ray" / "s")] == list(range(40))


def test_a_part_over_many_small_blocks_keeps_its_row_order(monkeypatch):
    # a part's blocks are fetched from the object store several at a time (not one round trip each): rows of a part
    # spanning more blocks than one fetch takes come in order, across the fetches
    from torch_drt import ray as drt_ray

    refs = ray.data.from_items(make_rows(23), override_num_blocks=23).materialize().to_arrow_refs()
    monkeypatch.setattr(drt_ray, "_BLOCKS_PER_GET", 3)  # 23 blocks: 8 fetches, the last one short
    assert [r["data"] for r in drt_ray._arrow_rows(refs)] == [r["data"] for r in make_rows(23)]


def test_parts_take_their_rows_from_the_blocks_without_a_ray_data_split():
    # each part gets the blocks it spans and its rows of each (parts that start and end inside blocks, blocks
    # shared by two parts, a part inside one block): the same rows as split_at_indices, without its tasks
    from torch_drt import ray as drt_ray
    from torch_drt.build.plan import part_bounds

    data = ray.data.from_items(make_rows(23), override_num_blocks=4).materialize()
    bounds = part_bounds(23, num_parts=7)
    pieces = drt_ray._block_pieces(data, bounds)
    assert pieces is not None
    got = [[r["data"] for r in drt_ray._arrow_rows(refs, rows)] for refs, rows in pieces]
    assert got == [[r["data"] for r in make_rows(23)[a:b]] for a, b in bounds]


def test_a_killed_task_publishes_nothing_and_the_rerun_finishes(tmp_path):
    kill = KillAt(25, tmp_path / "killed")
    report = build_cache_set(
        rows_dataset(40), tmp_path, "s", fn=kill, rows_per_part=10, writer_config=QUIET, max_retries=0
    )
    assert (tmp_path / "killed").exists() and not report.ok
    (failure,) = report.failures
    assert failure.name == "s-00002" and "died" in failure.message.lower()
    assert not (tmp_path / "s" / "s-00002").exists()  # the killed part is not published
    assert [p.status for p in report.parts] == ["written", "written", "failed", "written"]
    before = manifest_inodes(tmp_path / "s")
    rerun = build_cache_set(rows_dataset(40), tmp_path, "s", fn=kill, rows_per_part=10, writer_config=QUIET)
    assert rerun.ok and [p.status for p in rerun.parts] == ["reused", "reused", "written", "reused"]
    after = manifest_inodes(tmp_path / "s")
    assert {k: after[k] for k in before} == before
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.startswith(".staging-")]
    assert [m["label"] for _, m, _, _ in read_all(tmp_path / "s")] == list(range(40))


def test_a_killed_task_is_retried_by_ray_within_the_build(tmp_path):
    report = build_cache_set(
        rows_dataset(20), tmp_path, "s", fn=KillAt(3, tmp_path / "killed"), rows_per_part=10, writer_config=QUIET
    )
    assert (tmp_path / "killed").exists() and report.ok
    assert [m["label"] for _, m, _, _ in read_all(tmp_path / "s")] == list(range(20))
    drt.cache.open_cache_set(tmp_path / "s", verify=True)


def test_a_failing_row_is_reported_with_part_and_row_and_other_parts_publish(tmp_path):
    report = build_cache_set(rows_dataset(30), tmp_path, "s", fn=BadAt(17), rows_per_part=10, writer_config=QUIET)
    (failure,) = report.failures
    assert (failure.name, failure.row) == ("s-00001", 17)
    assert failure.message.startswith("ValueError: undecodable row 17 (raised at ")
    assert sorted(p.name for p in (tmp_path / "s").iterdir() if not p.name.startswith(".")) == ["s-00000", "s-00002"]


def test_schema_mismatch_and_an_empty_part(tmp_path):
    mixed = build_cache_set(rows_dataset(30), tmp_path, "m", fn=ExtraKeyFrom(20), rows_per_part=10, writer_config=QUIET)
    assert not mixed.ok and "part m-00002 has metadata schema" in mixed.message
    drop = DropRange(10, 20)
    empty = build_cache_set(rows_dataset(30), tmp_path, "e", fn=drop, rows_per_part=10, writer_config=QUIET)
    assert empty.ok and [p.status for p in empty.parts] == ["written", "empty", "written"]
    assert [m["label"] for _, m, _, _ in read_all(tmp_path / "e")] == [*range(10), *range(20, 30)]


def test_rerun_of_a_finished_build_is_idempotent(tmp_path):
    first = build_cache_set(rows_dataset(20), tmp_path, "s", num_parts=2, writer_config=QUIET)
    manifest, inodes = (tmp_path / "s" / "cacheset.json").read_bytes(), manifest_inodes(tmp_path / "s")
    with pytest.raises(FileExistsError):
        build_cache_set(rows_dataset(20), tmp_path, "s", num_parts=2, writer_config=QUIET)
    again = build_cache_set(rows_dataset(20), tmp_path, "s", num_parts=2, writer_config=QUIET, exist_ok=True)
    assert again.ok and again.path == first.path and again.count("reused") == 2
    assert (tmp_path / "s" / "cacheset.json").read_bytes() == manifest and manifest_inodes(tmp_path / "s") == inodes


def test_columns_metadata_selection_and_one_driver_bar(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_DRT_PROGRESS", "1")  # a bar although stderr is captured, not a terminal
    report = build_cache_set(rows_dataset(300), tmp_path, "s", metadata_columns=["label"], rows_per_part=100)
    assert report.ok and read_all(tmp_path / "s")[5][1] == {"label": 5}
    err = capsys.readouterr().err
    assert "build set s [" in err and "100%" in err and "300/300" in err and "s-0000" not in err


def test_an_empty_dataset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="has no rows"):
        build_cache_set(rows_dataset(3).filter(lambda r: False), tmp_path, "s")


def _row_counters() -> int:
    """Counter actors this cluster has seen (killed ones stay listed, as dead)."""
    from ray._private.state import actors

    return sum("_RowCounter" in str(info.get("ActorClassName", "")) for info in actors().values())


def test_only_a_drawn_bar_starts_the_row_counter_actor(tmp_path, monkeypatch):
    # an actor is a process of its own (about a second of CPU to start, on the cores the parts need): a build whose
    # bar is not drawn does not start one; one whose bar is drawn still does
    before = _row_counters()
    quiet = build_cache_set(rows_dataset(20), tmp_path, "q", rows_per_part=10, writer_config=QUIET)
    assert quiet.ok and _row_counters() == before
    monkeypatch.setenv("TORCH_DRT_PROGRESS", "1")
    drawn = build_cache_set(rows_dataset(20), tmp_path, "d", rows_per_part=10)
    assert drawn.ok and _row_counters() == before + 1
