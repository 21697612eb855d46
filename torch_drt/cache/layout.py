"""CacheLayout: what a cache's manifest says, parsed strictly (every field typed and range-checked)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from torch_drt.cache._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_DTYPES,
    INDEX_FILE,
    INTERNAL_PREFIX,
    KIND_TO_ARROW,
    LEGACY_FORMAT_VERSION,
    MANIFEST_FILE,
    MAX_CACHE_ID,
    MAX_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    METADATA_FILE,
    RESERVED_COLUMNS,
    SHARD_DIR,
    is_shard_name,
    loads_strict,
)
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.describe import described
from torch_drt.locations import CacheBackend, MissingFile

_READABLE = (1, FORMAT_VERSION)
_LZ4_MAX_RATIO = 256  # an LZ4 block never decompresses to more than ~255x its size
_HEX_DIGEST = re.compile("(?:[0-9a-f]{32}){1,2}")  # 32 or 64 lowercase hex digits (one regex: a shard each)


@dataclass(frozen=True)
class CacheLayout:
    """What the manifest of a structurally valid cache says.

    Attributes:
        path: the cache's location (a directory for local caches).
        format_version: 2 (or 1) for torch_drt caches, 3 for dataset-rt 0.4 caches.
        legacy: True for a dataset-rt cache (records carry a JSON header before the payload).
        cache_id: the cache's id (the ``cache_id`` column of its rows), 0 to 2**64 - 1.
        source_name: the name of the source it was written from.
        sample_count: number of samples.
        schema: (column, kind) pairs of the stored metadata, in table order.
        shards: (file name, size in bytes) of each shard, in shard-number order.
        compression: the per-record compression of payloads.
        checksums: file path relative to the cache directory -> expected SHA-256.
        fast_checksums: ``index.bin`` and ``metadata.arrow`` -> expected XXH3-128 (format 2; empty before).
        record_checksums: True when every index entry carries the XXH3-64 of its record (format 2).
        max_record_bytes: no payload of this cache decompresses to more bytes than this.
        cache_uid: the identity of this cache (format 2), derived from its content (``_format.content_uid``;
            random in caches of earlier releases), also stored in ``metadata.arrow``'s schema metadata, so the
            files of two caches are told apart.
        backend: where the cache's bytes come from.
        manifest_digest: the SHA-256 of the manifest's JSON object as it was read (``manifest_digest``), to tell
            whether the one there changed since (a reformatted file with the same content has the same digest).
    """

    path: Path | str
    format_version: int
    legacy: bool
    cache_id: int
    source_name: str
    sample_count: int
    schema: tuple[tuple[str, str], ...]
    shards: tuple[tuple[str, int], ...]
    compression: str
    checksums: dict[str, str]
    fast_checksums: dict[str, str] = field(default_factory=dict)
    record_checksums: bool = False
    max_record_bytes: int = 0
    cache_uid: str = ""
    backend: CacheBackend | None = field(default=None, compare=False, repr=False)
    manifest_digest: str = field(default="", compare=False, repr=False)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the stored metadata columns."""
        return pa.schema([pa.field(n, KIND_TO_ARROW[k], nullable=False) for n, k in self.schema])

    @property
    def index_dtype(self) -> np.dtype:
        """The structured dtype of one ``index.bin`` entry."""
        return INDEX_DTYPES[self.format_version]

    def shard_path(self, number: int) -> str:
        """The path of shard ``number`` relative to the cache."""
        return f"{SHARD_DIR}/{self.shards[number][0]}"

    def __repr__(self) -> str:
        return described(  # sizes, not the per-file checksums
            self, str(self.path), source_name=self.source_name, cache_id=self.cache_id, samples=self.sample_count,
            shards=len(self.shards), format_version=self.format_version, compression=self.compression,
        )


def backend_of(layout: CacheLayout) -> CacheBackend:
    """``layout.backend``, through which its files are read: every layout ``parse_manifest`` returns has one (a
    ``CacheLayout`` made without one describes a cache, nothing of it can be read)."""
    assert layout.backend is not None, f"{layout.path}: a CacheLayout without a backend cannot be read"
    return layout.backend


