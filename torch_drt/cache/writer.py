"""Writing one source into a staging directory and publishing it by atomic rename."""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
from array import array
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from torch_drt.cache._compression import compressor
from torch_drt.cache._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_DTYPE,
    INDEX_FILE,
    KIND_TO_ARROW,
    MANIFEST_FILE,
    METADATA_FILE,
    SHARD_DIR,
    cache_id_for,
    kind_of,
    sha256_file,
    shard_name,
    validate_column_name,
    validate_source_name,
    write_json_atomic,
)
from torch_drt.cache._publish import (
    fsync_dir,
    move_aside,
    new_staging_dir,
    publish_lock,
    remove_stale_staging,
)
from torch_drt.cache.config import WriterConfig
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.validate import is_complete_cache, open_cache

__all__ = ["write_source"]

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


class _ShardFiles:
    """Appends records to numbered shard files, starting a new one past ``max_bytes``.

    Each shard is a file sized up front and memory-mapped, so a record is one copy into the page cache (no
    write syscalls); records are hashed in chunks on a helper thread meanwhile (hashlib releases the GIL, so both
    cores work). Closing a shard syncs it and cuts the file to the bytes written.
    """

    _CHUNK_BYTES = 4 << 20
    _MAX_HASH_JOBS = 8  # at most 32 MiB of payloads waiting for the hash

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.sizes: list[int] = []
        self.digests: list[str] = []
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch_drt-hash")
        self._hash_jobs: deque[Future] = deque()
        self._fd = -1
        self._map: mmap.mmap | None = None
        self._pos = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._open_next()

    def _open_next(self) -> None:
        if self._fd >= 0:
            self._close_current()
        path = self.directory / shard_name(len(self.sizes))
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(self._fd, self.max_bytes)  # sparse: only written pages take space
        self._map = mmap.mmap(self._fd, self.max_bytes)
        self._hash = hashlib.sha256()
        self.sizes.append(0)
        self._pos = 0

    def _hash_pending(self) -> None:
        chunk, self._pending, self._pending_bytes = self._pending, [], 0
        if not chunk:
            return
        # One hashing thread runs the jobs in submission order; wait only when it lags far behind (memory).
        while len(self._hash_jobs) >= self._MAX_HASH_JOBS:
            self._hash_jobs.popleft().result()
        self._hash_jobs.append(self._hasher.submit(_update_all, self._hash, chunk))

    def _close_current(self) -> None:
        self._hash_pending()
        while self._hash_jobs:
            self._hash_jobs.popleft().result()
        self._map.flush()
        self._map.close()
        self._map = None
        os.ftruncate(self._fd, self._pos)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.sizes[-1] = self._pos
        self.digests.append(self._hash.hexdigest())

    def append(self, data: bytes) -> tuple[int, int, int]:
        """Write one record; return its (shard, offset, length)."""
        n = len(data)
        if self._pos and self._pos + n > self.max_bytes:
            self._open_next()
        offset, end = self._pos, self._pos + n
        if end > len(self._map):  # one record larger than max_bytes: this shard holds it alone
            os.ftruncate(self._fd, end)
            self._map.resize(end)
        self._map[offset:end] = data
        self._pos = end
        self._pending.append(data)
        self._pending_bytes += n
        if self._pending_bytes >= self._CHUNK_BYTES:
            self._hash_pending()
        return len(self.sizes) - 1, offset, n

    def close(self) -> None:
        try:
            if self._fd >= 0:
                self._close_current()
        finally:
            self._hasher.shutdown(wait=True)


def _update_all(h: Any, chunk: list[bytes]) -> None:
    for data in chunk:
        h.update(data)


