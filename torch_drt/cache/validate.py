"""Opening a cache: what is checked at every open, and what ``verify`` (``validate_cache=True``) adds.

Every open: the manifest parses strictly (see ``layout``); every shard is a regular file of its recorded size;
``index.bin`` and ``metadata.arrow`` match the manifest's checksum *before* they are parsed (XXH3-128 in format 2,
SHA-256 in formats 1 and 3), which binds them to this manifest; every index entry lies inside its shard; the
metadata table passes Arrow's full validation with one row per sample and the recorded schema.

``verify`` adds the SHA-256 of every file (shards included) and, for dataset-rt caches, the comparison of each
record's embedded JSON metadata with ``metadata.arrow``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from torch_drt.cache._format import INDEX_FILE, KIND_TO_ARROW, METADATA_FILE, UID_KEY
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.layout import CacheLayout, backend_of, parse_manifest
from torch_drt.checksums import xxh3_128_hex
from torch_drt.locations import CacheBackend, MissingFile, StoredFile, backend_for

if TYPE_CHECKING:
    from torch_drt.locations.remote_config import RemoteConfig


_MAX_LEGACY_METADATA = 1 << 36  # format 3 records no size for metadata.arrow


def _expected(layout: CacheLayout, rel: str) -> tuple[str, str]:
    """The (algorithm, hex digest) the manifest records for ``rel``: XXH3-128 where it has one, else SHA-256."""
    fast = layout.fast_checksums.get(rel)
    return ("xxh3_128", fast) if fast else ("sha256", layout.checksums.get(rel, ""))


def _check_digest(layout: CacheLayout, rel: str, data: bytes | memoryview) -> None:
    """Compare an in-memory file with the manifest's cheap checksum (or SHA-256 where it has no other)."""
    kind, expected = _expected(layout, rel)
    if kind == "xxh3_128":
        algo, actual = "XXH3-128", xxh3_128_hex(data)
    else:
        algo, actual = "SHA-256", hashlib.sha256(data).hexdigest()
        if not expected:
            raise CacheCorruptError(backend_of(layout).where(rel), "manifest records no checksum for this file")
    if actual != expected:
        raise CacheCorruptError(
            backend_of(layout).where(rel),
            f"{algo} is {actual}, the manifest records {expected}: the file is damaged or belongs to another cache",
        )


def _check_extents(layout: CacheLayout, index: np.ndarray) -> None:
    where = backend_of(layout).where(INDEX_FILE)
    shard = index["shard"]
    if int(shard.max()) >= len(layout.shards):
        bad = int(np.argmax(shard >= len(layout.shards)))
        raise CacheCorruptError(where, f"index entry of sample {bad} refers to shard {int(shard[bad])}, not listed")
    sizes = np.array([s for _, s in layout.shards], dtype=np.uint64)[shard]
    offset, length = index["offset"], index["length"]
    # no uint64 wrap-around: the subtraction only counts where offset <= size
    outside = (offset > sizes) | (length > sizes - offset)
    if outside.any():
        raise CacheCorruptError(where, f"index entry of sample {int(np.argmax(outside))} lies outside its shard")


def _check_size(layout: CacheLayout, rel: str, what: str, size: int, expected: str) -> None:
    try:
        actual = backend_of(layout).size(rel)
    except MissingFile as e:
        raise CacheCorruptError(e.path, f"{what} file is missing") from None
    if actual != size:
        raise CacheCorruptError(backend_of(layout).where(rel), f"{what} is {actual} bytes; {expected}")


def load_index(layout: CacheLayout) -> tuple[StoredFile, np.ndarray]:
    """Open ``index.bin``, check it against the manifest and every entry against its shard's size.

    Returns:
        The opened file (mapped where the backend maps) and the entries as a structured array over it.
    """
    size = layout.sample_count * layout.index_dtype.itemsize
    if backend_of(layout).stats_cheaply:  # a remote backend checks the size of what it downloads instead
        _check_size(layout, INDEX_FILE, "index", size, f"{layout.sample_count} samples need {size}")
    file = backend_of(layout).open(INDEX_FILE, size, checksum=_expected(layout, INDEX_FILE))
    view = file.view()
    buf = view if view is not None else file.gather([0], [size])[0]
    _check_digest(layout, INDEX_FILE, buf)
    index = np.frombuffer(buf, dtype=layout.index_dtype)
    _check_extents(layout, index)
    return file, index


def read_metadata(layout: CacheLayout) -> pa.Table:
    """Read ``metadata.arrow`` into memory, check it against the manifest, then parse and fully validate it.

    Raises:
        CacheCorruptError: naming the file.
    """
    where = backend_of(layout).where(METADATA_FILE)
    try:
        raw = backend_of(layout).read(METADATA_FILE, _MAX_LEGACY_METADATA, checksum=_expected(layout, METADATA_FILE))
    except MissingFile as e:
        raise CacheCorruptError(e.path, "metadata file is missing") from None
    _check_digest(layout, METADATA_FILE, raw)
    try:
        table = ipc.open_file(pa.BufferReader(raw)).read_all()
        table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CacheCorruptError(where, f"metadata table cannot be read: {e}") from None
    if table.num_rows != layout.sample_count:
        raise CacheCorruptError(
            where, f"metadata has {table.num_rows} rows but the manifest records {layout.sample_count} samples"
        )
    found = (table.schema.metadata or {}).get(UID_KEY, b"").decode(errors="replace")
    if layout.cache_uid and found != layout.cache_uid:
        raise CacheCorruptError(where, f"metadata is of cache {found[:40]!r}, the manifest of {layout.cache_uid!r}")
    rows = table.num_rows
    table = table.replace_schema_metadata(None)
    if not table.num_columns:  # pyarrow drops the rows of a table of no columns when its schema changes
        table = pa.Table.from_batches([pa.RecordBatch.from_struct_array(pa.nulls(rows, pa.struct([])))])
    expected = [n for n, _ in layout.schema]
    if table.column_names != expected:
        raise CacheCorruptError(where, f"metadata columns {table.column_names} differ from manifest {expected}")
    for name, kind in layout.schema:
        if table.schema.field(name).type != pa.type_for_alias(KIND_TO_ARROW[kind]):
            raise CacheCorruptError(where, f"column {name!r} has type {table.schema.field(name).type}, not {kind}")
        if table.column(name).null_count:
            raise CacheCorruptError(where, f"column {name!r} holds nulls")
    return table


