"""Opening a cache directory: structural checks (always) and checksum verification (on request).

Structure means: the manifest parses and names a known format and version, every listed file exists with the
recorded size, the index holds one entry per sample and every entry lies inside its shard, and the metadata
table has one row per sample with the recorded schema. Checksums are SHA-256 of whole files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from torch_drt.cache._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_DTYPE,
    INDEX_FILE,
    KIND_TO_ARROW,
    LEGACY_FORMAT_VERSION,
    MANIFEST_FILE,
    METADATA_FILE,
    SHARD_DIR,
    read_manifest,
    sha256_file,
)
from torch_drt.cache.errors import CacheCorruptError

__all__ = [
    "CacheLayout",
    "is_complete_cache",
    "open_cache",
    "read_index",
    "read_metadata",
    "verify_checksums",
]


@dataclass(frozen=True)
class CacheLayout:
    """What the manifest of a structurally valid cache says.

    Attributes:
        path: the cache directory.
        format_version: 1 for torch_drt caches, 3 for dataset-rt 0.4 caches.
        legacy: True for a dataset-rt cache (records carry a JSON header before the payload).
        cache_id: the cache's id (the ``cache_id`` column of its rows).
        source_name: the name of the source it was written from.
        sample_count: number of samples.
        schema: (column, kind) pairs of the stored metadata, in table order.
        shards: (file name, size in bytes) of each shard, in shard-number order.
        compression: the per-record compression of payloads.
        checksums: file path relative to the cache directory -> expected SHA-256.
    """

    path: Path
    format_version: int
    legacy: bool
    cache_id: int
    source_name: str
    sample_count: int
    schema: tuple[tuple[str, str], ...]
    shards: tuple[tuple[str, int], ...]
    compression: str
    checksums: dict[str, str]

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the stored metadata columns."""
        return pa.schema([pa.field(n, KIND_TO_ARROW[k], nullable=False) for n, k in self.schema])