class _Manifest:
    """Typed access to the manifest's fields; every failure names the manifest."""

    def __init__(self, raw: dict[str, Any], where: Path | str) -> None:
        self.raw, self.where = raw, where

    def fail(self, reason: str) -> CacheCorruptError:
        return CacheCorruptError(self.where, reason)

    def get(
        self, obj: dict[str, Any], key: str, kind: type[Any], *, default: Any = ..., low: int | None = None,
        high: int = MAX_FILE_BYTES,
    ) -> Any:
        """``obj[key]``, of type ``kind``; an int also within ``[low, high]`` (by default at most the largest file
        size, so no number of a manifest can ask for more than a file system can hold)."""
        value = obj.get(key, default)
        if value is ...:
            raise self.fail(f"manifest field {key!r} is missing")
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"manifest field {key!r} has the wrong type ({type(value).__name__}: {value!r:.80})")
        if kind is int and low is not None and value < low:
            raise self.fail(f"manifest field {key!r} is {value}, below {low}")
        if kind is int and value > high:
            raise self.fail(f"manifest field {key!r} is {value}, above {high}")
        return value

    def digest(self, obj: dict[str, Any], key: str) -> str:
        value = self.get(obj, key, str, default="")
        if value and _HEX_DIGEST.fullmatch(value) is None:
            raise self.fail(f"manifest field {key!r} is not a hex digest ({value!r:.80})")
        return value


def _version(m: _Manifest) -> tuple[int, bool]:
    version = m.raw.get("format_version")
    if "format" not in m.raw and version == LEGACY_FORMAT_VERSION and not isinstance(version, bool):
        return LEGACY_FORMAT_VERSION, True
    if m.raw.get("format") != FORMAT_NAME or version not in _READABLE or isinstance(version, bool):
        raise m.fail(
            f"unsupported cache format {m.raw.get('format')!r} version {version!r} "
            f"(this torch_drt reads {FORMAT_NAME} versions {list(_READABLE)} and dataset-rt format 3)"
        )
    return version, False


def _schema(m: _Manifest, legacy: bool) -> tuple[tuple[str, str], ...]:
    schema = []
    for column in m.get(m.raw, "metadata_schema", list):
        if not isinstance(column, dict):
            raise m.fail(f"manifest field 'metadata_schema' holds {column!r:.80}, not an object")
        name, kind = m.get(column, "name", str), m.get(column, "kind", str)
        if kind not in KIND_TO_ARROW:
            raise m.fail(f"column {name!r} has unknown kind {kind!r}")
        if not name:
            raise m.fail("manifest field 'metadata_schema' holds an empty column name")
        schema.append((name, kind))
    names = [n for n, _ in schema]
    if len(set(names)) != len(names):
        raise m.fail(f"manifest field 'metadata_schema' repeats a column: {names}")
    clash = sorted(RESERVED_COLUMNS & set(names)) + [n for n in names if n.startswith(INTERNAL_PREFIX)]
    if clash:
        detail = " (dataset-rt writes such caches but cannot return their metadata table either)" if legacy else ""
        raise ValueError(
            f"{m.where}: the cache stores metadata column(s) {clash} named like a column torch_drt's metadata "
            f"table adds itself (cache_id, sample_id, weight, __*); torch_drt cannot load it{detail}"
        )
    return tuple(schema)


def _shards(m: _Manifest) -> tuple[list[tuple[str, int]], dict[str, str], str, int]:
    shards, checksums, algos, raw_max = [], {}, set(), 0
    for entry in m.get(m.raw, "shards", list):
        if not isinstance(entry, dict):
            raise m.fail(f"manifest shard entry {entry!r:.80} is not an object")
        name = m.get(entry, "name", str)
        if not is_shard_name(name) or f"{SHARD_DIR}/{name}" in checksums:
            raise m.fail(f"manifest shard name {name!r:.80} is not a plain, unique file name inside {SHARD_DIR}/")
        size = m.get(entry, "byte_len", int, low=0)
        compression = m.get(entry, "compression", dict, default={})
        algos.add(m.get(compression, "algo", str, default="none"))
        raw = m.get(entry, "uncompressed_byte_len", int, low=0) if "uncompressed_byte_len" in entry else None
        raw_max = max(raw_max, size * _LZ4_MAX_RATIO if raw is None else raw)
        shards.append((name, size))
        checksums[f"{SHARD_DIR}/{name}"] = m.digest(entry, "sha256")
    if not shards:
        raise m.fail("manifest lists no shard")
    if len(algos) > 1:
        raise m.fail(f"shards mix compressions {sorted(algos)}")
    algo = algos.pop()
    if algo not in ("none", "lz4", "zstd"):
        raise m.fail(f"unknown compression {algo!r}")
    return shards, checksums, algo, raw_max


