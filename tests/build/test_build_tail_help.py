"""The build's tail shared between local worker processes (``torch_drt/build/_tail_help.py``): a worker with no part
left converts the last rows of the part another worker still writes, and the set is the same, byte for byte.

Each test holds the last part's writer at one of its first rows until a helper converted the part's last row
(which only a helper converts first): without the help the writer waits out its timeout and the part fails.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from build_helpers import QUIET, WaitFor, make_rows, tree_bytes

import torch_drt as drt
from torch_drt.build import ColumnsToInput, build_cache_set, split_rows

LAST = 39  # the last row of the last part (rows 20-39), which its writer reaches last
HELD = 21  # the row at which that writer waits for the last row to be converted


class HeldWriter(WaitFor):
    """Row ``HELD`` waits until row ``LAST`` was converted (``marker``, left as row ``LAST`` is converted, or with
    ``at_last=""`` as row ``LAST - 1`` is: the helper's next row, once it handed row ``LAST`` over); each row's
    converting process is recorded (``<label>-<pid>`` in ``pids``); ``at_last``: what converting row ``LAST`` does
    then ("raise", "kill": the first time)."""

    def __init__(self, marker: Path, pids: Path, at_last: str = "") -> None:
        super().__init__(HELD, marker, timeout=20.0)
        self.pids, self.at_last = str(pids), at_last
        self.release = LAST if at_last else LAST - 1

    def __call__(self, row: dict) -> drt.CacheInput:
        Path(self.pids, f"{row['label']}-{os.getpid()}").touch()
        first = not os.path.exists(self.marker)
        if row["label"] == self.release:
            Path(self.marker).touch()
        if row["label"] == LAST:
            if self.at_last == "raise":
                raise ValueError(f"undecodable row {LAST}")
            if self.at_last == "kill" and first:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(row)


def _build(tmp_path: Path, at_last: str = "") -> tuple[drt.build.BuildReport, dict[int, set[int]]]:
    pids = tmp_path / "pids"
    pids.mkdir()
    fn = HeldWriter(tmp_path / "last-converted", pids, at_last)
    report = build_cache_set(split_rows(make_rows(LAST + 1), fn, rows_per_part=20), tmp_path / "w", "s",
                             writer_config=QUIET, num_workers=2)
    by_row: dict[int, set[int]] = {}
    for p in pids.iterdir():
        label, pid = p.name.split("-")
        by_row.setdefault(int(label), set()).add(int(pid))
    return report, by_row


def _alone(tmp_path: Path) -> dict[str, bytes]:
    report = build_cache_set(split_rows(make_rows(LAST + 1), ColumnsToInput(), rows_per_part=20), tmp_path / "one",
                             "s", writer_config=QUIET)
    assert report.ok, report.summary()
    return tree_bytes(tmp_path / "one" / "s")


def test_a_free_worker_converts_the_last_rows_of_the_part_still_written_and_the_set_is_the_same(tmp_path):
    report, by_row = _build(tmp_path)
    assert report.ok and report.count("written") == 2, report.summary()
    (writer,) = by_row[20]  # a part's first row is always its writer's
    helper = by_row[LAST] - {writer}
    assert helper and writer not in by_row[LAST], by_row  # the last row was converted by the other worker only
    helped = [row for row in range(20, LAST + 1) if by_row[row] & helper]
    assert helped == list(range(helped[0], LAST + 1)), by_row  # the part's last rows, from the last one backwards
    assert tree_bytes(tmp_path / "w" / "s") == _alone(tmp_path)  # every row written once, in order


def test_a_row_that_raises_in_the_helper_is_converted_again_and_reported_by_the_writer(tmp_path):
    report, by_row = _build(tmp_path, at_last="raise")
    (failed,) = report.failures
    assert (failed.name, failed.row) == ("s-00001", LAST) and "undecodable row 39" in failed.message, failed
    assert len(by_row[LAST]) == 2, by_row  # the helper tried it first, then the writer


def test_a_row_that_kills_the_helper_kills_it_once_and_the_writer_converts_it(tmp_path):
    report, by_row = _build(tmp_path, at_last="kill")
    assert report.ok and report.count("written") == 2, report.summary()  # the helper's replacement does not help
    (writer,) = by_row[20]
    assert writer in by_row[LAST] and len(by_row[LAST]) == 2, by_row
    assert tree_bytes(tmp_path / "w" / "s") == _alone(tmp_path)


def _tail_help(tmp_path: Path, n: int, fn=None, **kw):
    import multiprocessing

    from torch_drt.build._tail_help import TailHelp
    from torch_drt.build.plan import plan_parts

    plan = plan_parts("s", split_rows(make_rows(n), fn or ColumnsToInput(), num_parts=1))
    return TailHelp(multiprocessing.get_context("fork"), plan, str(tmp_path), **kw)


def test_the_helper_converts_from_the_last_row_down_to_the_writers_row_and_the_writer_takes_them(tmp_path):
    tail = _tail_help(tmp_path, 10)
    tail.position[0] = 3  # the writer is at row 3
    assert tail.pick([0], set()) == 0 and tail.pick([0], {0}) is None  # 6 rows left (unless a help was asked)
    assert tail.help(0) == 6 and tail.tail[0] == 6  # rows 9 down to 4
    assert tail.help(0) == 0 and tail.pick([0], set()) is None  # once per build
    take, mine = tail.taker(0), []
    got = [take(row, lambda row=row: mine.append(row) or f"own {row}") for row in range(3, 10)]
    assert mine == [3] and got[0] == "own 3"
    assert got[1:] == [ColumnsToInput()(r) for r in make_rows(10)[4:]]  # the helper's conversions, in order


def test_the_helper_stops_at_its_byte_bound_and_at_the_parts_end(tmp_path):
    tail = _tail_help(tmp_path, 10, max_bytes=1)  # every row's payload is over a byte
    assert tail.help(0) == 1 and tail.tail[0] == 1  # the last row only
    ended = _tail_help(tmp_path, 10)
    ended.end(0)  # the part is done (written or failed): nothing to convert, nothing to pick
    assert ended.pick([0], set()) is None and ended.help(0) == 0


def _as_memoryview(row: dict) -> drt.CacheInput:
    sample = ColumnsToInput()(row)
    return drt.CacheInput(memoryview(sample.data), sample.metadata)


def test_a_memoryview_payload_is_handed_over_as_its_bytes(tmp_path):
    tail = _tail_help(tmp_path, 4, _as_memoryview)
    assert tail.help(0) == 3  # rows 3 down to 1 (a memoryview does not pickle: handed over as bytes)
    take = tail.taker(0)
    assert [take(row, lambda: None) for row in (1, 2, 3)] == [ColumnsToInput()(r) for r in make_rows(4)[1:]]
