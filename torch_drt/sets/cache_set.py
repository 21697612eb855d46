"""Cache sets: one name for many part caches, opened as one dataset.

A set is a directory holding ``cacheset.json``, a small manifest that lists its parts (each a complete cache):
where the part lives, its cache id, sample count, metadata schema and the SHA-256 of its ``manifest.json``
(which in turn records the checksum of every file of the part). Opening a set opens its parts as the caches of
one dataset; they must share one schema and have distinct cache ids. See ``docs/format.md``. Publishing a set:
``cache_set_publish``.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from torch_drt.cache._format import (
    MANIFEST_FILE,
    MAX_CACHE_ID,
    MAX_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    loads_strict,
    validate_source_name,
)
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.validate import CacheLayout, expect_open, load_cache
from torch_drt.describe import described
from torch_drt.locations import CacheBackend, MissingFile, backend_for
from torch_drt.locations.location import Location, split_protocol
from torch_drt.sets._set_origin import check_origin

if TYPE_CHECKING:
    from torch_drt.locations.remote_config import RemoteConfig

SetLocation = str | Path | CacheBackend


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
        path: the set directory (a ``Path``, or the set's URL).
        name: the set's name (its directory name when it was published).
        parts: the parts, in dataset order.
    """

    path: Path | str
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

    def part_path(self, part: CacheSetPart) -> Path | str:
        """Where ``part`` lives: a local path, or a URL (a part recorded as a URL, or any part of a remote set)."""
        if split_protocol(part.location)[0]:  # recorded as a URL (or a file:// URL: a local path)
            return Location.parse(part.location).target
        return Location.parse(self.path).join(part.location).target

    def __repr__(self) -> str:
        return described(self, str(self.path), name=self.name, parts=len(self.parts), samples=self.sample_count)


def validate_set_name(name: object) -> str:
    """Check that ``name`` can name a set directory (the rules of cache source names).

    Raises:
        ValueError: naming the rule it breaks.
    """
    try:
        return validate_source_name(name)
    except ValueError as e:
        raise ValueError(str(e).replace("source name", "cache set name")) from None


def _backend(path: SetLocation, options: Mapping[str, Any] | None, config: RemoteConfig | None) -> CacheBackend:
    return backend_for(path, options, config)


def is_cache_set(
    path: SetLocation, *, storage_options: Mapping[str, Any] | None = None, remote_config: RemoteConfig | None = None
) -> bool:
    """True when ``path`` (a directory or URL) holds a set manifest (whether or not the set is valid)."""
    return _has(_backend(path, storage_options, remote_config), SET_MANIFEST_FILE)


