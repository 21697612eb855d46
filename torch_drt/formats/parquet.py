"""ParquetDataset: Parquet files read where they lie, one shard per row group, one field per column."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from torch_drt.cache.errors import FormatError
from torch_drt.formats._arrow_rows import PyRows, arrow_source, batched_rows, decoding, flat, rows_of
from torch_drt.formats._files import Files
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations import StoredFile
from torch_drt.locations.remote_config import RemoteConfig


class ParquetDataset(ShardSet):
    """Parquet files as a map-style dataset: sample ``i`` is row ``i`` of the files in order, a dict of its columns.

    Opening reads each file's footer only; a row group is read (only the chosen columns) when a sample of it is
    first asked for, and decoded row groups are kept per process: up to ``cache_bytes`` of them (at least the last
    ``cache_shards``), so that a shuffled epoch over a file decodes each row group about once. Row groups of flat
    columns (no lists, structs or maps) are kept as Python rows, converted once, each sample a fresh dict of them.

    Args:
        location: a file, a directory (its ``.parquet`` files, sorted by name) or a list of files; local paths or
            fsspec URLs (``s3://bucket/data/``).
        columns: the columns read (default: all).
        storage_options: fsspec options of URLs (credentials, ``client_kwargs={"endpoint_url": ...}``).
        remote_config: retries, time-outs and range settings of URLs (``torch_drt.RemoteConfig``).
        cache_shards: decoded row groups kept per process at least.
        cache_bytes: decoded row groups kept per process while they hold at most this many bytes in all.

    Raises:
        FormatError: a file is no Parquet file, or its schema differs from the first file's.
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
        self.files = self._files.expand(location, (".parquet", ".pq"))
        self.columns = None if columns is None else list(columns)
        self._open: dict[int, tuple[StoredFile, pq.ParquetFile]] = {}
        self._file_locks: dict[int, threading.Lock] = {}  # one reader per file: pyarrow's is not thread-safe
        self.schema: pa.Schema | None = None
        self._groups: list[tuple[int, int]] = []
        counts, names = [], []
        for f, (directory, rel) in enumerate(self.files):
            where = self._files.where(directory, rel)
            pf = self._parquet(f)
            meta = pf.metadata
            schema = decoding(where, "schema", partial(getattr, pf, "schema_arrow")).remove_metadata()
            if self.schema is None:
                self.schema = schema
            elif not schema.equals(self.schema):
                raise FormatError(where, f"schema {schema} differs from the first file's {self.schema}")
            for g in range(meta.num_row_groups):
                self._groups.append((f, g))
                counts.append(meta.row_group(g).num_rows)
                names.append(f"{where}#row_group={g}")
        if self.columns is not None:
            missing = sorted(set(self.columns) - set(self.schema.names if self.schema else ()))
            if missing:
                raise ValueError(f"columns {missing} are not in the files' schema {self.schema}")
        assert self.schema is not None
        read = self.schema if self.columns is None else pa.schema([self.schema.field(c) for c in self.columns])
        self._python_rows = flat(read)  # row groups kept as Python rows (PyRows)
        super().__init__(counts, names, cache_shards, cache_bytes)

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_open": {}, "_file_locks": {}}

    def _parquet(self, f: int) -> pq.ParquetFile:
        """File ``f``'s reader (opened once per process), its file checked first: a local map that shrank would
        kill the process on access (SIGBUS), so a truncated file is a ``CacheCorruptError`` instead."""
        opened = self._open.get(f)
        if opened is None:
            directory, rel = self.files[f]
            file = self._files.open(directory, rel)
            source = arrow_source(file)
            pf = decoding(file.where, "footer", lambda: pq.ParquetFile(source, page_checksum_verification=True))
            opened = self._open[f] = (file, pf)
        opened[0].check()
        return opened[1]

    def _load(self, shard: int) -> pa.Table | PyRows:
        f, g = self._groups[shard]
        where = self.shard_names[shard]
        with self._lock:
            file_lock = self._file_locks.setdefault(f, threading.Lock())
        with file_lock:  # threads share a file's reader (and, remotely, its position): one read at a time per file
            table = decoding(where, "row group", lambda: self._parquet(f).read_row_group(g, columns=self.columns))
        if table.num_rows != self.shard_counts[shard]:
            raise FormatError(where, f"row group has {table.num_rows} rows, the footer records "
                                     f"{self.shard_counts[shard]}")
        return decoding(where, "rows", lambda: PyRows(table)) if self._python_rows else table

    def _shard_remote_file(self, shard: int) -> StoredFile | None:
        directory, rel = self.files[self._groups[shard][0]]
        return self._files.open(directory, rel) if self._files.remote(directory) else None

    def _nbytes(self, decoded: pa.Table | PyRows) -> int:
        return int(decoded.nbytes)

    def _sample(self, decoded: pa.Table | PyRows, shard: int, index: int) -> dict[str, Any]:
        if isinstance(decoded, PyRows):
            return dict(decoded.rows[index])
        return decoding(self.shard_names[shard], "row", lambda: rows_of(decoded, [index])[0])

    def _samples(self, loaded: dict[int, Any], places: list[tuple[int, int]]) -> list[dict[str, Any]]:
        if self._python_rows:
            return [dict(loaded[s].rows[i]) for s, i in places]
        return batched_rows(self.shard_names, loaded, places)

