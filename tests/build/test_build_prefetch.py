"""A worker's next part converted ahead (``torch_drt/build/_prefetch.py``): in order from the part's first row, at
most ``max_bytes`` of payloads, ending before a row that raises (its writer converts it again and reports it)."""

from __future__ import annotations

from build_helpers import BadAt, make_rows

from torch_drt.build import ColumnsToInput, split_rows
from torch_drt.build._prefetch import Prefetch, can_prefetch
from torch_drt.build.plan import plan_parts


def _part(rows, fn=None, k=1):
    return plan_parts("s", split_rows(rows, fn, rows_per_part=10))[k]


def test_the_part_is_converted_in_order_from_its_first_row():
    rows = make_rows(30)
    samples = Prefetch(_part(rows)).take()
    assert [s.metadata["label"] for s in samples] == list(range(10, 20))
    assert samples == [ColumnsToInput()(r) for r in rows[10:20]]


def test_it_stops_once_it_holds_max_bytes():
    rows = make_rows(30)
    sizes = [len(ColumnsToInput()(r).data) for r in rows[10:20]]
    samples = Prefetch(_part(rows), max_bytes=sum(sizes[:3])).take()
    assert len(samples) == 3


def test_a_row_that_raises_ends_it_before_that_row():
    samples = Prefetch(_part(make_rows(30), BadAt(13))).take()
    assert [s.metadata["label"] for s in samples] == [10, 11, 12]


def test_only_row_ranges_are_converted_ahead():
    class Source:
        name = "src"

        def __iter__(self):
            return iter(())

    assert can_prefetch(_part(make_rows(30)))
    assert not can_prefetch(plan_parts("s", [Source()])[0])
