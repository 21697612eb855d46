"""Set builds in one process: plans, bad rows, empty parts, schema mismatch, reruns and the one progress bar."""

from __future__ import annotations

import json

import pytest
from build_helpers import (
    QUIET,
    BadAt,
    DropRange,
    ExtraKeyFrom,
    make_rows,
    manifest_inodes,
    read_all,
    set_parts,
    tree_bytes,
)
from conftest import ListSource
from sync_events import record_sync_events

import torch_drt as drt
from torch_drt.build import RowRange, build_cache_set, split_rows
from torch_drt.build.plan import part_bounds
from torch_drt.cache import publish_cache_set


def test_part_bounds():
    assert part_bounds(10, rows_per_part=4) == [(0, 4), (4, 8), (8, 10)]
    assert part_bounds(10, num_parts=3) == [(0, 3), (3, 6), (6, 10)]
    assert part_bounds(2, num_parts=5) == [(0, 1), (1, 2)]  # never an empty range
    assert part_bounds(0) == []
    assert part_bounds(3000) == [(0, 1024), (1024, 2048), (2048, 3000)]
    with pytest.raises(ValueError, match="not both"):
        part_bounds(10, rows_per_part=2, num_parts=2)
    with pytest.raises(ValueError, match="must be ints >= 1"):
        part_bounds(10, rows_per_part=0)


def test_build_opens_as_one_dataset_in_input_order(tmp_path):
    rows = make_rows(23)
    report = build_cache_set(split_rows(rows, rows_per_part=5), tmp_path, "s", writer_config=QUIET)
    assert report.ok and report.path == tmp_path / "s" and report.sample_count == 23
    assert [p.status for p in report.parts] == ["written"] * 5
    assert [p.name for p in report.parts] == [f"s-0000{k}" for k in range(5)]
    samples = read_all(tmp_path / "s")
    assert [(d, m) for d, m, _, _ in samples] == [(r["data"], {"label": r["label"], "tag": r["tag"]}) for r in rows]
    assert [e["path"] for e in set_parts(tmp_path / "s")] == [f"s-0000{k}" for k in range(5)]


def test_a_list_of_sources_gives_one_part_each_and_the_ids_of_the_part_names(tmp_path, runtime):
    report = build_cache_set([ListSource("a", 3), ListSource("b", 4)], tmp_path, "src", writer_config=QUIET)
    assert report.ok and [p.sample_count for p in report.parts] == [3, 4]
    reference = runtime.write_cache([ListSource("src-00000", 3)], tmp_path / "ref", writer_config=QUIET)[0]
    assert set_parts(tmp_path / "src")[0]["cache_id"] == drt.cache.open_cache(reference.path).cache_id
    journal = json.loads((tmp_path / "src" / ".build-plan.json").read_text())
    assert [p["origin"] for p in journal["parts"]] == ["source a", "source b"]


def test_a_failing_row_names_its_part_and_row_and_the_rerun_reuses_the_rest(tmp_path):
    rows = make_rows(20)
    report = build_cache_set(split_rows(rows, BadAt(13), rows_per_part=5), tmp_path, "s", writer_config=QUIET)
    assert not report.ok and not (tmp_path / "s" / "cacheset.json").exists()
    (failure,) = report.failures
    assert (failure.name, failure.row) == ("s-00002", 13)
    assert failure.message.startswith("ValueError: undecodable row 13 (raised at ")
    assert "part s-00002, input row 13: ValueError: undecodable row 13" in report.message
    assert [p.status for p in report.parts] == ["written", "written", "failed", "written"]
    assert not (tmp_path / "s" / "s-00002").exists()
    before = manifest_inodes(tmp_path / "s")
    rerun = build_cache_set(split_rows(rows, rows_per_part=5), tmp_path, "s", writer_config=QUIET)
    assert rerun.ok and [p.status for p in rerun.parts] == ["reused", "reused", "written", "reused"]
    after = manifest_inodes(tmp_path / "s")
    assert {k: after[k] for k in before} == before  # the published parts were not written again
    assert len(read_all(tmp_path / "s")) == 20


def test_a_row_the_writer_refuses_is_reported_with_its_part_and_row(tmp_path):
    rows = make_rows(12)
    rows[7] = {**rows[7], "label": "seven"}
    report = build_cache_set(split_rows(rows, rows_per_part=4), tmp_path, "s", writer_config=QUIET)
    (failure,) = report.failures
    assert (failure.name, failure.row) == ("s-00001", 7)
    assert failure.message == "sample 3: metadata key 'label' expected int, got str ('seven')"


