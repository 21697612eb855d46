"""Cache sets: one name for many part caches, opened as one dataset.

A set is a directory holding ``cacheset.json``, a small manifest that lists its parts (each a complete cache):
where the part lives, its cache id, sample count, metadata schema and the SHA-256 of its ``manifest.json``
(which in turn records the checksum of every file of the part). Opening a set opens its parts as the caches of
one dataset; they must share one schema and have distinct cache ids. See ``docs/format.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from torch_drt.cache._format import MANIFEST_FILE, validate_source_name
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.validate import CacheLayout, load_cache, open_cache
from torch_drt.publish import fsync_dir

__all__ = [
    "SET_FORMAT_NAME",
    "SET_FORMAT_VERSION",
    "SET_MANIFEST_FILE",
    "CacheSet",
    "CacheSetPart",
    "is_cache_set",
    "load_caches",
    "open_cache_set",
    "publish_cache_set",
    "read_cache_set",
    "validate_set_name",
]

SET_FORMAT_NAME = "torch_drt.cacheset"
SET_FORMAT_VERSION = 1
SET_MANIFEST_FILE = "cacheset.json"
_MAX_MANIFEST_BYTES = 64 << 20


@dataclass(frozen=True)
class CacheSetPart:
    """One part of a set, as its manifest records it.

    Attributes:
        location: the part's path relative to the set directory, an absolute path, or a URL.
        cache_id: the part cache's id.
        sample_count: its number of samples.
        schema: its (column, kind) metadata schema.
        manifest_sha256: SHA-256 of the part's ``manifest.json``.
    """

    location: str
    cache_id: int
    sample_count: int
    schema: tuple[tuple[str, str], ...]
    manifest_sha256: str


@dataclass(frozen=True)
class CacheSet:
    """A parsed set manifest.

    Attributes:
        path: the set directory.
        name: the set's name (its directory name when it was published).
        parts: the parts, in dataset order.
    """

    path: Path
    name: str
    parts: tuple[CacheSetPart, ...]

    @property
    def sample_count(self) -> int:
        """Samples in all parts."""
        return sum(p.sample_count for p in self.parts)

    @property
    def schema(self) -> tuple[tuple[str, str], ...]:
        """The metadata schema every part shares."""
        return self.parts[0].schema

    def part_path(self, part: CacheSetPart) -> Path:
        """Where ``part`` lives on this machine.

        Raises:
            CacheCorruptError: for a URL this torch_drt cannot open yet (only ``file://``).
        """
        location = part.location
        if "://" in location:
            if location.startswith("file://"):
                return Path(location[len("file://") :])
            from torch_drt.sources.template import redact

            raise CacheCorruptError(
                self.path / SET_MANIFEST_FILE, f"part {redact(location)!r} is remote; only local parts can be opened"
            )
        return Path(os.path.normpath(self.path / location))


def validate_set_name(name: object) -> str:
    """Check that ``name`` can name a set directory (the rules of cache source names).

    Raises:
        ValueError: naming the rule it breaks.
    """
    try:
        return validate_source_name(name)
    except ValueError as e:
        raise ValueError(str(e).replace("source name", "cache set name")) from None


def is_cache_set(path: str | Path) -> bool:
    """True when ``path`` is a directory with a set manifest (whether or not the set is valid)."""
    return (Path(path) / SET_MANIFEST_FILE).is_file()


def _schema_json(schema: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": n, "kind": k} for n, k in schema]


def _parse_part(entry: object, where: Path) -> CacheSetPart:
    bad = CacheCorruptError(where, f"part entry {str(entry)[:200]} is malformed")
    if not isinstance(entry, dict):
        raise bad
    location, cache_id, count, digest = (entry.get(k) for k in ("path", "cache_id", "sample_count", "manifest_sha256"))
    if not (isinstance(location, str) and location and isinstance(digest, str) and len(digest) == 64):
        raise bad
    if not all(type(v) is int and v >= 0 for v in (cache_id, count)):
        raise bad
    try:
        schema = tuple((str(c["name"]), str(c["kind"])) for c in entry["metadata_schema"])
    except (KeyError, TypeError):
        raise bad from None
    return CacheSetPart(location, cache_id, count, schema, digest)


def read_cache_set(path: str | Path) -> CacheSet:
    """Read and check a set manifest (not its parts).

    Raises:
        CacheCorruptError: naming the manifest when it is missing, unreadable, of another format, lists no
            parts, repeats a cache id or mixes schemas (naming the part).
    """
    set_dir = Path(path)
    mpath = set_dir / SET_MANIFEST_FILE
    try:
        with open(mpath, "rb") as f:
            raw = f.read(_MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise CacheCorruptError(mpath, "set manifest is missing (not a published cache set)") from None
    except OSError as e:
        raise CacheCorruptError(mpath, f"set manifest cannot be read: {e}") from None
    if len(raw) > _MAX_MANIFEST_BYTES:
        raise CacheCorruptError(mpath, f"set manifest is larger than {_MAX_MANIFEST_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CacheCorruptError(mpath, f"set manifest is not valid JSON: {e}") from None
    if not isinstance(body, dict) or body.get("format") != SET_FORMAT_NAME:
        raise CacheCorruptError(mpath, f"not a {SET_FORMAT_NAME} manifest")
    if body.get("format_version") != SET_FORMAT_VERSION:
        raise CacheCorruptError(
            mpath, f"unsupported set format version {body.get('format_version')!r} (this torch_drt reads 1)"
        )
    entries = body.get("parts")
    if not isinstance(entries, list) or not entries:
        raise CacheCorruptError(mpath, "set manifest lists no parts")
    cache_set = CacheSet(set_dir, str(body.get("name", set_dir.name)), tuple(_parse_part(e, mpath) for e in entries))
    if problem := _disagreement(cache_set.parts):
        raise CacheCorruptError(mpath, problem)
    if body.get("sample_count") != cache_set.sample_count:
        raise CacheCorruptError(mpath, f"sample_count {body.get('sample_count')!r} is not the sum over the parts")
    return cache_set


def _disagreement(parts: Sequence[CacheSetPart]) -> str | None:
    """Why ``parts`` cannot form one dataset (another schema, a repeated cache id), naming the part; else None."""
    first, seen = parts[0], {}
    for part in parts:
        if part.schema != first.schema:
            return (
                f"part {part.location} has metadata schema {list(part.schema)}, but part {first.location} has "
                f"{list(first.schema)}: all parts of a set must share one schema"
            )
        if part.cache_id in seen:
            return f"parts {seen[part.cache_id]} and {part.location} share cache id {part.cache_id}"
        seen[part.cache_id] = part.location
    return None


def _manifest_sha256(cache_dir: Path) -> str:
    return hashlib.sha256((cache_dir / MANIFEST_FILE).read_bytes()).hexdigest()


def _load_parts(cache_set: CacheSet, verify: bool) -> list[tuple[CacheLayout, pa.Table]]:
    """Load every part with its metadata table; each must be exactly the cache the manifest recorded."""
    loaded = []
    for part in cache_set.parts:
        part_dir = cache_set.part_path(part)
        try:
            layout, table = load_cache(part_dir, verify=verify)
        except FileNotFoundError:
            raise CacheCorruptError(part_dir, f"part {part.location} does not exist") from None
        recorded = (part.cache_id, part.sample_count, part.schema)
        if (layout.cache_id, layout.sample_count, layout.schema) != recorded or (
            _manifest_sha256(part_dir) != part.manifest_sha256
        ):
            raise CacheCorruptError(
                part_dir / MANIFEST_FILE,
                f"part {part.location} is not the cache the set recorded (replaced after the set was published?)",
            )
        loaded.append((layout, table))
    return loaded


def open_cache_set(path: str | Path, *, verify: bool = False) -> tuple[CacheSet, list[CacheLayout]]:
    """Open a set and every part; each part must be exactly the cache the manifest recorded.

    Args:
        path: the set directory.
        verify: also verify every checksum of every part.

    Raises:
        CacheCorruptError: naming the set manifest, or the file of the part at fault.
    """
    cache_set = read_cache_set(path)
    return cache_set, [layout for layout, _ in _load_parts(cache_set, verify)]


def load_caches(path: str | Path, *, verify: bool = False) -> list[tuple[CacheLayout, pa.Table]]:
    """The caches at ``path`` with their metadata tables: its parts when it is a set, else the one cache there."""
    if is_cache_set(path):
        return _load_parts(read_cache_set(path), verify)
    return [load_cache(path, verify=verify)]


def _location(set_dir: Path, part_dir: Path) -> str:
    """The part's path relative to the set when both lie under the set's root (the root can move), else absolute."""
    part, root = part_dir.resolve(), set_dir.resolve().parent
    if part.is_relative_to(root):
        return Path(os.path.relpath(part, set_dir.resolve())).as_posix()
    return str(part)


def publish_cache_set(path: str | Path, parts: Sequence[str | Path]) -> CacheSet:
    """Publish a set of existing caches at ``path`` (created when missing); never overwrites a set.

    Each part is opened (structure), checked against the others (one schema, distinct cache ids) and recorded
    by its path relative to the set directory when both lie under one root (``ROOT/set``, ``ROOT/part`` or
    ``ROOT/set/part``), else by its absolute path. The manifest is
    written to a temporary file, synced, and linked into place in one step that fails when a set is already
    there.

    Args:
        path: the set directory; its name is the set's name.
        parts: the part cache directories, in dataset order.

    Returns:
        The published set.

    Raises:
        FileExistsError: when a set is already published at ``path``.
        CacheCorruptError: naming the file of a part that is not a valid cache.
        ValueError: naming the part whose schema or cache id does not fit the others; when ``parts`` is empty
            or the set name is invalid.
    """
    set_dir = Path(path)
    name = validate_set_name(set_dir.name)
    if not parts:
        raise ValueError("a cache set needs at least one part")
    mpath = set_dir / SET_MANIFEST_FILE
    if mpath.exists():
        raise FileExistsError(f"cache set already exists: {set_dir}")
    entries = []
    for part_dir in map(Path, parts):
        layout = open_cache(part_dir)
        entries.append(
            CacheSetPart(
                _location(set_dir, part_dir), layout.cache_id, layout.sample_count, layout.schema,
                _manifest_sha256(part_dir),
            )
        )
    if problem := _disagreement(entries):
        raise ValueError(problem)
    cache_set = CacheSet(set_dir, name, tuple(entries))
    body = {
        "format": SET_FORMAT_NAME,
        "format_version": SET_FORMAT_VERSION,
        "name": name,
        "sample_count": cache_set.sample_count,
        "parts": [
            {
                "path": p.location,
                "cache_id": p.cache_id,
                "sample_count": p.sample_count,
                "metadata_schema": _schema_json(p.schema),
                "manifest_sha256": p.manifest_sha256,
            }
            for p in entries
        ],
    }
    set_dir.mkdir(parents=True, exist_ok=True)
    _write_new_json(mpath, body)
    return cache_set


def _write_new_json(path: Path, body: Any) -> None:
    """Write ``body`` to ``path`` only if nothing is there: temp file, fsync, hard link (atomic, no overwrite)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            json.dump(body, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise FileExistsError(f"cache set already exists: {path.parent}") from None
        fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
