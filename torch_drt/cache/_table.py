"""The active metadata table: building it from caches, validating user edits, and its derived arrays."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from torch_drt.cache._arrow_arrays import arrow_array
from torch_drt.cache._format import INTERNAL_PREFIX
from torch_drt.cache.layout import CacheLayout
from torch_drt.sampling.weighted import drawable_weights

IDENTITY = ("cache_id", "sample_id")
WEIGHT = "weight"


@dataclass(frozen=True)
class ActiveTable:
    """An immutable snapshot of the population: the table and the arrays sampling reads.

    Attributes:
        table: cache_id, sample_id, stored columns, weight, extra columns.
        cache_pos: per row, the position of its cache in the dataset's cache list (int32).
        sample_ids: per row, the sample's position in its cache (int64).
        weights: per row, its weight (float64).
    """

    table: pa.Table
    cache_pos: np.ndarray
    sample_ids: np.ndarray
    weights: np.ndarray

    @cached_property
    def fingerprint(self) -> str:
        """BLAKE2b of the rows' identity, weights and the column names: what a checkpoint must match."""
        h = hashlib.blake2b(digest_size=16)
        h.update(",".join(self.table.column_names).encode())
        for arr in (self.cache_pos, self.sample_ids, self.weights):
            h.update(np.ascontiguousarray(arr).data)
        return h.hexdigest()

    def __len__(self) -> int:
        return self.table.num_rows


def build_table(layouts: Sequence[CacheLayout], tables: Sequence[pa.Table]) -> ActiveTable:
    """The initial table: every sample of every cache once, weight 1.0, in cache then sample order.

    Args:
        layouts: the caches.
        tables: their validated stored metadata tables (``read_metadata``), one per cache.
    """
    parts = []
    for layout, meta in zip(layouts, tables):
        n = meta.num_rows
        ids = arrow_array(np.full(n, layout.cache_id, dtype=np.uint64))
        sids = arrow_array(np.arange(n, dtype=np.uint64))
        cols = [ids, sids, *meta.columns, arrow_array(np.ones(n))]
        names = [*IDENTITY, *meta.column_names, WEIGHT]
        parts.append(pa.Table.from_arrays(cols, names=names))
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    cache_pos = np.concatenate([np.full(layout.sample_count, i, dtype=np.int32) for i, layout in enumerate(layouts)])
    sample_ids = np.concatenate([np.arange(layout.sample_count, dtype=np.int64) for layout in layouts])
    return ActiveTable(table, cache_pos, sample_ids, np.ones(len(sample_ids)))


def coerce_table(obj: Any) -> pa.Table:
    """Accept a pyarrow Table or any Arrow-compatible table (polars, pandas, ``__arrow_c_stream__``)."""
    if isinstance(obj, pa.Table):
        return obj
    if isinstance(obj, pa.RecordBatch):
        return pa.Table.from_batches([obj])
    if hasattr(obj, "to_arrow"):  # polars DataFrame
        return coerce_table(obj.to_arrow())
    if type(obj).__module__.startswith("pandas"):
        return pa.Table.from_pandas(obj, preserve_index=False)
    if hasattr(obj, "__arrow_c_stream__"):
        return pa.table(obj)
    raise TypeError(f"expected a pyarrow Table or an Arrow-compatible table, got {type(obj).__name__}")


def _first_row(mask: pa.ChunkedArray | np.ndarray) -> int:
    arr = np.asarray(mask) if isinstance(mask, np.ndarray) else mask.to_numpy(zero_copy_only=False)
    return int(np.argmax(arr))


def _ids(table: pa.Table, name: str) -> np.ndarray:
    """An identity column as uint64 (cache ids use all 64 bits); negative or non-integral values are refused."""
    col = table.column(name)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise ValueError(f"column {name!r} must be integral, got Arrow type {col.type}")
    values = col.to_numpy()
    if pa.types.is_floating(col.type):
        bad = ~np.isfinite(values) | (values != np.floor(values))
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"column {name!r} row {row}: value {float(values[row])!r} is not integral")
        over = values >= 2.0**64
        if over.any():
            row = int(np.argmax(over))
            raise ValueError(f"column {name!r} row {row}: {float(values[row])!r} is out of range (above 2**64 - 1)")
    if not pa.types.is_unsigned_integer(col.type):
        negative = values < 0
        if negative.any():
            row = int(np.argmax(negative))
            raise ValueError(f"column {name!r} row {row}: {values[row]} is out of range (negative)")
    return values.astype(np.uint64)


