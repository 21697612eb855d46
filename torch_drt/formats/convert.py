"""convert: a dataset in another system's format written as a torch_drt cache, streaming (a batch of samples and
the reader's few decoded shards in memory, never the dataset).

A foreign sample is a dict of fields; a cache sample is one payload and scalar metadata columns. The fields whose
values are Python ``bool``, ``int``, ``float`` or ``str`` in the first sample become metadata columns (``__key__``
and ``__url__`` are named ``key`` and ``url``); the others make the payload, in the code-free form of
``torch_drt.formats.fields`` (``decode_fields(sample.data)`` gives them back, types, dtypes and shapes kept), or,
with ``payload=FIELD``, that one bytes field as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from torch_drt.cache.records import CacheInput, MetadataValue
from torch_drt.describe import described
from torch_drt.formats.fields import encode_fields
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations.location import Location
from torch_drt.locations.remote_config import RemoteConfig

_SCALARS = (bool, int, float, str)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class ConvertError(ValueError):
    """A sample does not fit the mapping of fields to cache columns (the sample and field are named)."""


@dataclass(frozen=True)
class Converted:
    """What ``convert`` wrote.

    Attributes:
        path: the cache (a ``Path``, or its URL).
        format: the format it was read from.
        samples: samples written.
        columns: each metadata column and the field it holds.
        payload: the bytes field written as the payload, or None for the fields form of every other field.
        payload_fields: the fields in the payload (the fields form; empty for a raw payload field).
    """

    path: Path | str
    format: str
    samples: int
    columns: dict[str, str]
    payload: str | None
    payload_fields: tuple[str, ...]

    def __repr__(self) -> str:  # bounded: many fields print as their count
        return described(self, path=str(self.path), format=self.format, samples=self.samples, columns=self.columns,
                         payload=self.payload, payload_fields=self.payload_fields)


def column_name(field: str) -> str:
    """The metadata column of ``field``: WebDataset's ``__key__`` is ``key``, any ``__name__`` is ``name``."""
    return field[2:-2] if len(field) > 4 and field.startswith("__") and field.endswith("__") else field


def _is_scalar(value: Any) -> TypeGuard[MetadataValue]:
    return type(value) in _SCALARS and (type(value) is not int or _INT64[0] <= value <= _INT64[1])


class _Source:
    """The foreign samples as ``CacheInput``s, read shard by shard a batch at a time (the writer streams them)."""

    def __init__(self, ds: ShardSet, name: str, metadata: Sequence[str], payload: str | None,
                 drop: Sequence[str], batch: int) -> None:
        self.ds, self.name, self.metadata, self.payload = ds, name, tuple(metadata), payload
        self.drop, self.batch = frozenset(drop), batch
        self.columns = {column_name(f): f for f in self.metadata}
        self.error: BaseException | None = None

    def __len__(self) -> int:
        return len(self.ds)

    def _input(self, i: int, sample: Any) -> CacheInput:
        if not isinstance(sample, Mapping):  # a LitData item that is no dict: all of it is the payload
            if self.metadata or self.payload:
                raise ConvertError(f"sample {i} is a {type(sample).__name__}, not a dict of fields")
            return CacheInput(encode_fields(sample), {})
        meta: dict[str, MetadataValue] = {}
        for column, field in self.columns.items():
            value = sample.get(field)
            if not _is_scalar(value):
                raise ConvertError(f"sample {i}: field {field!r} is {type(value).__name__} ({str(value)[:40]!r}), "
                                   "not the bool, int, float or str of the first sample: leave it out of "
                                   "metadata= (--metadata) so the payload keeps it")
            meta[column] = value
        rest = {k: v for k, v in sample.items() if k not in self.drop and k not in self.metadata}
        if self.payload is not None:
            data = rest.pop(self.payload, None)
            if not isinstance(data, bytes | bytearray | memoryview):
                raise ConvertError(f"sample {i}: payload field {self.payload!r} is {type(data).__name__}, not bytes")
            if rest:
                raise ConvertError(f"sample {i}: fields {sorted(rest)} are neither metadata nor the payload: "
                                   "drop them (drop=, --drop) or leave payload= out to keep every field")
            return CacheInput(data, meta)
        try:
            return CacheInput(encode_fields(rest), meta)
        except ValueError as e:
            raise ConvertError(f"sample {i}: {e}") from None

    def __iter__(self) -> Iterator[CacheInput]:
        ds, step = self.ds, self.batch
        try:
            for shard in range(ds.num_shards):  # shard by shard: the reader decodes each shard once
                start, stop = int(ds.shard_starts[shard]), int(ds.shard_starts[shard + 1])
                for at in range(start, stop, step):
                    for k, sample in enumerate(ds.__getitems__(list(range(at, min(at + step, stop))))):
                        yield self._input(at + k, sample)
        except Exception as e:  # kept, so convert raises it as it is (the writer reports a source's error as text)
            self.error = e
            raise