def test_rows_that_are_not_rows_fail_with_the_row(tmp_path):
    report = build_cache_set(split_rows([1, 2, 3], rows_per_part=2), tmp_path, "s", writer_config=QUIET)
    assert [(p.row, p.message) for p in report.failures] == [
        (0, "TypeError: expected a CacheInput or a mapping of columns, got int (pass fn=...)"),
        (2, "TypeError: expected a CacheInput or a mapping of columns, got int (pass fn=...)"),
    ]


def test_an_empty_part_is_left_out_of_the_set(tmp_path):
    rows = make_rows(20)
    report = build_cache_set(split_rows(rows, DropRange(5, 10), rows_per_part=5), tmp_path, "s", writer_config=QUIET)
    assert report.ok and [p.status for p in report.parts] == ["written", "empty", "written", "written"]
    assert [e["path"] for e in set_parts(tmp_path / "s")] == ["s-00000", "s-00002", "s-00003"]
    assert [m["label"] for _, m, _, _ in read_all(tmp_path / "s")] == [*range(5), *range(10, 20)]

    class Empty:
        name = "empty"

        def __iter__(self):
            return iter(())

    report = build_cache_set([Empty(), ListSource("x", 2)], tmp_path, "e", writer_config=QUIET)
    assert report.ok and report.count("empty") == 1
    report = build_cache_set([Empty()], tmp_path, "none", writer_config=QUIET)
    assert not report.ok and "every part is empty" in report.message


def test_parts_with_another_schema_are_named_and_the_set_is_not_published(tmp_path):
    rows = make_rows(12)
    report = build_cache_set(split_rows(rows, ExtraKeyFrom(8), rows_per_part=4), tmp_path, "s", writer_config=QUIET)
    assert not report.ok and not (tmp_path / "s" / "cacheset.json").exists()
    assert "part s-00002 has metadata schema" in report.message and "but part s-00000 has" in report.message


def test_an_existing_set_is_refused_or_reused_never_rewritten(tmp_path):
    inputs = split_rows(make_rows(10), rows_per_part=4)
    first = build_cache_set(inputs, tmp_path, "s", writer_config=QUIET)
    manifest = (tmp_path / "s" / "cacheset.json").read_bytes()
    inodes = manifest_inodes(tmp_path / "s")
    with pytest.raises(FileExistsError, match="cache set already exists"):
        build_cache_set(inputs, tmp_path, "s", writer_config=QUIET)
    again = build_cache_set(inputs, tmp_path, "s", writer_config=QUIET, exist_ok=True)
    assert again.ok and again.path == first.path and [p.status for p in again.parts] == ["reused"] * 3
    assert [p.sample_count for p in again.parts] == [p.sample_count for p in first.parts]
    assert (tmp_path / "s" / "cacheset.json").read_bytes() == manifest and manifest_inodes(tmp_path / "s") == inodes


def test_exist_ok_refuses_a_set_this_plan_did_not_build(tmp_path, make_cache):
    publish_cache_set(tmp_path / "other", [make_cache("x", n=3, root=tmp_path)])
    with pytest.raises(ValueError, match=r"was not built by this plan: it has parts \['../x'\]"):
        build_cache_set([ListSource("a", 2)], tmp_path, "other", writer_config=QUIET, exist_ok=True)


def test_a_rerun_with_another_plan_is_refused(tmp_path):
    rows = make_rows(20)
    build_cache_set(split_rows(rows, BadAt(3), rows_per_part=5), tmp_path, "s", writer_config=QUIET)
    with pytest.raises(ValueError, match=r"was started with another plan \(4 parts, now 2; part 0 was"):
        build_cache_set(split_rows(rows, rows_per_part=10), tmp_path, "s", writer_config=QUIET)
    with pytest.raises(ValueError, match="another plan"):
        build_cache_set(split_rows(rows, num_parts=4)[:3], tmp_path, "s", writer_config=QUIET)
    same = build_cache_set(split_rows(rows, num_parts=4), tmp_path, "s", writer_config=QUIET)  # the same plan
    assert same.ok and same.count("reused") == 3


