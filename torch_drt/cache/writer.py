"""Writing one source into a staging directory and publishing it by atomic rename."""

from __future__ import annotations

import functools
import logging
import os
import traceback
import uuid
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import xxhash

from torch_drt.cache._compression import compressor
from torch_drt.cache._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_DTYPES,
    INDEX_FILE,
    KIND_TO_ARROW,
    MANIFEST_FILE,
    METADATA_FILE,
    SHARD_DIR,
    UID_KEY,
    cache_id_for,
    kind_of,
    shard_name,
    validate_column_name,
    validate_source_name,
)
from torch_drt.cache._shard_files import ShardFiles
from torch_drt.cache.config import WriterConfig
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.remote_config import RemoteConfig
from torch_drt.cache.remote_publish import write_remote
from torch_drt.cache.remote_store import RemoteStore, is_url
from torch_drt.cache.validate import is_complete_cache, open_cache
from torch_drt.checksums import sha256_file, xxh3_128_hex
from torch_drt.publish import StagingDir, fsync_dir, move_aside, publish_lock, remove_stale_staging, write_json_atomic

__all__ = ["write_source"]

logger = logging.getLogger("torch_drt.cache")

WriteMode = Literal["create", "reuse"]
_PY_TYPE = {"bool": bool, "int": int, "float": float, "string": str}
_PROGRESS_EVERY = 256


class _BadInput(Exception):
    """A problem with what the source yielded; becomes the source's CacheWriteError message."""


def _coerce(value: object, kind: str) -> object:
    """Accept numpy scalars of the right kind; anything else of another kind is refused."""
    if kind_of(value) == kind:
        return value.item() if isinstance(value, np.generic) else value
    raise TypeError


def _schema_of(meta: Mapping[str, Any], index: int) -> list[tuple[str, str]]:
    if not isinstance(meta, Mapping):
        raise _BadInput(f"sample {index}: metadata must be a mapping, got {type(meta).__name__}")
    schema = []
    for key in sorted(meta):
        try:
            validate_column_name(key)
        except ValueError as e:
            raise _BadInput(f"sample {index}: {e}") from None
        kind = kind_of(meta[key])
        if kind is None:
            raise _BadInput(
                f"sample {index}: metadata key {key!r} has unsupported type {type(meta[key]).__name__} "
                "(use bool, int, float or str)"
            )
        schema.append((key, kind))
    return schema


def _key_mismatch(meta: Mapping[str, Any], keys: frozenset[str], index: int) -> _BadInput:
    if not isinstance(meta, Mapping):
        return _BadInput(f"sample {index}: metadata must be a mapping, got {type(meta).__name__}")
    missing, extra = sorted(keys - set(meta)), sorted(set(meta) - keys)
    parts = [f"missing key(s) {missing}"] if missing else []
    parts += [f"unexpected key(s) {extra}"] if extra else []
    return _BadInput(f"sample {index}: " + " and ".join(parts) + f" (the first sample has keys {sorted(keys)})")