def _schema_json(schema: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": n, "kind": k} for n, k in schema]


def _parse_part(entry: object, where: Path | str) -> CacheSetPart:
    bad = CacheCorruptError(where, f"part entry {str(entry)[:200]} is malformed")
    if not isinstance(entry, dict):
        raise bad
    location, cache_id, count, digest = (entry.get(k) for k in ("path", "cache_id", "sample_count", "manifest_sha256"))
    if not (isinstance(location, str) and location and isinstance(digest, str) and len(digest) == 64):
        raise bad
    if "\x00" in location:
        raise CacheCorruptError(where, f"part field 'path' holds a NUL character: {location!r:.200}")
    for key, value, high in (("cache_id", cache_id, MAX_CACHE_ID), ("sample_count", count, MAX_FILE_BYTES)):
        if type(value) is not int or not 0 <= value <= high:
            raise CacheCorruptError(where, f"{bad.reason}: field {key!r} is {value!r:.40}, not an int in [0, {high}]")
    assert isinstance(cache_id, int) and isinstance(count, int)  # checked just above
    try:
        schema = tuple((str(c["name"]), str(c["kind"])) for c in entry["metadata_schema"])
    except (KeyError, TypeError):
        raise bad from None
    return CacheSetPart(location, cache_id, count, schema, digest)


def _read_set_manifest(backend: CacheBackend) -> bytes:
    try:
        return backend.read(SET_MANIFEST_FILE, _MAX_MANIFEST_BYTES)
    except MissingFile:
        mpath = backend.where(SET_MANIFEST_FILE)
        raise CacheCorruptError(mpath, "set manifest is missing (not a published cache set)") from None


def read_cache_set(
    path: SetLocation, *, storage_options: Mapping[str, Any] | None = None, remote_config: RemoteConfig | None = None
) -> CacheSet:
    """Read and check a set manifest (not its parts); ``path`` is a directory or a URL.

    Raises:
        CacheCorruptError: naming the manifest when it is missing, unreadable, of another format, lists no
            parts, repeats a cache id or mixes schemas (naming the part).
    """
    backend = _backend(path, storage_options, remote_config)
    set_dir = backend.where()
    mpath = backend.where(SET_MANIFEST_FILE)
    raw = _read_set_manifest(backend)
    try:
        body = loads_strict(raw)  # the cache manifest's rule: a repeated key is refused
    except ValueError as e:
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
    default_name = posixpath.basename(str(set_dir).rstrip("/"))
    cache_set = CacheSet(set_dir, str(body.get("name", default_name)), tuple(_parse_part(e, mpath) for e in entries))
    if problem := _disagreement(cache_set.parts):
        raise CacheCorruptError(mpath, problem)
    if body.get("sample_count") != cache_set.sample_count:
        raise CacheCorruptError(mpath, f"sample_count {body.get('sample_count')!r} is not the sum over the parts")
    return cache_set


def _disagreement(parts: Sequence[CacheSetPart]) -> str | None:
    """Why ``parts`` cannot form one dataset (another schema, a repeated cache id), naming the part; else None."""
    first = parts[0]
    seen: dict[int, str] = {}  # cache id: the part that has it
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


def _manifest_sha256(backend: CacheBackend) -> str:
    return hashlib.sha256(backend.read(MANIFEST_FILE, MAX_MANIFEST_BYTES)).hexdigest()


def _load_parts(
    cache_set: CacheSet, verify: bool, options: Mapping[str, Any] | None = None, config: RemoteConfig | None = None
) -> list[tuple[CacheLayout, pa.Table]]:
    """Load every part with its metadata table; each must be exactly the cache the manifest recorded."""
    loaded = []
    for part in cache_set.parts:
        check_origin(cache_set.path, SET_MANIFEST_FILE, part.location, cache_set.part_path(part), config)
        try:
            backend = _backend(cache_set.part_path(part), options, config)
        except ValueError as e:  # a URL with secrets in it, say: the message shows it redacted
            where = cache_set.path / SET_MANIFEST_FILE if isinstance(cache_set.path, Path) else cache_set.path
            raise CacheCorruptError(where, f"part cannot be opened: {e}") from None
        try:
            layout, table = load_cache(backend, verify=verify)
        except FileNotFoundError:
            raise CacheCorruptError(backend.where(), f"part {part.location} does not exist") from None
        recorded = (part.cache_id, part.sample_count, part.schema)
        if (layout.cache_id, layout.sample_count, layout.schema) != recorded or (
            _manifest_sha256(backend) != part.manifest_sha256
        ):
            raise CacheCorruptError(
                backend.where(MANIFEST_FILE),
                f"part {part.location} is not the cache the set recorded (replaced after the set was published?)",
            )
        loaded.append((layout, table))
    return loaded


def open_cache_set(
    path: SetLocation,
    *,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> tuple[CacheSet, list[CacheLayout]]:
    """Open a set and every part; each part must be exactly the cache the manifest recorded.

    Args:
        path: the set directory or URL.
        verify: also verify every checksum of every part.
        storage_options: fsspec options for remote sets and parts.
        remote_config: the remote settings for remote sets and parts.

    Raises:
        CacheCorruptError: naming the set manifest, or the file of the part at fault.
    """
    cache_set = read_cache_set(path, storage_options=storage_options, remote_config=remote_config)
    return cache_set, [layout for layout, _ in _load_parts(cache_set, verify, storage_options, remote_config)]


def load_caches(
    path: SetLocation,
    *,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> list[tuple[CacheLayout, pa.Table]]:
    """The caches at ``path`` with their metadata tables: its parts when it is a set, else the one cache there."""
    backend = _backend(path, storage_options, remote_config)
    if backend.stats_cheaply:
        is_set = is_cache_set(backend)
    else:  # a remote cache costs one round trip: its manifest is read first (with its index and metadata)
        expect_open(backend)
        is_set = not _has(backend, MANIFEST_FILE) and _has(backend, SET_MANIFEST_FILE)
    if is_set:
        return _load_parts(read_cache_set(backend), verify, storage_options, remote_config)
    return [load_cache(backend, verify=verify)]


def _has(backend: CacheBackend, rel: str) -> bool:
    """Whether ``rel`` is there (valid or not): its size where that is cheap, else a read of it (a remote manifest
    read now is the one the open reuses)."""
    try:
        if backend.stats_cheaply:
            backend.size(rel)
        else:
            backend.read(rel, _MAX_MANIFEST_BYTES)
    except MissingFile:
        return False
    except CacheCorruptError:
        return True  # there, but not a regular file or too large: reading it says what is wrong
    return True
