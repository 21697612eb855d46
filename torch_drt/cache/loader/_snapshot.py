"""The cache loader's metadata snapshot: one immutable Arrow file the parent writes and every loading process maps.

Its leading columns are the rows' identity (cache position, sample id, cache id) and cumulative weight; the
metadata columns follow. Processes map it read-only, so they share its pages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from torch_drt.cache._arrow_arrays import arrow_array, numpy_view

CACHE_POS, SAMPLE_ID, CACHE_ID, CUM_WEIGHT = "__cache_pos", "__sample_id", "__cache_id", "__cum_weight"
_IDENTITY = 4  # the snapshot's leading columns; the metadata columns follow


def export_snapshot(active: Any, cache_ids: list[int], path: Path) -> Path:
    """Write the active table as one Arrow IPC file the consumers map: identity, cumulative weight, metadata."""
    table = active.table
    meta = [n for n in table.column_names if n not in ("cache_id", "sample_id", "weight")]
    ids = np.asarray(cache_ids, dtype=np.uint64)[active.cache_pos]
    export = pa.Table.from_arrays(
        [
            arrow_array(active.cache_pos.astype(np.int32)),
            arrow_array(active.sample_ids.astype(np.int64)),
            arrow_array(ids),
            arrow_array(np.cumsum(active.weights)),
            *[table.column(n) for n in meta],
        ],
        names=[CACHE_POS, SAMPLE_ID, CACHE_ID, CUM_WEIGHT, *meta],
    ).combine_chunks()
    with ipc.new_file(str(path), export.schema) as writer:
        writer.write_table(export)
    return path


def _column(table: pa.Table, name: str) -> np.ndarray:
    return numpy_view(table.column(name).chunk(0))


def _plain(column: pa.ChunkedArray) -> np.ndarray | None:
    """``column`` as an array viewing the map where its values read back the same as ``to_pylist()``'s (integers,
    32- and 64-bit floats, without nulls), else None."""
    kind = column.type
    if column.num_chunks != 1 or column.null_count or not (
        pa.types.is_integer(kind) or kind in (pa.float32(), pa.float64())
    ):
        return None
    return numpy_view(column.chunk(0))


class Snapshot:
    """An exported snapshot mapped read-only: its identity columns as arrays (views of the map) and its metadata.

    ``meta_values(rows)`` reads the metadata of a batch of rows: plain numeric columns straight from their mapped
    arrays, the others through Arrow (both give the same Python values).

    Args:
        path: the file ``export_snapshot`` wrote.
    """

    def __init__(self, path: str | Path) -> None:
        self.table = ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        self.meta = self.table.select(self.table.column_names[_IDENTITY:])
        self.cache_pos = _column(self.table, CACHE_POS)
        self.sample_ids = _column(self.table, SAMPLE_ID)
        self.cache_ids = _column(self.table, CACHE_ID)
        self.cum_weights = _column(self.table, CUM_WEIGHT)
        self._plain = [_plain(column) for column in self.meta.columns]
        self._arrow = [i for i, array in enumerate(self._plain) if array is None]
        self._arrow_meta = self.meta.select(self._arrow)

    def meta_values(self, rows: np.ndarray) -> tuple[list[str], list[list[Any]]]:
        """The metadata column names and, per column, the Python values of ``rows`` (what
        ``self.meta.take(rows)``'s columns' ``to_pylist()`` give)."""
        values: list[list[Any]] = [[] if array is None else array[rows].tolist() for array in self._plain]
        if self._arrow:
            taken = self._arrow_meta.take(arrow_array(rows))
            for i, column in zip(self._arrow, taken.columns):
                values[i] = column.to_pylist()
        return self.meta.column_names, values

    def __len__(self) -> int:
        return self.table.num_rows
