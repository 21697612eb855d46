"""The plan of a set build: which input rows make which part, decided by the input alone.

A plan never depends on the cluster (workers, ranks, nodes), so a rerun on another cluster finds the same parts.
Part ``k`` of set ``S`` is the cache named ``S-0000k`` (its name gives its cache id).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch_drt.cache import CacheInput
from torch_drt.sets.cache_set import validate_set_name

DEFAULT_ROWS_PER_PART = 1024
_MAX_NAME = 200  # the longest cache name
Convert = Callable[[Any], "CacheInput | None"]


def part_name(set_name: str, index: int) -> str:
    """The cache name of part ``index`` of set ``set_name``."""
    return f"{set_name}-{index:05d}"


class ColumnsToInput:
    """Turn a row into a ``CacheInput``: a ``CacheInput`` passes through; a mapping gives its data column as the
    payload and its other columns (or ``metadata_columns``) as the metadata.

    Args:
        data_column: the column holding the payload bytes.
        metadata_columns: the columns to keep as metadata (default: every other column).
    """

    def __init__(self, data_column: str = "data", metadata_columns: Sequence[str] | None = None) -> None:
        self.data_column = data_column
        self.metadata_columns = None if metadata_columns is None else tuple(metadata_columns)

    def __call__(self, row: Any) -> CacheInput:
        if isinstance(row, CacheInput):
            return row
        if not isinstance(row, Mapping):
            raise TypeError(f"expected a CacheInput or a mapping of columns, got {type(row).__name__} (pass fn=...)")
        if self.data_column not in row:
            raise KeyError(f"row has no data column {self.data_column!r} (columns: {sorted(row)})")
        keys = self.metadata_columns or [k for k in row if k != self.data_column]
        return CacheInput(row[self.data_column], {k: row[k] for k in keys})

    def __repr__(self) -> str:
        return f"ColumnsToInput(data_column={self.data_column!r}, metadata_columns={self.metadata_columns!r})"


@dataclass(frozen=True)
class RowRange:
    """Rows ``start .. stop-1`` of a random-access sequence, each turned into a sample by ``fn``.

    Attributes:
        rows: the whole sequence (``__len__`` and ``__getitem__``).
        start: first row of the range.
        stop: one past the last row.
        fn: row -> ``CacheInput`` (or None to leave the row out); default ``ColumnsToInput()``.
    """

    rows: Sequence[Any]
    start: int
    stop: int
    fn: Convert | None = None

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[Any]:
        rows = self.rows
        for i in range(self.start, self.stop):
            yield rows[i]


def part_bounds(total: int, rows_per_part: int | None = None, num_parts: int | None = None) -> list[tuple[int, int]]:
    """Split ``total`` rows into contiguous ``(start, stop)`` ranges, none empty.

    Args:
        total: number of rows.
        rows_per_part: rows in each part but the last (default ``DEFAULT_ROWS_PER_PART`` unless
            ``num_parts`` is given).
        num_parts: split into this many parts of near-equal size instead (fewer when there are fewer rows).

    Raises:
        ValueError: when both are given or one is < 1.
    """
    if rows_per_part is not None and num_parts is not None:
        raise ValueError(f"give rows_per_part or num_parts, not both ({rows_per_part=}, {num_parts=})")
    for value in (rows_per_part, num_parts):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{rows_per_part=} and {num_parts=} must be ints >= 1")
    if not isinstance(total, int) or total < 0:
        raise ValueError(f"{total=} must be an int >= 0")
    if num_parts is not None:
        n = min(num_parts, total)
        cuts = [total * k // n for k in range(n + 1)] if n else [0]
        return list(itertools.pairwise(cuts))
    size = rows_per_part or DEFAULT_ROWS_PER_PART
    return [(start, min(start + size, total)) for start in range(0, total, size)]


def split_rows(
    rows: Sequence[Any], fn: Convert | None = None, *, rows_per_part: int | None = None, num_parts: int | None = None
) -> list[RowRange]:
    """Split a random-access sequence of rows (file paths, dict rows, a source with ``__getitem__``) into parts.

    Args:
        rows: anything with ``__len__`` and ``__getitem__``.
        fn: row -> ``CacheInput`` (or None to leave the row out); default ``ColumnsToInput()``.
        rows_per_part: see ``part_bounds``.
        num_parts: see ``part_bounds``.

    Raises:
        TypeError: when ``rows`` has no ``__len__`` or ``__getitem__``.
    """
    if not (hasattr(rows, "__len__") and hasattr(rows, "__getitem__")):
        raise TypeError(
            f"splitting into parts needs random access (__len__ and __getitem__); {type(rows).__name__} has none "
            "(pass a list of sources instead, one part each)"
        )
    return [RowRange(rows, a, b, fn) for a, b in part_bounds(len(rows), rows_per_part, num_parts)]


@dataclass(frozen=True)
class PartPlan:
    """One part of a build.

    Attributes:
        index: the part's position in the set.
        name: its cache name (``part_name(set, index)``).
        first_row: its first row's position in the whole input (0 for a part made from its own source).
        rows: its input row count when known.
        origin: where its rows come from, in words (kept in the build journal).
        input: the part's rows (an iterable), each turned into a sample by ``convert``.
        convert: row -> ``CacheInput`` or None.
    """

    index: int
    name: str
    first_row: int
    rows: int | None
    origin: str
    input: Iterable[Any] | None
    convert: Convert

    def describe(self) -> dict[str, Any]:
        """What the build journal records of this part (everything but the rows)."""
        return {"name": self.name, "rows": self.rows, "origin": self.origin}


def _check_names(set_name: str, count: int) -> None:
    validate_set_name(set_name)
    if count < 1:
        raise ValueError("a cache set build needs at least one input")
    if len(last := part_name(set_name, count - 1)) > _MAX_NAME:
        raise ValueError(f"part name {last!r} would be longer than {_MAX_NAME} characters: use a shorter set name")


def _range_part(set_name: str, index: int, start: int, stop: int, rows: Iterable[Any] | None, fn: Convert) -> PartPlan:
    origin = f"rows {start}-{stop - 1}" if stop > start else "no rows"
    return PartPlan(index, part_name(set_name, index), start, stop - start, origin, rows, fn)


def plan_ranges(set_name: str, bounds: Sequence[tuple[int, int]], fn: Convert) -> list[PartPlan]:
    """The parts of ``set_name`` over row ranges whose rows are attached later (by the task that writes them).

    Raises:
        ValueError: for an invalid set name or no ranges.
    """
    _check_names(set_name, len(bounds))
    return [_range_part(set_name, k, a, b, None, fn) for k, (a, b) in enumerate(bounds)]


def plan_parts(set_name: str, inputs: Sequence[Any]) -> list[PartPlan]:
    """The parts of ``set_name``: one per input, which is a ``RowRange`` or a cache source.

    Raises:
        ValueError: for an invalid set name or no inputs.
        TypeError: for an input that is neither.
    """
    inputs = list(inputs)
    _check_names(set_name, len(inputs))
    plan = []
    for k, item in enumerate(inputs):
        if isinstance(item, RowRange):
            plan.append(_range_part(set_name, k, item.start, item.stop, item, item.fn or ColumnsToInput()))
        elif hasattr(item, "__iter__"):
            rows = len(item) if hasattr(item, "__len__") else None
            origin = f"source {getattr(item, 'name', type(item).__name__)!s}"
            plan.append(PartPlan(k, part_name(set_name, k), 0, rows, origin, item, ColumnsToInput()))
        else:
            raise TypeError(f"input {k} is a {type(item).__name__}: expected a RowRange or a cache source")
    return plan