def test_invalid_inputs(tmp_path):
    with pytest.raises(ValueError, match="invalid cache set name"):
        build_cache_set([ListSource("a", 1)], tmp_path, "../x")
    with pytest.raises(ValueError, match="at least one input"):
        build_cache_set([], tmp_path, "s")
    with pytest.raises(TypeError, match="random access"):
        split_rows(iter([1, 2]))
    with pytest.raises(TypeError, match="input 0 is a int"):
        build_cache_set([3], tmp_path, "s")
    with pytest.raises(ValueError, match="must not carry credentials") as err:  # object stores: see tests/remote
        build_cache_set([ListSource("a", 1)], "s3://user:pw@bucket/root", "s")
    assert "pw" not in str(err.value)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_progress_bar_for_the_whole_build_on_a_terminal(tmp_path, capsys, monkeypatch, num_workers):
    import os
    import pty
    import sys
    import threading

    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:  # drained as it is written: a full terminal would block the writer
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal was closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with open(slave, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        build_cache_set(split_rows(make_rows(300), rows_per_part=50), tmp_path / "a", "s", num_workers=num_workers)
        monkeypatch.undo()
    reader.join(timeout=20)
    os.close(master)
    shown = b"".join(chunks).decode()
    assert "build set s [" in shown and "300/300 rows" in shown, shown
    assert "s-0000" not in shown  # no bar per part
    build_cache_set(split_rows(make_rows(300), rows_per_part=50), tmp_path / "b", "s")
    assert capsys.readouterr().err == ""  # stderr is not a terminal: no bar


def test_row_ranges_over_a_random_access_source(tmp_path):
    class Squares:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return drt.CacheInput(bytes([i * i]), {"i": i})

    inputs = [RowRange(Squares(), 0, 3), RowRange(Squares(), 3, 6)]
    report = build_cache_set(inputs, tmp_path, "sq", writer_config=QUIET)
    assert report.ok and [d for d, _, _, _ in read_all(tmp_path / "sq")] == [bytes([i * i]) for i in range(6)]


def test_the_same_input_and_settings_build_byte_identical_sets_and_caches(tmp_path, runtime):
    rows = make_rows(37)
    for where in ("a", "b"):
        report = build_cache_set(split_rows(rows, rows_per_part=10), tmp_path / where, "s", writer_config=QUIET)
        assert report.ok
    first = tree_bytes(tmp_path / "a" / "s")
    assert {"cacheset.json", "s-00003/manifest.json", "s-00003/metadata.arrow", "s-00003/index.bin"} <= set(first)
    assert first == tree_bytes(tmp_path / "b" / "s")  # every file, byte for byte
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=200)
    for where in ("c", "d"):
        (written,) = runtime.write_cache(ListSource("one", 50), tmp_path / where, writer_config=config)
        assert isinstance(written, drt.CacheWriteSuccess)
    assert tree_bytes(tmp_path / "c" / "one") == tree_bytes(tmp_path / "d" / "one")
    (other,) = runtime.write_cache(ListSource("one", 51), tmp_path / "e", writer_config=config)
    assert isinstance(other, drt.CacheWriteSuccess)
    uids = [json.loads((tmp_path / w / "one" / "manifest.json").read_text())["cache_uid"] for w in "ce"]
    assert uids[0] != uids[1]  # another content, another identity (the uid binds manifest, index and metadata)


def test_the_set_directory_is_synced_once_after_every_part_is_renamed_and_before_the_set_is_linked(
    tmp_path, monkeypatch
):
    # each part is synced whole before its publishing rename; the set directory that holds the renames is synced
    # once, before the set manifest is linked (not once per part: a build of many small parts waited on each)
    events = record_sync_events(monkeypatch)
    report = build_cache_set(split_rows(make_rows(12), rows_per_part=3), tmp_path, "s", writer_config=QUIET)
    assert report.ok and len(report.parts) == 4
    set_dir = tmp_path / "s"
    key = (set_dir.stat().st_dev, set_dir.stat().st_ino)
    renames = [i for i, (kind, name) in enumerate(events) if kind == "renamed" and str(name).startswith("s-")]
    linked = events.index(("linked", "cacheset.json"))
    assert len(renames) == 4 and renames[-1] < linked
    assert ("synced", key) not in events[renames[0] : renames[-1]]  # no sync of the set directory per part
    assert ("synced", key) in events[renames[-1] : linked]  # but once before the set is published
    for part, at in zip(report.parts, renames):
        files = [part.path, *part.path.rglob("*")]
        synced = {k for kind, k in events[:at] if kind == "synced"}
        assert [str(p) for p in files if (p.stat().st_dev, p.stat().st_ino) not in synced] == []
