"""ArrowDataset: Arrow IPC files (file or stream format, e.g. the ``datasets`` library's cache and ``save_to_disk``
files) read where they lie, one shard per record batch, one field per column.

Opening makes one pass over each file's messages (zero-copy from the map for a local file; sequential reads of
``RemoteConfig.chunk_bytes`` for a URL) and keeps where each record batch lies; a batch is read by its byte range
when a sample of it is first asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from torch_drt.cache.errors import FormatError
from torch_drt.formats._arrow_rows import arrow_source, batched_rows, decoding, rows_of
from torch_drt.formats._file_reads import gather_one
from torch_drt.formats._files import Files, many
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations import StoredFile
from torch_drt.locations.remote_config import RemoteConfig

_FILE_MAGIC = b"ARROW1"
_STATE_LIMIT = 16 << 20


class ArrowDataset(ShardSet):
    """Arrow IPC files as a map-style dataset: sample ``i`` is row ``i`` of the files in order, a dict of columns.

    Args:
        location: a file (``.arrow``, ``.feather``, ``.ipc``), a list of them, or a directory: a ``datasets``
            ``save_to_disk`` directory (its ``state.json`` lists the data files) or else its ``.arrow`` files,
            sorted by name. Local paths or fsspec URLs.
        columns: the columns kept (default: all).
        storage_options: fsspec options of URLs.
        remote_config: retries, time-outs and range settings of URLs (``torch_drt.RemoteConfig``).
        cache_shards: decoded record batches kept per process at least.
        cache_bytes: decoded record batches kept per process while they hold at most this many bytes in all.

    Raises:
        FormatError: a file is no Arrow IPC file, holds dictionary batches, or its schema differs from the first's.
    """

    def __init__(
        self,
        location: str | Path | Sequence[str | Path],
        *,
        columns: Sequence[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
        cache_shards: int = 4,
        cache_bytes: int = 256 << 20,
    ) -> None:
        self._files = Files(storage_options, remote_config)
        self._block = (remote_config or RemoteConfig()).chunk_bytes
        self.files = self._data_files(location)
        self.columns = None if columns is None else list(columns)
        self.schema: pa.Schema | None = None
        self._batches: list[tuple[int, int, int]] = []  # (file, start, end) of each record batch message
        counts, names = [], []
        for f, (directory, rel) in enumerate(self.files):
            file = self._files.open(directory, rel)
            try:
                schema, found = decoding(file.where, "messages", partial(self._index, file))
            finally:
                file.close()
            schema = schema.remove_metadata()
            if self.schema is None:
                self.schema = schema
            elif not schema.equals(self.schema):
                raise FormatError(file.where, f"schema {schema} differs from the first file's {self.schema}")
            for b, (start, end, rows) in enumerate(found):
                self._batches.append((f, start, end))
                counts.append(rows)
                names.append(f"{file.where}#batch={b}")
        if self.columns is not None:
            missing = sorted(set(self.columns) - set(self.schema.names if self.schema else ()))
            if missing:
                raise ValueError(f"columns {missing} are not in the files' schema {self.schema}")
        super().__init__(counts, names, cache_shards, cache_bytes)

    def _data_files(self, location: str | Path | Sequence[str | Path]) -> list[tuple[str, str]]:
        locations = many(location)
        if len(locations) == 1 and self._files.is_dir(locations[0]):
            directory = locations[0].rstrip("/")
            if "state.json" in self._files.names(directory):
                where = self._files.where(directory, "state.json")
                try:
                    state = json.loads(self._files.read(directory, "state.json", _STATE_LIMIT))
                    names = [str(entry["filename"]) for entry in state["_data_files"]]
                except (ValueError, KeyError, TypeError) as e:
                    raise FormatError(where, f"not a datasets state file: {type(e).__name__}: {e}") from None
                if any("/" in n or n in ("", ".", "..") for n in names):
                    raise FormatError(where, f"_data_files names a file outside the directory: {names}")
                return [(directory, n) for n in names]
        return self._files.expand(location, (".arrow", ".feather", ".ipc"))

    def _index(self, file) -> tuple[pa.Schema, list[tuple[int, int, int]]]:
        """The schema and (start, end, rows) of each record batch message, in one pass over the file."""
        source = arrow_source(file, self._block)
        if source.read(6) == _FILE_MAGIC:
            source.seek(8)  # the file format: magic, padding, then the stream format
        else:
            source.seek(0)
        reader = pa.ipc.MessageReader.open_stream(source)
        schema_msg = reader.read_next_message()
        if schema_msg is None or schema_msg.type != "schema":
            raise FormatError(file.where, "the first message is not a schema")
        schema = pa.ipc.read_schema(schema_msg)
        found, start = [], source.tell()
        while True:
            try:
                msg = reader.read_next_message()
            except StopIteration:
                break
            if msg is None:
                break
            end = source.tell()
            if msg.type == "dictionary batch":
                raise FormatError(file.where, "dictionary-encoded columns are not supported")
            if msg.type != "record batch":
                raise FormatError(file.where, f"unexpected {msg.type!r} message at byte {start}")
            found.append((start, end, pa.ipc.read_record_batch(msg, schema).num_rows))
            start = end
        return schema, found

    def _load(self, shard: int) -> pa.RecordBatch:
        f, start, end = self._batches[shard]
        directory, rel = self.files[f]
        where = self.shard_names[shard]
        file = self._files.open(directory, rel)
        try:
            data = gather_one(file, start, end)
        finally:
            file.close()
        assert self.schema is not None

        def decode() -> pa.RecordBatch:
            batch = pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(data)), self.schema)
            batch.validate(full=True)
            return batch if self.columns is None else batch.select(self.columns)

        batch = decoding(where, "record batch", decode)
        if batch.num_rows != self.shard_counts[shard]:
            raise FormatError(where, f"record batch has {batch.num_rows} rows, {self.shard_counts[shard]} when opened")
        return batch

    def _shard_remote_file(self, shard: int) -> StoredFile | None:
        directory, rel = self.files[self._batches[shard][0]]
        return self._files.open(directory, rel) if self._files.remote(directory) else None

    def _nbytes(self, decoded: pa.RecordBatch) -> int:
        return int(decoded.nbytes)

    def _sample(self, decoded: pa.RecordBatch, shard: int, index: int) -> dict[str, Any]:
        return decoding(self.shard_names[shard], "row", lambda: rows_of(decoded, [index])[0])

    def _samples(self, loaded: dict[int, Any], places: list[tuple[int, int]]) -> list[dict[str, Any]]:
        return batched_rows(self.shard_names, loaded, places)