def _first_fields(ds: ShardSet, metadata: Sequence[str] | None, payload: str | None,
                  drop: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """The metadata fields (given, or the first sample's scalar fields) and the payload's fields."""
    first = ds[0] if len(ds) else {}
    if not isinstance(first, Mapping):
        return [], ()
    fields = [k for k in first if k not in set(drop)]
    if payload is not None and payload not in fields:
        raise ConvertError(f"{payload=} is not a field of the first sample (fields: {sorted(fields)})")
    if metadata is None:
        metadata = [k for k in fields if k != payload and _is_scalar(first[k])]
    missing = sorted(set(metadata) - set(fields))
    if missing:
        raise ConvertError(f"metadata fields {missing} are not fields of the first sample (fields: {sorted(fields)})")
    from torch_drt.cache._format import validate_column_name

    for field in metadata:
        try:
            validate_column_name(column_name(field))
        except ValueError as e:
            raise ConvertError(f"field {field!r} cannot be a metadata column ({e}): leave it out of metadata=, "
                               "so the payload keeps it") from None
    columns = [column_name(f) for f in metadata]
    if len(set(columns)) < len(columns):
        raise ConvertError(f"metadata fields {list(metadata)} name one column twice (columns: {columns})")
    rest = tuple(k for k in fields if k not in metadata and k != payload)
    return list(metadata), () if payload is not None else rest


def _exists(where: Location) -> bool:
    if not where.is_remote:
        return where.path.exists() or where.path.is_symlink()
    from torch_drt.locations.remote_store import RemoteStore

    store = RemoteStore(where.url, where.storage_options, where.remote_config)
    return store.read_or_none("manifest.json", 1) is not None


def convert(
    src: str | Path | Sequence[str | Path],
    dst: str | Path,
    *,
    format: str | None = None,
    metadata: Sequence[str] | None = None,
    payload: str | None = None,
    drop: Sequence[str] = (),
    allow_pickle: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    dst_storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
    writer_config: Any = None,
    batch_size: int = 256,
) -> Converted:
    """Write the dataset at ``src`` (any format of ``torch_drt.formats``) as a torch_drt cache at ``dst``.

    Args:
        src: the foreign dataset: a directory, file, list or brace pattern, local or a URL.
        dst: the cache to write (``ROOT/NAME``, a directory or a URL); it must not exist yet.
        format: the source's format (default: told from what lies there).
        metadata: the fields kept as metadata columns (default: the first sample's bool, int, float and str
            fields); every sample must have them, of that kind.
        payload: a bytes field written as the payload as it is (every other field is then metadata or dropped);
            default: every non-metadata field, in the fields form (``decode_fields``).
        drop: fields left out.
        allow_pickle: decode pickled columns (MDS ``pkl``, LitData ``pickle``): runs code from the data.
        storage_options: fsspec options of ``src``.
        dst_storage_options: fsspec options of ``dst`` (default: ``storage_options``).
        remote_config: remote settings of both.
        writer_config: a ``WriterConfig`` (compression, shard size, progress); its writer runs on this thread.
        batch_size: samples read at a time (>= 1).

    Returns:
        ``Converted``: where the cache is and how the fields were mapped.

    Raises:
        FileExistsError: when ``dst`` exists (nothing is written; a published cache is never touched).
        FormatError: the source is damaged (``UnsafeEncodingError`` for pickle without ``allow_pickle``).
        ConvertError: a sample does not fit the mapping.
    """
    from torch_drt.cache import CacheSourcesError, DatasetRuntime, WriterConfig
    from torch_drt.cache._format import validate_source_name
    from torch_drt.formats.detect import detect_format, open_dataset

    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"{batch_size=} must be an int >= 1")
    dst_options = storage_options if dst_storage_options is None else dst_storage_options
    where = Location.parse(dst, dst_options, remote_config)
    if not where.is_remote:
        where = Location.parse(where.path.absolute())
    name = validate_source_name(where.name)
    if _exists(where):
        raise FileExistsError(
            f"{where.redacted()} already exists: convert writes a new cache, remove it first or choose another"
        )
    root = where.parent.target
    fmt = format or detect_format(src, storage_options, remote_config)
    extra: dict[str, Any] = {"allow_pickle": True} if allow_pickle else {}
    if fmt != "webdataset":  # a tar's samples are read by ranges: no decoded shards are kept
        extra["cache_shards"] = 1
    ds = open_dataset(src, fmt, storage_options=storage_options, remote_config=remote_config, **extra)
    fields, payload_fields = _first_fields(ds, metadata, payload, drop)
    source = _Source(ds, name, fields, payload, drop, batch_size)
    config = (writer_config or WriterConfig()).model_copy(update={"num_processes": 0})
    try:
        with DatasetRuntime(1) as runtime:
            (result,) = runtime.write_cache([source], root, writer_config=config, storage_options=dst_options,
                                            remote_config=remote_config)
    except CacheSourcesError:
        if source.error is not None:
            raise source.error from None
        raise
    return Converted(result.path, fmt, len(ds), dict(source.columns), payload, payload_fields)
