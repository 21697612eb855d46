"""dataset-rt format 3 records: ``u64 json_length, JSON metadata, payload``, the index spanning the whole record."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.layout import CacheLayout, backend_of
from torch_drt.locations import StoredFile

HEADER = 8  # bytes of the JSON length before each record's JSON


def _rows_by_shard(index: np.ndarray) -> list[tuple[int, np.ndarray]]:
    order = np.argsort(index["shard"], kind="stable")
    cuts = np.flatnonzero(np.diff(index["shard"][order])) + 1
    return [(int(index["shard"][rows[0]]), rows) for rows in np.split(order, cuts)]


def _json_lengths(shard: StoredFile, starts: np.ndarray) -> np.ndarray:
    view = shard.view()
    if view is not None:
        body = np.frombuffer(view, dtype=np.uint8)
        return body[starts[:, None] + np.arange(HEADER)].copy().view("<u8").ravel()
    heads = shard.gather(starts.tolist(), (starts + HEADER).tolist())
    return np.frombuffer(b"".join(heads), dtype="<u8")


def payload_index(layout: CacheLayout, index: np.ndarray, shards: Sequence[StoredFile]) -> np.ndarray:
    """Turn record extents into payload extents by reading each record's JSON length (vectorised per shard).

    Raises:
        CacheCorruptError: when a record is shorter than its header or its JSON overruns the record.
    """
    out = np.array(index)  # a private copy: (shard, offset, length) of the payloads
    for shard_no, rows in _rows_by_shard(index):
        lengths = index["length"][rows]
        if np.any(lengths < HEADER):
            bad = int(rows[np.argmax(lengths < HEADER)])
            raise CacheCorruptError(
                backend_of(layout).where(layout.shard_path(shard_no)),
                f"record of sample {bad} is shorter than its {HEADER}-byte header",
            )
        starts = index["offset"][rows].astype(np.int64)
        json_len = _json_lengths(shards[shard_no], starts)
        over = json_len > lengths - HEADER  # no overflow: lengths >= HEADER here
        if np.any(over):
            bad = int(rows[np.argmax(over)])
            raise CacheCorruptError(
                backend_of(layout).where(layout.shard_path(shard_no)),
                f"the metadata header of sample {bad} overruns its record",
            )
        out["offset"][rows] = index["offset"][rows] + HEADER + json_len
        out["length"][rows] = lengths - HEADER - json_len
    return out


def _same(stored: object, embedded: object) -> bool:
    if isinstance(stored, float) and isinstance(embedded, float | int) and not isinstance(embedded, bool):
        return stored == embedded or (math.isnan(stored) and math.isnan(float(embedded)))
    return type(stored) is type(embedded) and stored == embedded


def verify_embedded_metadata(
    layout: CacheLayout, index: np.ndarray, shards: Sequence[StoredFile], table: pa.Table
) -> None:
    """Compare each record's embedded JSON metadata with its ``metadata.arrow`` row, as dataset-rt's validation does.

    Raises:
        CacheCorruptError: naming the first sample whose embedded metadata is unreadable or disagrees.
    """
    names = table.column_names
    columns = [c.to_pylist() for c in table.columns]
    for shard_no, rows in _rows_by_shard(index):
        shard = shards[shard_no]
        starts = index["offset"][rows].astype(np.int64)
        json_len = _json_lengths(shard, starts)
        texts = shard.gather((starts + HEADER).tolist(), (starts + HEADER + json_len.astype(np.int64)).tolist())
        for row, text in zip(rows.tolist(), texts):
            try:
                embedded = json.loads(text)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                embedded, error = None, str(e)
            else:
                error = ""
            stored = {n: col[row] for n, col in zip(names, columns)}
            if (
                not isinstance(embedded, dict)
                or embedded.keys() != stored.keys()
                or not all(_same(stored[k], embedded[k]) for k in stored)
            ):
                detail = f": {error}" if error else f" ({embedded!r:.200} vs {stored!r:.200})"
                raise CacheCorruptError(
                    backend_of(layout).where(layout.shard_path(shard_no)),
                    f"embedded metadata does not match metadata.arrow for sample {row}{detail}",
                )
