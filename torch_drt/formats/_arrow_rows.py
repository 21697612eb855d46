"""Shared by the Parquet and Arrow readers: pyarrow sources over stored files, and rows of decoded tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from torch_drt.cache.errors import CacheCorruptError, FormatError
from torch_drt.formats._file_reads import RangeReader
from torch_drt.locations import StoredFile

T = TypeVar("T")
_ARROW_ERRORS = (pa.ArrowException, OSError, ValueError, IndexError, KeyError, TypeError, OverflowError, EOFError)


def arrow_source(file: StoredFile, block: int = 1 << 20) -> pa.NativeFile:
    """A pyarrow input over ``file``: a zero-copy buffer of the local map, else range reads of ``block`` bytes."""
    view = file.view()
    if view is not None:
        return pa.BufferReader(pa.py_buffer(view))
    return pa.PythonFile(RangeReader(file, block), mode="r")


def decoding(where: Path | str, what: str, fn: Callable[[], T]) -> T:
    """``fn()``, its pyarrow (or I/O) failure raised as a ``FormatError`` naming ``where`` and ``what``."""
    try:
        return fn()
    except CacheCorruptError:
        raise
    except _ARROW_ERRORS as e:
        raise FormatError(where, f"{what}: {type(e).__name__}: {e}") from None


def rows_of(table: pa.Table | pa.RecordBatch, indices: list[int]) -> list[dict[str, Any]]:
    """Rows ``indices`` of ``table`` as dicts of Python values (one conversion for all of them)."""
    if len(indices) == 1:
        return table.slice(indices[0], 1).to_pylist()
    return table.take(pa.array(indices, type=pa.int64())).to_pylist()


def batched_rows(names: Sequence[str], loaded: dict[int, Any], places: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """The rows at ``places`` of decoded Arrow tables, converted once per shard."""
    out: list[dict[str, Any]] = [{}] * len(places)
    by_shard: dict[int, list[int]] = {}
    for k, (s, _) in enumerate(places):
        by_shard.setdefault(s, []).append(k)
    for s, ks in by_shard.items():
        rows = decoding(names[s], "rows", partial(rows_of, loaded[s], [places[k][1] for k in ks]))
        for k, row in zip(ks, rows):
            out[k] = row
    return out


class PyRows:
    """A decoded table's rows as Python dicts, converted once (a shuffled epoch then takes each row from here
    instead of converting a few rows of each table per batch); only for flat schemas (``flat``), whose Python
    values are immutable, so that a sample handed out (a fresh dict) never shares anything mutable with the cache.

    Attributes:
        rows: one dict per row.
        nbytes: the memory they hold, about: the table's bytes and a Python object per row and value.
    """

    __slots__ = ("nbytes", "rows")

    def __init__(self, table: pa.Table | pa.RecordBatch) -> None:
        self.rows = table.to_pylist()
        self.nbytes = int(table.nbytes) + table.num_rows * (232 + 80 * table.num_columns)


def flat(schema: pa.Schema) -> bool:
    """True when every field's Python value is immutable (no lists, structs, maps, unions or extension types)."""
    return not any(pa.types.is_nested(f.type) or isinstance(f.type, pa.ExtensionType) for f in schema)