def _write_records(source: Any, staging: Path, config: WriterConfig, position: int) -> dict[str, Any]:
    """Stream the source into shards, index and metadata under ``staging``; return the manifest body."""
    from tqdm.auto import tqdm

    comp = config.shard_compression
    compress = compressor(comp.algo, comp.level)
    (staging / SHARD_DIR).mkdir()
    shards = _ShardFiles(staging / SHARD_DIR, config.max_shard_bytes)
    index = array("Q")
    schema: list[tuple[str, str]] | None = None
    keys: frozenset[str] = frozenset()
    columns: list[tuple[str, str, type, list]] = []
    total = len(source) if hasattr(source, "__len__") else None
    bar = tqdm(total=total, desc=source.name, unit=" samples", disable=not config.show_progress, position=position)
    raw_bytes = 0
    try:
        append = shards.append
        for i, item in enumerate(iter(source)):
            try:
                data, meta = item.data, item.metadata
            except AttributeError:
                raise _BadInput(f"sample {i}: expected a CacheInput, got {type(item).__name__}") from None
            if type(data) is not bytes:
                if not isinstance(data, bytearray | memoryview):
                    raise _BadInput(
                        f"sample {i}: payload must be bytes-like (bytes, bytearray, memoryview), "
                        f"got {type(data).__name__}"
                    )
                data = memoryview(data).tobytes()
            if schema is None:
                schema = _schema_of(meta, i)
                keys = frozenset(k for k, _ in schema)
                columns = [(k, kind, _PY_TYPE[kind], []) for k, kind in schema]
            if (type(meta) is not dict and not isinstance(meta, Mapping)) or meta.keys() != keys:
                raise _key_mismatch(meta, keys, i)
            for key, kind, py_type, values in columns:
                value = meta[key]
                if type(value) is not py_type:
                    try:
                        value = _coerce(value, kind)
                    except TypeError:
                        raise _BadInput(
                            f"sample {i}: metadata key {key!r} expected {kind}, got {type(value).__name__} ({value!r})"
                        ) from None
                values.append(value)
            raw_bytes += len(data)
            if compress is not None:
                data = compress(data)
            index.extend(append(data))
            if i % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
                bar.update(_PROGRESS_EVERY)
        count = len(index) // 3
        bar.update(count % _PROGRESS_EVERY)
    finally:
        bar.close()
        shards.close()
    if count == 0:
        raise _BadInput("cache source yielded no samples")
    assert schema is not None
    np.frombuffer(index, dtype=INDEX_DTYPE).tofile(staging / INDEX_FILE)
    arrow_schema = pa.schema([pa.field(k, KIND_TO_ARROW[kind], nullable=False) for k, kind in schema])
    table = pa.table({k: pa.array(v, type=KIND_TO_ARROW[kind]) for k, kind, _, v in columns}, schema=arrow_schema)
    with ipc.new_file(str(staging / METADATA_FILE), arrow_schema) as w:
        w.write_table(table)
    for name in (INDEX_FILE, METADATA_FILE):
        with open(staging / name, "rb") as f:
            os.fsync(f.fileno())
    shard_entries = [
        {
            "name": shard_name(i),
            "byte_len": size,
            "compression": {"algo": comp.algo, "ratio": comp.ratio},
            "sha256": digest,
        }
        for i, (size, digest) in enumerate(zip(shards.sizes, shards.digests))
    ]
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "cache_id": cache_id_for(source.name),
        "source_name": source.name,
        "sample_count": count,
        "payload_bytes": raw_bytes,
        "metadata_schema": [{"name": k, "kind": kind} for k, kind in schema],
        "shards": shard_entries,
        "files": {
            name: {"byte_len": (staging / name).stat().st_size, "sha256": sha256_file(staging / name)}
            for name in (INDEX_FILE, METADATA_FILE)
        },
    }


def _publish(staging: Path, root: Path, name: str, mode: WriteMode, validate: bool) -> CacheWriteResult:
    target = root / name
    with publish_lock(root, name):
        remove_stale_staging(root, name)
        if target.exists() or target.is_symlink():
            if mode == "create":
                shutil.rmtree(staging, ignore_errors=True)
                return CacheWriteError(name, f"cache path already exists: {target}")
            if is_complete_cache(target, verify=validate):
                shutil.rmtree(staging, ignore_errors=True)  # another writer published it first
                return CacheWriteSuccess(name, target)
            move_aside(target)
        os.rename(staging, target)
        fsync_dir(root)
    return CacheWriteSuccess(name, target)


def write_source(
    source: Any, root: Path, config: WriterConfig, *, mode: WriteMode = "create", position: int = 0
) -> CacheWriteResult:
    """Write ``source`` to ``root/<source.name>`` through a staging directory; never raises for bad input.

    Args:
        source: an object with ``name`` and ``__iter__`` yielding ``CacheInput``.
        root: the cache root directory (created when missing).
        config: the writer settings.
        mode: ``"create"`` fails when the target exists; ``"reuse"`` accepts a complete cache already there
            (one published concurrently by another process included) and moves an incomplete one aside.
        position: line of the progress bar, for several sources at once.

    Returns:
        ``CacheWriteSuccess`` once the cache is published, else ``CacheWriteError`` naming what went wrong
        (the sample and key for bad input); nothing is published then.
    """
    raw_name = getattr(source, "name", None)
    try:
        name = validate_source_name(raw_name)
    except ValueError as e:
        return CacheWriteError(str(raw_name), str(e))
    root = Path(root)
    if mode == "reuse" and is_complete_cache(root / name, verify=config.validate_cache):
        return CacheWriteSuccess(name, root / name)
    staging = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = new_staging_dir(root, name)
        manifest = _write_records(source, staging, config, position)
        write_json_atomic(staging / MANIFEST_FILE, manifest)
        fsync_dir(staging)
        if config.validate_cache:
            open_cache(staging, verify=True)
        return _publish(staging, root, name, mode, config.validate_cache)
    except _BadInput as e:
        return CacheWriteError(name, str(e))
    except Exception as e:  # a source that raises, a full disk: the source fails, the others go on
        return CacheWriteError(name, f"{type(e).__name__}: {e}")
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
