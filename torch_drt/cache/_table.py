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

from torch_drt.cache.validate import CacheLayout, read_metadata

__all__ = ["ActiveTable", "build_table", "coerce_table", "validate_table"]

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


def build_table(layouts: Sequence[CacheLayout]) -> ActiveTable:
    """The initial table: every sample of every cache once, weight 1.0, in cache then sample order."""
    parts = []
    for layout in layouts:
        meta = read_metadata(layout)
        n = meta.num_rows
        ids = pa.array(np.full(n, layout.cache_id, dtype=np.uint64))
        sids = pa.array(np.arange(n, dtype=np.uint64))
        cols = [ids, sids, *meta.columns, pa.array(np.ones(n))]
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


def _integral(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if pa.types.is_integer(col.type):
        values = col.to_numpy().astype(np.int64, copy=False)
        if pa.types.is_unsigned_integer(col.type) and col.type.bit_width == 64:
            values = col.to_numpy().astype(np.uint64).astype(np.int64)
        return values
    if pa.types.is_floating(col.type):
        values = col.to_numpy()
        bad = ~np.isfinite(values) | (values != np.floor(values))
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"column {name!r} row {row}: value {float(values[row])!r} is not integral")
        return values.astype(np.int64)
    raise ValueError(f"column {name!r} must be integral, got Arrow type {col.type}")


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
        ValueError: naming the column (and row) at fault: identity columns missing, out of range or not
            integral, stored columns with another type, weights not numeric, not finite or not > 0, nulls,
            or no rows.
        TypeError: when ``obj`` is not a table at all.
    """
    table = coerce_table(obj)
    if table.num_rows < 1:
        raise ValueError("the metadata table must have at least one row")
    for name in (*IDENTITY, *stored.names):
        if name not in table.column_names:
            raise ValueError(f"column {name!r} is missing from the metadata table")
    for name in table.column_names:
        col = table.column(name)
        if col.null_count:
            raise ValueError(f"column {name!r} row {_first_row(pc.is_null(col))}: null values are not allowed")
    ids = _integral(table, "cache_id")
    sids = _integral(table, "sample_id")
    known = np.array(sorted(cache_index), dtype=np.int64)
    pos_in_known = np.searchsorted(known, ids)
    found = (pos_in_known < len(known)) & (known[np.minimum(pos_in_known, len(known) - 1)] == ids)
    if not found.all():
        row = int(np.argmax(~found))
        raise ValueError(f"column 'cache_id' row {row}: unknown cache id {int(ids[row])}")
    order = np.array([cache_index[int(k)] for k in known], dtype=np.int32)
    cache_pos = order[pos_in_known]
    counts = np.array([layout.sample_count for layout in layouts], dtype=np.int64)
    bad = (sids < 0) | (sids >= counts[cache_pos])
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"column 'sample_id' row {row}: {int(sids[row])} is out of range for its cache "
            f"({int(counts[cache_pos[row]])} samples)"
        )
    columns, names = [pa.array(ids.astype(np.uint64)), pa.array(sids.astype(np.uint64))], list(IDENTITY)
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
    if WEIGHT in table.column_names:
        wcol = table.column(WEIGHT)
        if not (pa.types.is_integer(wcol.type) or pa.types.is_floating(wcol.type)):
            raise ValueError(f"column 'weight' must be numeric, got Arrow type {wcol.type}")
        weights = wcol.to_numpy().astype(np.float64)
        bad = ~np.isfinite(weights) | (weights <= 0)
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"column 'weight' row {row}: weight must be finite and > 0, got {float(weights[row])!r}")
    else:
        weights = np.ones(table.num_rows)
    columns.append(pa.array(weights))
    names.append(WEIGHT)
    for name in table.column_names:
        if name not in names:
            columns.append(table.column(name))
            names.append(name)
    return ActiveTable(pa.Table.from_arrays(columns, names=names), cache_pos, sids, weights)