def read_manifest(backend: CacheBackend) -> dict[str, Any]:
    """A cache's manifest as its JSON object, not yet checked.

    Raises:
        CacheCorruptError: naming the manifest: missing, not a regular file, too large, not JSON, a duplicated
            key, not an object.
    """
    where = backend.where(MANIFEST_FILE)
    try:
        raw = backend.read(MANIFEST_FILE, MAX_MANIFEST_BYTES)
    except MissingFile:
        raise CacheCorruptError(where, "manifest is missing (not a complete cache)") from None
    try:
        manifest = loads_strict(raw)
    except ValueError as e:
        raise CacheCorruptError(where, f"manifest is not valid JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise CacheCorruptError(where, "manifest is not a JSON object")
    return manifest


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The SHA-256 of a manifest's JSON object, whatever its formatting and key order."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def parse_manifest(backend: CacheBackend) -> CacheLayout:
    """Read and parse a cache's manifest strictly.

    Raises:
        CacheCorruptError: naming the manifest: missing, not a regular file, too large, not JSON, a duplicated
            key, a field missing or of the wrong type or range, an unsupported format.
        ValueError: for a cache whose stored columns clash with the table's own (``cache_id``, ...).
    """
    manifest = read_manifest(backend)
    where = backend.where(MANIFEST_FILE)
    m = _Manifest(manifest, where)
    version, legacy = _version(m)
    entry_bytes = INDEX_DTYPES[version].itemsize
    count = m.get(manifest, "sample_count", int, low=1, high=MAX_FILE_BYTES // entry_bytes)
    cache_id = m.get(manifest, "cache_id", int, low=0, high=MAX_CACHE_ID + 1)
    if cache_id > MAX_CACHE_ID:
        raise m.fail(f"manifest field 'cache_id' is {cache_id}, above 2**64 - 1")
    schema = _schema(m, legacy)
    shards, checksums, algo, raw_max = _shards(m)
    fast: dict[str, str] = {}
    uid = ""
    if version >= 2 and not legacy:
        if m.get(manifest, "record_checksum", str) != "xxh3_64":
            raise m.fail(f"unknown record checksum {manifest['record_checksum']!r:.40} (this torch_drt knows xxh3_64)")
        uid = m.digest(manifest, "cache_uid")
        if len(uid) != 32:
            raise m.fail(f"manifest field 'cache_uid' must be 32 hex digits, got {uid!r:.80}")
    if legacy:
        checksums[INDEX_FILE] = m.digest(manifest, "index_sha256")
        checksums[METADATA_FILE] = m.digest(manifest, "metadata_sha256")
        bound = raw_max
    else:
        files = m.get(manifest, "files", dict)
        for name in (INDEX_FILE, METADATA_FILE):
            entry = m.get(files, name, dict)
            checksums[name] = m.digest(entry, "sha256")
            recorded = m.get(entry, "byte_len", int, default=None, low=0) if "byte_len" in entry else None
            if name == INDEX_FILE and recorded is not None and recorded != count * entry_bytes:
                raise m.fail(
                    f"manifest field 'sample_count' is {count}, but the index it records ('byte_len' {recorded}) "
                    f"holds {recorded / entry_bytes:g} entries of {entry_bytes} bytes"
                )
            if version >= 2:
                fast[name] = m.digest(entry, "xxh3_128")
        bound = m.get(manifest, "max_record_bytes" if version >= 2 else "payload_bytes", int, low=0)
    return CacheLayout(
        path=backend.where(),
        format_version=version,
        legacy=legacy,
        cache_id=cache_id,
        source_name=m.get(manifest, "source_name", str, default=str(Path(str(backend.where())).name)),
        sample_count=count,
        schema=schema,
        shards=tuple(shards),
        compression=algo,
        checksums=checksums,
        fast_checksums=fast,
        record_checksums=version >= 2 and not legacy,
        max_record_bytes=bound,
        cache_uid=uid,
        backend=backend,
        manifest_digest=manifest_digest(manifest),
    )