def open_shards(layout: CacheLayout) -> list[StoredFile]:
    """Open every shard for range reads (a remote backend fetches nothing yet)."""
    backend = backend_of(layout)
    return [
        backend.open(rel, size, checksum=("sha256", layout.checksums.get(rel, "")), ranges_ok=layout.record_checksums)
        for rel, size in ((layout.shard_path(i), size) for i, (_, size) in enumerate(layout.shards))
    ]


def verify_checksums(layout: CacheLayout) -> None:
    """Hash every file of the cache with SHA-256 and compare with the manifest.

    Raises:
        CacheCorruptError: naming the first file whose checksum differs or is absent from the manifest.
    """
    from torch_drt._progress import Progress

    with Progress("verify", layout.path, total=len(layout.checksums), unit="files") as bar:
        for rel, expected in layout.checksums.items():
            path = backend_of(layout).where(rel)
            if len(expected) != 64 or expected.strip("0") == "":
                raise CacheCorruptError(path, f"manifest records no usable checksum ({expected!r})")
            actual = backend_of(layout).sha256(rel)
            if actual != expected:
                raise CacheCorruptError(path, f"checksum mismatch: expected {expected}, found {actual}")
            bar.add(1)


def _check_shard_sizes(layout: CacheLayout) -> None:
    for i, (_, size) in enumerate(layout.shards):
        _check_size(layout, layout.shard_path(i), "shard", size, f"the manifest records {size} (truncated?)")


def open_layout(
    location: str | Path | CacheBackend,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheLayout:
    """Parse a cache's manifest and check its shards' types and sizes: all a payload reader needs before it loads
    (and checks) the index itself. ``open_cache`` checks the metadata table too.

    A URL (``s3://...``) is read through the remote backend with ``storage_options`` and ``remote_config``
    (see ``backends.backend_for``); its shards' sizes are checked when they are fetched, not here.
    """
    backend = backend_for(location, storage_options, remote_config)
    backend.check_root()
    layout = parse_manifest(backend)
    if backend.stats_cheaply:
        _check_shard_sizes(layout)  # cheap checks before any hashing
    return layout


def expect_open(backend: CacheBackend) -> None:
    """Tell ``backend`` that an open follows its next manifest read: the index and the metadata are read next (a
    remote backend may fetch them with the manifest; see ``CacheBackend.expect``)."""
    backend.expect((INDEX_FILE, METADATA_FILE))


def _load(
    location: str | Path | CacheBackend,
    verify: bool,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> tuple[CacheLayout, pa.Table]:
    backend = backend_for(location, storage_options, remote_config)
    expect_open(backend)
    layout = open_layout(backend)
    index_file, index, table = _index_and_metadata(layout)
    try:
        if verify:
            verify_checksums(layout)
            if layout.legacy:
                _verify_legacy(layout, index, table)
    finally:
        del index
        index_file.close()
    return layout, table


def _index_and_metadata(layout: CacheLayout) -> tuple[StoredFile, np.ndarray, pa.Table]:
    """``load_index`` and ``read_metadata``; at a URL both at once (the open's last two requests overlap)."""
    if backend_of(layout).stats_cheaply:
        index_file, index = load_index(layout)
        try:
            return index_file, index, read_metadata(layout)
        except BaseException:
            index_file.close()
            raise
    with ThreadPoolExecutor(1, thread_name_prefix="torch_drt-open") as pool:
        table = pool.submit(read_metadata, layout)
        index_file, index = load_index(layout)
        try:
            return index_file, index, table.result()
        except BaseException:
            index_file.close()
            raise


def _verify_legacy(layout: CacheLayout, index: np.ndarray, table: pa.Table) -> None:
    from torch_drt.cache._legacy import verify_embedded_metadata

    shards = open_shards(layout)
    try:
        verify_embedded_metadata(layout, index, shards, table)
    finally:
        for shard in shards:
            shard.close()


def load_cache(
    location: str | Path | CacheBackend,
    *,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> tuple[CacheLayout, pa.Table]:
    """Like ``open_cache``, also returning the validated metadata table."""
    return _load(location, verify, storage_options, remote_config)


def open_cache(
    location: str | Path | CacheBackend,
    *,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheLayout:
    """Validate a cache (everything checked at every open, plus every SHA-256 with ``verify``); return its layout.

    ``location`` is a directory, a URL (read with ``storage_options`` and ``remote_config``) or a backend.

    Raises:
        FileNotFoundError: when nothing is at ``location``.
        CacheCorruptError: naming the file at fault.
        ValueError: for a cache whose stored columns clash with the metadata table's own columns.
    """
    return _load(location, verify, storage_options, remote_config)[0]


def is_complete_cache(
    location: str | Path | CacheBackend,
    *,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> bool:
    """True when ``location`` holds a valid (and, with ``verify``, checksum-clean) cache."""
    try:
        open_cache(location, verify=verify, storage_options=storage_options, remote_config=remote_config)
    except (CacheCorruptError, FileNotFoundError):
        return False
    return True
