"""Small Arrow tables of many column types, written with pyarrow's own writers (the oracle is pyarrow's reader)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def table(n: int, start: int = 0) -> pa.Table:
    """``n`` rows of ints, floats, strings, bytes, lists, structs, timestamps and nulls."""
    rows = range(start, start + n)
    return pa.table({
        "i": pa.array(list(rows), pa.int64()),
        "u8": pa.array([i % 256 for i in rows], pa.uint8()),
        "f": pa.array([i / 3 for i in rows], pa.float32()),
        "s": [f"text {i} é" * (i % 4) for i in rows],
        "b": [bytes([i % 256]) * (i % 5) for i in rows],
        "l": [list(range(i % 6)) for i in rows],
        "st": [{"x": i, "y": str(i)} for i in rows],
        "t": [datetime.datetime(2026, 1, 1) + datetime.timedelta(seconds=i) for i in rows],
        "maybe": [None if i % 3 == 0 else i for i in rows],
    })


def write_parquet(path: Path, n: int, start: int = 0, row_group: int = 7) -> pa.Table:
    t = table(n, start)
    pq.write_table(t, path, row_group_size=row_group, write_page_checksum=True)
    return t


def write_ipc(path: Path, n: int, start: int = 0, batch: int = 6, stream: bool = False) -> pa.Table:
    t = table(n, start)
    with pa.OSFile(str(path), "wb") as sink:
        writer = pa.ipc.new_stream(sink, t.schema) if stream else pa.ipc.new_file(sink, t.schema)
        for b in t.to_batches(max_chunksize=batch):
            writer.write_batch(b)
        writer.close()
    return t
