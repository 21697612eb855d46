"""Each part's set-manifest entry is made as the part is reported done (the driver opens it while the others are
still written), not all at the final publish: the set is the same, and a part that does not open fails the build
with the error publishing the set would raise."""

from __future__ import annotations

from pathlib import Path

import pytest
from build_helpers import QUIET, WaitFor, make_rows, tree_bytes

from torch_drt.build import build_cache_set, split_rows
from torch_drt.build._set_entries import SetEntries
from torch_drt.build._workers import write_parts
from torch_drt.build.lifecycle import finish_build, start_build
from torch_drt.build.plan import plan_parts
from torch_drt.cache import CacheCorruptError, is_cache_set, publish_cache_set


@pytest.mark.parametrize("num_workers", [0, 2])
def test_each_part_is_reported_done_while_the_others_are_still_written(tmp_path, num_workers):
    marker = tmp_path / "part-0-reported"
    plan = plan_parts("s", split_rows(make_rows(10), WaitFor(5, marker), rows_per_part=5))
    start = start_build(tmp_path, "s", plan)
    reported = []

    def on_done(outcome):
        reported.append(outcome.index)
        if outcome.index == 0:
            marker.touch()  # part 1's first row waits for this

    outcomes = write_parts(plan, start.set_dir, QUIET, lambda n: None, start.remote, num_workers, on_done=on_done)
    assert [o.status for o in outcomes] == ["written", "written"], [str(o) for o in outcomes]
    assert reported == [0, 1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_part_is_checked_when_it_is_done_and_one_that_does_not_open_fails_the_build_as_the_publish_would(
    tmp_path, num_workers
):
    plan = plan_parts("s", split_rows(make_rows(15), rows_per_part=5))
    start = start_build(tmp_path, "s", plan)
    entries, expected = SetEntries(start.set_dir, start.remote), []

    def on_done(outcome):
        if outcome.index != 1:
            entries.add(outcome)
            return
        manifest = Path(outcome.path) / "manifest.json"
        good = manifest.read_bytes()
        manifest.write_bytes(b"{")  # damaged while the driver checks it ...
        with pytest.raises(CacheCorruptError) as err:
            publish_cache_set(tmp_path / "elsewhere", [outcome.path])
        expected.append(str(err.value))
        entries.add(outcome)
        manifest.write_bytes(good)  # ... and whole again before the set is published

    outcomes = write_parts(plan, start.set_dir, QUIET, lambda n: None, start.remote, num_workers, on_done=on_done)
    report = finish_build(start, "s", outcomes, entries)
    assert not report.ok and report.message == expected[0] and "manifest.json" in report.message
    assert not is_cache_set(tmp_path / "s")
    rerun = build_cache_set(split_rows(make_rows(15), rows_per_part=5), tmp_path, "s", writer_config=QUIET,
                            num_workers=num_workers)
    assert rerun.ok and [p.status for p in rerun.parts] == ["reused"] * 3
    built = tree_bytes(tmp_path / "s")
    (tmp_path / "s" / "cacheset.json").unlink()  # the same manifest as publishing the parts in one call gives
    publish_cache_set(tmp_path / "s", [p.path for p in rerun.parts])
    assert tree_bytes(tmp_path / "s") == built