class _Columns:
    """Checks each sample against the first one's keys and kinds and collects the metadata columns."""

    def __init__(self) -> None:
        self.schema: list[tuple[str, str]] | None = None
        self._keys: frozenset[str] = frozenset()
        self._columns: list[tuple[str, str, type, list]] = []

    def payload(self, i: int, item: Any) -> bytes:
        """Check sample ``i`` and keep its metadata; return its payload as bytes."""
        try:
            data, meta = item.data, item.metadata
        except AttributeError:
            raise _BadInput(f"sample {i}: expected a CacheInput, got {type(item).__name__}") from None
        if type(data) is not bytes:
            if not isinstance(data, bytearray | memoryview):
                raise _BadInput(
                    f"sample {i}: payload must be bytes-like (bytes, bytearray, memoryview), got {type(data).__name__}"
                )
            data = memoryview(data).tobytes()
        if self.schema is None:
            self.schema = _schema_of(meta, i)
            self._keys = frozenset(k for k, _ in self.schema)
            self._columns = [(k, kind, _PY_TYPE[kind], []) for k, kind in self.schema]
        if (type(meta) is not dict and not isinstance(meta, Mapping)) or meta.keys() != self._keys:
            raise _key_mismatch(meta, self._keys, i)
        for key, kind, py_type, values in self._columns:
            value = meta[key]
            if type(value) is not py_type:
                try:
                    value = _coerce(value, kind)
                except TypeError:
                    raise _BadInput(
                        f"sample {i}: metadata key {key!r} expected {kind}, got {type(value).__name__} ({value!r})"
                    ) from None
            values.append(value)
        return data

    def write(self, path: Path, uid: str) -> None:
        """Write the columns as an Arrow IPC file that names its cache (``uid``) in its schema metadata."""
        assert self.schema is not None
        fields = [pa.field(k, KIND_TO_ARROW[kind], nullable=False) for k, kind in self.schema]
        arrow_schema = pa.schema(fields, metadata={UID_KEY: uid.encode()})
        arrays = {k: pa.array(v, type=KIND_TO_ARROW[kind]) for k, kind, _, v in self._columns}
        with ipc.new_file(str(path), arrow_schema) as w:
            w.write_table(pa.table(arrays, schema=arrow_schema))


def _file_entry(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        data = f.read()
    return {"byte_len": len(data), "sha256": sha256_file(path), "xxh3_128": xxh3_128_hex(data)}


def _write_records(source: Any, staging: Path, config: WriterConfig, position: int) -> dict[str, Any]:
    """Stream the source into shards, index and metadata under ``staging``; return the manifest body."""
    from tqdm.auto import tqdm

    comp = config.shard_compression
    compress = compressor(comp.algo, comp.level)
    checksum = xxhash.xxh3_64_intdigest
    (staging / SHARD_DIR).mkdir()
    shards = ShardFiles(staging / SHARD_DIR, config.max_shard_bytes)
    columns = _Columns()
    index = array("Q")
    total = len(source) if hasattr(source, "__len__") else None
    bar = tqdm(total=total, desc=source.name, unit=" samples", disable=not config.show_progress, position=position)
    raw_bytes = max_record = count = 0
    try:
        append = shards.append
        for i, item in enumerate(iter(source)):
            data = columns.payload(i, item)
            raw_bytes += len(data)
            max_record = max(max_record, len(data))
            if compress is not None:
                data = compress(data)
            index.extend(append(data))
            index.append(checksum(data))
            if i % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
                bar.update(_PROGRESS_EVERY)
        count = len(index) // 4
        bar.update(count % _PROGRESS_EVERY)
    finally:
        bar.close()
        shards.close()
    if count == 0:
        raise _BadInput("cache source yielded no samples")
    fsync_dir(staging / SHARD_DIR)
    np.frombuffer(index, dtype=INDEX_DTYPES[FORMAT_VERSION]).tofile(staging / INDEX_FILE)
    uid = uuid.uuid4().hex
    columns.write(staging / METADATA_FILE, uid)
    compression = {"algo": comp.algo, "ratio": comp.ratio}
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "cache_id": cache_id_for(source.name),
        "cache_uid": uid,
        "source_name": source.name,
        "sample_count": count,
        "payload_bytes": raw_bytes,
        "max_record_bytes": max_record,
        "record_checksum": "xxh3_64",
        "metadata_schema": [{"name": k, "kind": kind} for k, kind in columns.schema or []],
        "shards": [
            {"name": shard_name(i), "byte_len": size, "compression": compression, "sha256": digest}
            for i, (size, digest) in enumerate(zip(shards.sizes, shards.digests))
        ],
        "files": {name: _file_entry(staging / name) for name in (INDEX_FILE, METADATA_FILE)},
    }