def _check_names(table: pa.Table, stored: pa.Schema) -> None:
    names = table.column_names
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"column {dup!r} appears more than once in the metadata table")
    for name in (*IDENTITY, *stored.names, WEIGHT):
        if name not in names:
            hint = " (every row needs one; dataset-rt requires it too)" if name == WEIGHT else ""
            raise ValueError(f"column {name!r} is missing from the metadata table{hint}")
    internal = [n for n in names if n.startswith(INTERNAL_PREFIX)]
    if internal:
        raise ValueError(f"column {internal[0]!r}: names starting with {INTERNAL_PREFIX!r} are reserved (internal)")


def _cache_positions(ids: np.ndarray, cache_index: dict[int, int]) -> np.ndarray:
    known = np.array(sorted(cache_index), dtype=np.uint64)
    pos_in_known = np.searchsorted(known, ids)
    found = (pos_in_known < len(known)) & (known[np.minimum(pos_in_known, len(known) - 1)] == ids)
    if not found.all():
        row = int(np.argmax(~found))
        raise ValueError(f"column 'cache_id' row {row}: unknown cache id {int(ids[row])}")
    order = np.array([cache_index[int(k)] for k in known], dtype=np.int32)
    return order[pos_in_known]


def _weights(table: pa.Table) -> np.ndarray:
    wcol = table.column(WEIGHT)
    if not (pa.types.is_integer(wcol.type) or pa.types.is_floating(wcol.type)):
        raise ValueError(f"column 'weight' must be numeric, got Arrow type {wcol.type}")
    weights = wcol.to_numpy().astype(np.float64)
    bad = ~np.isfinite(weights) | (weights <= 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"column 'weight' row {row}: weight must be finite and > 0, got {float(weights[row])!r}")
    return weights


def _same_family(actual: pa.DataType, expected: pa.DataType) -> bool:
    checks = (pa.types.is_string, pa.types.is_large_string), (pa.types.is_integer,), (pa.types.is_floating,)
    for family in checks:
        if any(f(expected) for f in family) and any(f(actual) for f in family):
            return True
    return pa.types.is_boolean(actual) and pa.types.is_boolean(expected)


def validate_table(
    obj: Any, layouts: Sequence[CacheLayout], stored: pa.Schema, cache_index: dict[int, int]
) -> ActiveTable:
    """Validate an edited table whole and return its snapshot.

    Raises:
        ValueError: naming the column (and row) at fault: a column repeated, identity columns, stored columns or
            ``weight`` missing, a name starting with ``__``, identity values out of range or not integral, stored
            columns with another type, weights not numeric, not finite or not > 0, nulls, or no rows.
        TypeError: when ``obj`` is not a table at all.
    """
    table = coerce_table(obj)
    if table.num_rows < 1:
        raise ValueError("the metadata table must have at least one row")
    _check_names(table, stored)
    for name in table.column_names:
        col = table.column(name)
        if col.null_count:
            raise ValueError(f"column {name!r} row {_first_row(pc.is_null(col))}: null values are not allowed")
    ids, sids = _ids(table, "cache_id"), _ids(table, "sample_id")
    cache_pos = _cache_positions(ids, cache_index)
    counts = np.array([layout.sample_count for layout in layouts], dtype=np.uint64)
    bad = sids >= counts[cache_pos]
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"column 'sample_id' row {row}: {int(sids[row])} is out of range for its cache "
            f"({int(counts[cache_pos[row]])} samples)"
        )
    columns, names = [pa.array(ids), pa.array(sids)], list(IDENTITY)
    for fld in stored:
        col = table.column(fld.name)
        if col.type != fld.type:
            if not _same_family(col.type, fld.type):
                raise ValueError(f"column {fld.name!r} must keep its Arrow type {fld.type}, got {col.type}")
            try:
                col = col.cast(fld.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ValueError(f"column {fld.name!r} cannot be kept as {fld.type}: {e}") from None
        columns.append(col)
        names.append(fld.name)
    weights = _weights(table)
    columns.append(pa.array(weights))
    names.append(WEIGHT)
    for name in table.column_names:
        if name not in names:
            columns.append(table.column(name))
            names.append(name)
    table = pa.Table.from_arrays(columns, names=names)
    return ActiveTable(table, cache_pos, sids.astype(np.int64), drawable_weights(weights))
