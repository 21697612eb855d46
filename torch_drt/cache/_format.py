"""The on-disk layout of a torch_drt cache: the only module that knows file names and byte layouts.

A cache directory holds::

    manifest.json       format, version, counts, schema and a checksum for every other file
    index.bin           one little-endian (shard, offset, length) uint64 triple per sample
    metadata.arrow      Arrow IPC file with the stored metadata columns, one row per sample
    shards/000000.bin   payloads, back to back (each compressed on its own when compression is on)

See ``docs/format.md`` for the full description.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INDEX_DTYPE",
    "INDEX_FILE",
    "KIND_TO_ARROW",
    "LEGACY_FORMAT_VERSION",
    "MANIFEST_FILE",
    "METADATA_FILE",
    "RESERVED_COLUMNS",
    "SHARD_DIR",
    "cache_id_for",
    "kind_of",
    "read_manifest",
    "sha256_file",
    "shard_name",
    "validate_column_name",
    "validate_source_name",
    "write_json_atomic",
]

FORMAT_NAME = "torch_drt.cache"
FORMAT_VERSION = 1
LEGACY_FORMAT_VERSION = 3  # dataset-rt 0.4 caches

MANIFEST_FILE = "manifest.json"
INDEX_FILE = "index.bin"
METADATA_FILE = "metadata.arrow"
SHARD_DIR = "shards"

INDEX_DTYPE = np.dtype([("shard", "<u8"), ("offset", "<u8"), ("length", "<u8")])
RESERVED_COLUMNS = frozenset({"cache_id", "sample_id", "weight"})
KIND_TO_ARROW = {"bool": "bool", "int": "int64", "float": "double", "string": "string"}

_SOURCE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
_HASH_CHUNK = 1 << 22


def shard_name(number: int) -> str:
    """Return the file name of shard ``number``."""
    return f"{number:06d}.bin"


def kind_of(value: object) -> str | None:
    """Return the metadata kind of ``value`` (bool, int, float, string) or None when it has none."""
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | np.integer):
        return "int"
    if isinstance(value, float | np.floating):
        return "float"
    if isinstance(value, str):
        return "string"
    return None


def validate_source_name(name: object) -> str:
    """Check that a source name can be a directory name of its own under the cache root.

    Raises:
        ValueError: when the name is not a str of letters, digits, ``.``, ``_`` and ``-`` that does not start
            with ``.`` or ``-``.
    """
    if not isinstance(name, str) or not _SOURCE_NAME.match(name):
        raise ValueError(
            f"invalid source name {name!r}: use 1-200 letters, digits, '.', '_' or '-', not starting with '.' or '-'"
        )
    return name


def validate_column_name(name: object) -> str:
    """Check that a metadata key is a usable, non-reserved column name."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"metadata key {name!r} must be a non-empty str")
    if name in RESERVED_COLUMNS:
        raise ValueError(f"metadata key {name!r} is reserved (reserved: {sorted(RESERVED_COLUMNS)})")
    return name


def cache_id_for(source_name: str) -> int:
    """Return the stable 63-bit cache id of a source name (the same name always gives the same id)."""
    digest = hashlib.blake2b(source_name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def sha256_file(path: Path) -> str:
    """Return the hex SHA-256 of a file, read in 4 MiB chunks (hashlib releases the GIL)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file, fsync and rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(cache_dir: Path) -> dict[str, Any]:
    """Read and parse ``manifest.json``; errors name the file.

    Raises:
        CacheCorruptError: when the manifest is missing, unreadable or not a JSON object.
    """
    from torch_drt.cache.errors import CacheCorruptError

    path = cache_dir / MANIFEST_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CacheCorruptError(path, "manifest is missing (not a complete cache)") from None
    except OSError as e:
        raise CacheCorruptError(path, f"manifest cannot be read: {e}") from e
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CacheCorruptError(path, f"manifest is not valid JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise CacheCorruptError(path, "manifest is not a JSON object")
    return manifest
