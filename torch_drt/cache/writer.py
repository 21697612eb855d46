"""Writing one source into a staging directory, published in one step by its location's publisher."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import time
import traceback
from array import array
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from torch_drt.cache._columns import BadInput, MetadataColumns
from torch_drt.cache._columns import warm_up as columns_warm_up
from torch_drt.cache._compression import compressor
from torch_drt.cache._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_DTYPES,
    INDEX_FILE,
    MANIFEST_FILE,
    METADATA_FILE,
    SHARD_DIR,
    cache_id_for,
    content_uid,
    shard_name,
    validate_source_name,
)
from torch_drt.cache._profile import SourceStages, WriterProfile
from torch_drt.cache._publishers import WriteMode, publisher_for
from torch_drt.cache._shard_files import ShardFiles
from torch_drt.cache.config import WriterConfig
from torch_drt.cache.records import CacheWriteError, CacheWriteResult
from torch_drt.cache.validate import open_cache
from torch_drt.checksums import xxh3_128_hex
from torch_drt.locations.location import Location
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.publish import fsync_paths

logger = logging.getLogger("torch_drt.cache")

_BATCH_BYTES = 4 << 20  # records are handed to the shard writer in batches of about this many bytes,
_RECORD_COST = 1024  # each counted this much more (so a batch holds at most 4,096 records),
_BATCH_SECONDS = 0.02  # or of the records of about this long (a slow source's records are written as they come,
# not all at its end)


@contextlib.contextmanager
def _untimed(name: str) -> Iterator[None]:
    yield


def _new_file(path: Path, data: Any) -> dict[str, Any]:
    """Create ``path`` holding ``data`` (synced later, with the cache's other files); return its manifest entry."""
    view = memoryview(data).cast("B")
    with open(path, "xb") as f:
        f.write(view)
    return {"byte_len": len(view), "sha256": hashlib.sha256(view).hexdigest(), "xxh3_128": xxh3_128_hex(view)}


def _one_by_one(append: Callable[[bytes, int], None], records: list[bytes], checksums: list[int]) -> None:
    for data, checksum in zip(records, checksums):
        append(data, checksum)


def warm_up() -> None:
    """Import what a first write without a progress bar imports (the metadata columns' encoder), writing nothing, so
    that processes forked afterwards inherit it instead of each paying it on its first cache."""
    columns_warm_up()


class _NoBar:
    """The progress bar of a write that shows none (tqdm is imported only for a bar that is shown)."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(config: WriterConfig, total: int | None, name: str, position: int) -> Any:
    if not config.show_progress:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit=" samples", position=position)


def _write_records(
    source: Any, staging: Path, config: WriterConfig, position: int, stages: SourceStages | None, sync: bool
) -> None:
    """Stream the source into shards, index, metadata and manifest under ``staging``, every file and directory synced
    when ``sync`` (the full shards' syncs start while the next ones are written; the last shard's, the small files'
    and the directories' run together at the end)."""
    comp = config.shard_compression
    compress = compressor(comp.algo, comp.level)
    checksum = xxhash.xxh3_64_intdigest
    (staging / SHARD_DIR).mkdir()
    shards = ShardFiles(staging / SHARD_DIR, config.max_shard_bytes, sync)
    columns = MetadataColumns()
    raw_lengths = array("Q")  # of compressed records (the index holds the stored lengths)
    total = len(source) if hasattr(source, "__len__") else None
    bar = _bar(config, total, source.name, position)
    batch: list[bytes] = []
    items, payload, write, add_raw = iter(source), columns.payload, shards.extend, raw_lengths.append
    batch_bytes = _BATCH_BYTES
    if stages is not None:  # the same steps, each timed, a record at a time
        items, payload = stages.iterate("python_next", items), stages.timed("python_extract", payload, "result")
        compress = None if compress is None else stages.timed("compression", compress, "first")
        write = functools.partial(_one_by_one, stages.timed("disk_write", shards.append, "first"))
        checksum = stages.timed("record_checksum", checksum, "first")
        batch_bytes = 0
    timed = stages.stage if stages is not None else _untimed
    try:
        size, add, clock = 0, batch.append, time.monotonic
        due = clock() + _BATCH_SECONDS
        for i, item in enumerate(items):
            data = payload(i, item)
            if compress is not None:
                add_raw(len(data))
                data = compress(data)
            add(data)
            size += len(data) + _RECORD_COST
            if size >= batch_bytes or (not i & 7 and clock() >= due):  # the clock read every 8 records
                write(batch, list(map(checksum, batch)))  # the shard files keep the list until it is written
                bar.update(len(batch))
                size = 0
                batch = []
                add = batch.append
                due = clock() + _BATCH_SECONDS
        if batch:
            write(batch, list(map(checksum, batch)))
            bar.update(len(batch))
        with timed("shard_flush"):
            shards.seal()
        if not shards.index:
            raise BadInput("cache source yielded no samples")
        _finish(staging, config, shards, columns, raw_lengths if compress is not None else None, source.name, timed)
    finally:
        bar.close()
        shards.close()  # the shards' syncs (waited for in _finish), or the helper threads of a failed write


def _finish(
    staging: Path,
    config: WriterConfig,
    shards: ShardFiles,
    columns: MetadataColumns,
    raw_lengths: array | None,
    name: str,
    timed: Callable[[str], contextlib.AbstractContextManager[None]],
) -> None:
    """Write the index, metadata and manifest of the sealed ``shards``, then (``shards.durable``) sync them, the last
    shard (at once, sharing one journal commit) and the directories, and wait for the other shards' syncs (every one
    durable on return). The staging directory's sync here is its only one: the local publisher renames it without
    another."""
    comp = config.shard_compression
    with timed("finish_index"):
        index = np.frombuffer(shards.index, dtype=INDEX_DTYPES[FORMAT_VERSION])
        index_entry = _new_file(staging / INDEX_FILE, shards.index)
        raw = np.frombuffer(raw_lengths, dtype=np.uint64) if raw_lengths is not None else index["length"]
        raw_bytes, max_record = int(raw.sum()), int(raw.max())
    compression = {"algo": comp.algo, "ratio": comp.ratio}
    body: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "cache_id": cache_id_for(name),
        "cache_uid": "",
        "source_name": name,
        "sample_count": len(index),
        "payload_bytes": raw_bytes,
        "max_record_bytes": max_record,
        "record_checksum": "xxh3_64",
        "metadata_schema": [{"name": k, "kind": kind} for k, kind in columns.schema or []],
        "shards": [
            {"name": shard_name(i), "byte_len": size, "compression": compression, "sha256": digest}
            for i, (size, digest) in enumerate(zip(shards.sizes, shards.digests))
        ],
        "files": {INDEX_FILE: index_entry},
    }
    with timed("finish_metadata"):
        body["cache_uid"], metadata = columns.encode(functools.partial(content_uid, body))
        body["files"][METADATA_FILE] = _new_file(staging / METADATA_FILE, metadata)
    with timed("finish_manifest"):
        _new_file(staging / MANIFEST_FILE, json.dumps(body, indent=2, sort_keys=True).encode())
        files = [staging / INDEX_FILE, staging / METADATA_FILE, staging / MANIFEST_FILE]
        if shards.durable:
            fsync_paths([*files, *shards.unsynced, staging / SHARD_DIR, staging])
        shards.close()


def _describe(e: BaseException) -> str:
    """The error and where it was raised (the innermost frame), so a failed source's cause is not hidden."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (raised at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    cause = e.__cause__ or e.__context__
    chained = f"; caused by {type(cause).__name__}: {cause}" if cause is not None else ""
    return f"{type(e).__name__}: {e}{where}{chained}"


def write_source(
    source: Any,
    root: Path | str,
    config: WriterConfig,
    *,
    mode: WriteMode = "create",
    position: int = 0,
    profile: WriterProfile | None = None,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
    sync_root: bool = True,
) -> CacheWriteResult:
    """Write ``source`` to ``root/<source.name>`` through a staging directory; never raises for bad input.

    Where the cache is staged and how it is published is the location's publisher's business
    (``cache/_publishers.py``): a local root stages beside the target and renames; a URL root
    (``s3://bucket/caches``) stages under ``RemoteConfig.staging_dir`` and uploads (see
    ``torch_drt.locations.remote_publish``), and its result's path is the cache's URL.

    Args:
        source: an object with ``name`` and ``__iter__`` yielding ``CacheInput``.
        root: the cache root directory (created when missing) or URL.
        config: the writer settings.
        mode: ``"create"`` fails when the target exists; ``"reuse"`` accepts a complete cache already there
            (one published concurrently by another process included) and moves an incomplete one aside (a
            remote one that does not open is an error: it is never overwritten).
        position: line of the progress bar, for several sources at once.
        profile: the call's timing profile; a source written (not reused) adds its stages to it (a URL root's
            upload is its ``publish`` stage).
        storage_options: fsspec options for a URL root (credentials, endpoint).
        remote_config: remote settings for a URL root (default ``RemoteConfig()``).
        sync_root: False leaves out the sync of a local ``root`` after the publishing rename (every file of the
            cache is synced before it either way, so a crash leaves no cache or the complete one); for a caller
            that syncs ``root`` once for many caches (a set build's parts), see ``StagingDir.publish``.

    Returns:
        ``CacheWriteSuccess`` once the cache is published, else ``CacheWriteError`` naming what went wrong
        (the sample and key for bad input; the exception, where it was raised and its cause for a source that
        raises, whose traceback is also logged on the ``torch_drt.cache`` logger); nothing is published then.
    """
    raw_name = getattr(source, "name", None)
    where = Location.parse(root, storage_options, remote_config)
    try:
        name = validate_source_name(raw_name)
        publisher = publisher_for(where, name, config.validate_cache)  # a URL with secrets in it is refused here
    except ValueError as e:
        return CacheWriteError(str(raw_name), str(e))
    try:
        if (known := publisher.existing(mode)) is not None:
            return known
        stages = profile.source(name) if profile is not None else None
        timed = stages.stage if stages is not None else _untimed
        with publisher.staging() as staged:
            sync = config.durable and publisher.syncs_staging  # a remote root's staging copy is only uploaded
            _write_records(source, staged, config, position, stages, sync)
            if config.validate_cache:
                with timed("validate"):
                    open_cache(staged, verify=True)
            with timed("publish"):
                return publisher.publish(staged, mode, sync_root, durable=config.durable)
    except BadInput as e:
        return CacheWriteError(name, str(e))
    except (Exception, GeneratorExit) as e:  # a source that raises, a full disk, an upload that failed after its
        # retries: the source fails (nothing is published), the others go on
        logger.error("writing the cache of source %r at %s failed", name, publisher.where, exc_info=True)
        return CacheWriteError(name, _describe(e))
