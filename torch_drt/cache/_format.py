"""The on-disk layout of a torch_drt cache: file names, byte layouts, ids and names (see ``docs/format.md``).

A cache directory holds::

    manifest.json       format, version, counts, schema and checksums of every other file
    index.bin           one little-endian entry per sample: (shard, offset, length, xxh3) uint64 in version 2,
                        (shard, offset, length) in version 1
    metadata.arrow      Arrow IPC file with the stored metadata columns, one row per sample
    shards/000000.bin   records, back to back (each compressed on its own when compression is on)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

FORMAT_NAME = "torch_drt.cache"
FORMAT_VERSION = 2  # written; 1 is still read
LEGACY_FORMAT_VERSION = 3  # dataset-rt 0.4 caches

MANIFEST_FILE = "manifest.json"
INDEX_FILE = "index.bin"
METADATA_FILE = "metadata.arrow"
SHARD_DIR = "shards"
MAX_MANIFEST_BYTES = 64 << 20  # a manifest lists every shard; 64 MiB is ~300,000 of them

_U8 = "<u8"
INDEX_DTYPES = {
    1: np.dtype([("shard", _U8), ("offset", _U8), ("length", _U8)]),
    2: np.dtype([("shard", _U8), ("offset", _U8), ("length", _U8), ("checksum", _U8)]),
    LEGACY_FORMAT_VERSION: np.dtype([("shard", _U8), ("offset", _U8), ("length", _U8)]),
}
RESERVED_COLUMNS = frozenset({"cache_id", "sample_id", "weight"})
INTERNAL_PREFIX = "__"  # column names starting with it belong to torch_drt's own snapshots
KIND_TO_ARROW = {"bool": "bool", "int": "int64", "float": "double", "string": "string"}
MAX_CACHE_ID = (1 << 64) - 1
MAX_FILE_BYTES = (1 << 63) - 1  # the largest file size (off_t): no manifest number may ask for more
UID_KEY = b"torch_drt.cache_uid"  # metadata.arrow schema metadata: the manifest's cache_uid

_SOURCE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
_SHARD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")


def shard_name(number: int) -> str:
    """Return the file name of shard ``number``."""
    return f"{number:06d}.bin"


def is_shard_name(name: object) -> bool:
    """True for a plain file name that stays inside ``shards/`` (no separators, no leading dot, no ``..``)."""
    return isinstance(name, str) and bool(_SHARD_NAME.match(name)) and name != ".."


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
    """Check that a metadata key is a usable column name: not reserved, not internal.

    Raises:
        ValueError: for an empty or non-str name, a reserved name or one starting with ``__``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"metadata key {name!r} must be a non-empty str")
    if name in RESERVED_COLUMNS:
        raise ValueError(f"metadata key {name!r} is reserved (reserved: {sorted(RESERVED_COLUMNS)})")
    if name.startswith(INTERNAL_PREFIX):
        raise ValueError(
            f"metadata key {name!r} starts with {INTERNAL_PREFIX!r}, which is reserved for internal columns"
        )
    return name


def cache_id_for(source_name: str) -> int:
    """Return the cache id of a source name as dataset-rt computes it: the first 8 bytes of its SHA-256, read
    big-endian, top bit cleared (63 bits)."""
    return int.from_bytes(hashlib.sha256(source_name.encode()).digest()[:8], "big") & ((1 << 63) - 1)


def content_uid(manifest: Mapping[str, Any], metadata_digest: str) -> str:
    """The ``cache_uid`` of a cache written now: 32 hex digits of the SHA-256 of its manifest body (every field but
    ``cache_uid`` and the metadata file's entry, which hold it: the shards' and index's checksums, counts, schema,
    settings) and of ``metadata_digest`` (its metadata columns without the uid). The same content written anywhere,
    however often, gets the same uid; other content another one, so it still binds manifest, index and metadata.
    Caches written before this rule carry a random uid and open as before: a uid is compared, never recomputed."""
    body = {k: v for k, v in manifest.items() if k not in ("cache_uid", "files")}
    body["files"] = {k: v for k, v in manifest.get("files", {}).items() if k != METADATA_FILE}
    text = json.dumps([body, metadata_digest], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)  # a repeated key leaves fewer entries than pairs (the key is looked for only then)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:  # the first key that repeats an earlier one
            if key in seen:
                raise ValueError(f"duplicated key {key!r}")
            seen.add(key)
    return obj


def loads_strict(raw: bytes) -> Any:
    """Parse JSON, refusing a key repeated in one object (the last would silently win).

    Raises:
        ValueError: for invalid UTF-8, invalid JSON or a duplicated key.
    """
    return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