def _field(manifest: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    value = manifest.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise CacheCorruptError(path, f"manifest field {key!r} is missing or has the wrong type ({value!r})")
    return value


def _parse(cache_dir: Path, manifest: dict[str, Any]) -> CacheLayout:
    mpath = cache_dir / MANIFEST_FILE
    version = manifest.get("format_version")
    legacy = version == LEGACY_FORMAT_VERSION and "format" not in manifest
    if not legacy and (manifest.get("format") != FORMAT_NAME or version != FORMAT_VERSION):
        raise CacheCorruptError(
            mpath,
            f"unsupported cache format {manifest.get('format')!r} version {version!r} "
            f"(this torch_drt reads {FORMAT_NAME} {FORMAT_VERSION} and dataset-rt format 3)",
        )
    count = _field(manifest, "sample_count", int, mpath)
    cache_id = _field(manifest, "cache_id", int, mpath)
    schema_raw = _field(manifest, "metadata_schema", list, mpath)
    try:
        schema = tuple((str(c["name"]), str(c["kind"])) for c in schema_raw)
    except (TypeError, KeyError):
        raise CacheCorruptError(mpath, "manifest field 'metadata_schema' is malformed") from None
    for name, kind in schema:
        if kind not in KIND_TO_ARROW:
            raise CacheCorruptError(mpath, f"column {name!r} has unknown kind {kind!r}")
    shards, checksums, algos = [], {}, set()
    for entry in _field(manifest, "shards", list, mpath):
        try:
            name, size, digest = str(entry["name"]), int(entry["byte_len"]), str(entry["sha256"])
            algos.add(str(entry.get("compression", {}).get("algo", "none")))
        except (TypeError, KeyError, ValueError, AttributeError):
            raise CacheCorruptError(mpath, f"manifest shard entry {entry!r} is malformed") from None
        shards.append((name, size))
        checksums[f"{SHARD_DIR}/{name}"] = digest
    if len(algos) > 1:
        raise CacheCorruptError(mpath, f"shards mix compressions {sorted(algos)}")
    if legacy:
        checksums[INDEX_FILE] = str(manifest.get("index_sha256", ""))
        checksums[METADATA_FILE] = str(manifest.get("metadata_sha256", ""))
    else:
        for key in (INDEX_FILE, METADATA_FILE):
            checksums[key] = str(_field(manifest, "files", dict, mpath).get(key, {}).get("sha256", ""))
    return CacheLayout(
        path=cache_dir,
        format_version=int(version),
        legacy=legacy,
        cache_id=cache_id,
        source_name=str(manifest.get("source_name", cache_dir.name)),
        sample_count=count,
        schema=schema,
        shards=tuple(shards),
        compression=algos.pop() if algos else "none",
        checksums=checksums,
    )


def read_index(layout: CacheLayout) -> np.ndarray:
    """Map ``index.bin`` read-only as a structured (shard, offset, length) array."""
    path = layout.path / INDEX_FILE
    return np.memmap(path, dtype=INDEX_DTYPE, mode="r", shape=(layout.sample_count,))


def read_metadata(layout: CacheLayout) -> pa.Table:
    """Map ``metadata.arrow`` and return its table (buffers stay file-backed); errors name the file."""
    path = layout.path / METADATA_FILE
    try:
        table = ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise CacheCorruptError(path, f"metadata table cannot be read: {e}") from None
    if table.num_rows != layout.sample_count:
        raise CacheCorruptError(
            path, f"metadata has {table.num_rows} rows but the manifest records {layout.sample_count} samples"
        )
    expected = [n for n, _ in layout.schema]
    if table.column_names != expected:
        raise CacheCorruptError(path, f"metadata columns {table.column_names} differ from manifest {expected}")
    for name, kind in layout.schema:
        if table.schema.field(name).type != pa.type_for_alias(KIND_TO_ARROW[kind]):
            raise CacheCorruptError(path, f"column {name!r} has type {table.schema.field(name).type}, not {kind}")
    return table


def _check_structure(layout: CacheLayout) -> None:
    for rel, size in [(f"{SHARD_DIR}/{n}", s) for n, s in layout.shards]:
        path = layout.path / rel
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise CacheCorruptError(path, "shard file is missing") from None
        if actual != size:
            raise CacheCorruptError(path, f"shard is {actual} bytes but the manifest records {size} (truncated?)")
    ipath = layout.path / INDEX_FILE
    try:
        isize = ipath.stat().st_size
    except FileNotFoundError:
        raise CacheCorruptError(ipath, "index file is missing") from None
    if isize != layout.sample_count * INDEX_DTYPE.itemsize:
        raise CacheCorruptError(
            ipath,
            f"index is {isize} bytes; {layout.sample_count} samples need {layout.sample_count * INDEX_DTYPE.itemsize}",
        )
    if not (layout.path / METADATA_FILE).is_file():
        raise CacheCorruptError(layout.path / METADATA_FILE, "metadata file is missing")
    if layout.sample_count < 1:
        raise CacheCorruptError(layout.path / MANIFEST_FILE, "cache holds no samples")
    index = read_index(layout)
    sizes = np.array([s for _, s in layout.shards], dtype=np.uint64)
    if len(sizes) == 0 or int(index["shard"].max()) >= len(sizes):
        raise CacheCorruptError(ipath, "index refers to a shard the manifest does not list")
    if np.any(index["offset"] + index["length"] > sizes[index["shard"]]):
        bad = int(np.argmax(index["offset"] + index["length"] > sizes[index["shard"]]))
        raise CacheCorruptError(ipath, f"index entry of sample {bad} lies outside its shard")


def verify_checksums(layout: CacheLayout) -> None:
    """Hash every file of the cache and compare with the manifest.

    Raises:
        CacheCorruptError: naming the first file whose checksum differs or is absent from the manifest.
    """
    for rel, expected in layout.checksums.items():
        path = layout.path / rel
        if len(expected) != 64 or expected.strip("0") == "":
            raise CacheCorruptError(path, f"manifest records no usable checksum ({expected!r})")
        actual = sha256_file(path)
        if actual != expected:
            raise CacheCorruptError(path, f"checksum mismatch: expected {expected}, found {actual}")


def open_cache(path: Path | str, *, verify: bool = False) -> CacheLayout:
    """Validate a cache directory's structure (and checksums when ``verify``) and return its layout.

    Raises:
        CacheCorruptError: naming the file at fault.
    """
    cache_dir = Path(path)
    if not cache_dir.is_dir():
        raise CacheCorruptError(cache_dir, "not a directory")
    layout = _parse(cache_dir, read_manifest(cache_dir))
    _check_structure(layout)
    read_metadata(layout)
    if verify:
        verify_checksums(layout)
    return layout


def is_complete_cache(path: Path, *, verify: bool = False) -> bool:
    """True when ``path`` holds a structurally valid (and, with ``verify``, checksum-clean) cache."""
    try:
        open_cache(path, verify=verify)
    except CacheCorruptError:
        return False
    return True