def _publish(staging: StagingDir, mode: WriteMode, validate: bool) -> CacheWriteResult:
    root, name, target = staging.root, staging.name, staging.target
    with publish_lock(root, name):
        remove_stale_staging(root, name)
        if target.exists() or target.is_symlink():
            if mode == "create":
                staging.discard()
                return CacheWriteError(name, f"cache path already exists: {target}")
            if is_complete_cache(target, verify=validate):
                staging.discard()  # another writer published it first
                return CacheWriteSuccess(name, target)
            move_aside(target)
        staging.publish()
    return CacheWriteSuccess(name, target)


def _reuse(root: Path, name: str, validate: bool) -> CacheWriteResult | None:
    """A complete cache already at ``root/name`` (stale staging directories of the name are cleaned too)."""
    if not is_complete_cache(root / name, verify=validate):
        return None
    with publish_lock(root, name):
        remove_stale_staging(root, name)
    return CacheWriteSuccess(name, root / name)


def _describe(e: BaseException) -> str:
    """The error and where it was raised (the innermost frame), so a failed source's cause is not hidden."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (raised at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    cause = e.__cause__ or e.__context__
    chained = f"; caused by {type(cause).__name__}: {cause}" if cause is not None else ""
    return f"{type(e).__name__}: {e}{where}{chained}"


def _stage(source: Any, root: Path, *, config: WriterConfig, position: int) -> CacheWriteResult:
    return write_source(source, root, config, mode="create", position=position)


def write_source(
    source: Any,
    root: Path | str,
    config: WriterConfig,
    *,
    mode: WriteMode = "create",
    position: int = 0,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheWriteResult:
    """Write ``source`` to ``root/<source.name>`` through a staging directory; never raises for bad input.

    A URL root (``s3://bucket/caches``) is published remotely: the cache is written under a local staging root
    (``RemoteConfig.staging_dir``), then uploaded (see ``torch_drt.cache.remote_publish``); its result's path is
    the cache's URL.

    Args:
        source: an object with ``name`` and ``__iter__`` yielding ``CacheInput``.
        root: the cache root directory (created when missing) or URL.
        config: the writer settings.
        mode: ``"create"`` fails when the target exists; ``"reuse"`` accepts a complete cache already there
            (one published concurrently by another process included) and moves an incomplete one aside (a
            remote one that does not open is an error: it is never overwritten).
        position: line of the progress bar, for several sources at once.
        storage_options: fsspec options for a URL root (credentials, endpoint).
        remote_config: remote settings for a URL root (default ``RemoteConfig()``).

    Returns:
        ``CacheWriteSuccess`` once the cache is published, else ``CacheWriteError`` naming what went wrong
        (the sample and key for bad input; the exception, where it was raised and its cause for a source that
        raises, whose traceback is also logged on the ``torch_drt.cache`` logger); nothing is published then.
    """
    raw_name = getattr(source, "name", None)
    try:
        name = validate_source_name(raw_name)
        if is_url(root):
            RemoteStore(str(root), storage_options, remote_config)  # a URL with secrets in it is refused now
    except ValueError as e:
        return CacheWriteError(str(raw_name), str(e))
    if is_url(root):
        stage = functools.partial(_stage, config=config, position=position)
        try:
            return write_remote(source, name, str(root), stage, mode, config.validate_cache,
                                remote_config or RemoteConfig(), storage_options)
        except Exception as e:  # an upload that failed after its retries: nothing is published
            logger.error("publishing the cache of source %r at %s failed", name, root, exc_info=True)
            return CacheWriteError(name, _describe(e))
    root = Path(str(root).removeprefix("file://"))
    try:
        if mode == "reuse" and (reused := _reuse(root, name, config.validate_cache)) is not None:
            return reused
        with StagingDir(root, name) as staging:
            manifest = _write_records(source, staging.path, config, position)
            write_json_atomic(staging.path / MANIFEST_FILE, manifest)
            if config.validate_cache:
                open_cache(staging.path, verify=True)
            return _publish(staging, mode, config.validate_cache)
    except _BadInput as e:
        return CacheWriteError(name, str(e))
    except Exception as e:  # a source that raises, a full disk: the source fails, the others go on
        logger.error("writing the cache of source %r failed", name, exc_info=True)
        return CacheWriteError(name, _describe(e))
