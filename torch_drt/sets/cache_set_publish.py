"""Publishing a cache set: record existing part caches under one name, never overwriting a published set.

The set's manifest (``cacheset.json``, read by ``cache_set``) is written last and in one step: a local one is linked
into place from a synced temporary file, a remote one is put conditionally where the store supports it.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_drt.cache.validate import open_cache
from torch_drt.locations.location import Location, split_protocol
from torch_drt.publish import fsync_dir
from torch_drt.sets.cache_set import (
    SET_FORMAT_NAME,
    SET_FORMAT_VERSION,
    SET_MANIFEST_FILE,
    CacheSet,
    CacheSetPart,
    _backend,
    _disagreement,
    _manifest_sha256,
    _schema_json,
    validate_set_name,
)

if TYPE_CHECKING:
    from torch_drt.locations.remote_config import RemoteConfig


def _location(set_dir: Location, part_dir: Location) -> str:
    """The part's path relative to the set when both lie under the set's root (the root can move), else absolute
    (or its URL)."""
    if set_dir.is_remote or part_dir.is_remote:
        if set_dir.is_remote and part_dir.is_remote:
            (scheme, set_rest), (part_scheme, part_rest) = split_protocol(set_dir.url), split_protocol(part_dir.url)
            if scheme == part_scheme and part_rest.startswith(posixpath.dirname(set_rest) + "/"):
                return posixpath.relpath(part_rest, set_rest)
        return str(part_dir.target)
    part, root = part_dir.path.resolve(), set_dir.path.resolve().parent
    if part.is_relative_to(root):
        return Path(os.path.relpath(part, set_dir.path.resolve())).as_posix()
    return str(part)


def describe_part(
    set_location: Location,
    part: str | Path,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheSetPart:
    """The set manifest's entry for part cache ``part``: the part opened (structure), its manifest hashed, and its
    location as the set at ``set_location`` records it (see ``publish_cache_set``).

    Raises:
        CacheCorruptError: naming the file of a part that is not a valid cache.
    """
    part_location = Location.parse(part, storage_options, remote_config)
    backend = part_location.backend()
    layout = open_cache(backend)
    return CacheSetPart(
        _location(set_location, part_location), layout.cache_id, layout.sample_count, layout.schema,
        _manifest_sha256(backend),
    )


def publish_cache_set(
    path: str | Path,
    parts: Sequence[str | Path],
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheSet:
    """Publish a set of existing caches at ``path`` (created when missing); never overwrites a set.

    Each part is opened (structure), checked against the others (one schema, distinct cache ids) and recorded
    by its path relative to the set directory when both lie under one root (``ROOT/set``, ``ROOT/part`` or
    ``ROOT/set/part``), else by its absolute path or URL. A local manifest is
    written to a temporary file, synced, and linked into place in one step that fails when a set is already
    there; a remote one is written with a conditional put where the store has them (see ``RemoteConfig``).

    Args:
        path: the set directory or URL; its name is the set's name.
        parts: the part caches (directories or URLs), in dataset order.
        storage_options: fsspec options for URLs.
        remote_config: the remote settings for URLs.

    Returns:
        The published set.

    Raises:
        FileExistsError: when a set is already published at ``path``.
        CacheCorruptError: naming the file of a part that is not a valid cache.
        ValueError: naming the part whose schema or cache id does not fit the others; when ``parts`` is empty
            or the set name is invalid.
    """
    set_location = Location.parse(path, storage_options, remote_config)
    entries = [
        functools.partial(
            describe_part, set_location, part, storage_options=storage_options, remote_config=remote_config
        )
        for part in parts
    ]
    return publish_described(set_location, entries, storage_options=storage_options, remote_config=remote_config)


def publish_described(
    set_location: Location,
    entries: Sequence[Callable[[], CacheSetPart]],
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheSet:
    """Publish the set at ``set_location`` from its parts' entries (``describe_part``): the set-level step of
    ``publish_cache_set``, which see. Each entry is taken (called) once, in order, after the check that no set
    is published there; a builder passes entries made as its parts were written.

    Raises:
        as ``publish_cache_set`` (and whatever taking an entry raises).
    """
    set_dir, remote = set_location.target, set_location.is_remote
    name = validate_set_name(posixpath.basename(str(set_dir)))
    if not entries:
        raise ValueError("a cache set needs at least one part")
    if not remote and (Path(set_dir) / SET_MANIFEST_FILE).exists():
        raise FileExistsError(f"cache set already exists: {set_dir}")
    parts = [entry() for entry in entries]
    if problem := _disagreement(parts):
        raise ValueError(problem)
    cache_set = CacheSet(set_dir, name, tuple(parts))
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
            for p in parts
        ],
    }
    if remote:
        _put_new_remote(str(set_dir), body, storage_options, remote_config)
    else:
        Path(set_dir).mkdir(parents=True, exist_ok=True)
        _write_new_json(Path(set_dir) / SET_MANIFEST_FILE, body)
    return cache_set


def _put_new_remote(
    set_url: str, body: Any, options: Mapping[str, Any] | None, config: RemoteConfig | None
) -> None:
    from torch_drt.locations.remote_store import RemoteStore

    store = RemoteStore(set_url, options, config)
    if not store.put_new(SET_MANIFEST_FILE, json.dumps(body, indent=2, sort_keys=True).encode()):
        raise FileExistsError(f"cache set already exists: {set_url}")
    _backend(set_url, options, config).forget(SET_MANIFEST_FILE)  # a "missing" answer this node remembered is stale now


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
