"""The cache-set side of the ``torch-drt cache`` commands: build (also under torchrun), info, verify, ls."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from torch_drt.cache import CacheCorruptError, WriterConfig, is_cache_set, open_cache_set
from torch_drt.locations import backend_for
from torch_drt.locations.remote_store import RemoteStore


def under_torchrun() -> bool:
    """True when torchrun (or another launcher of several ranks) started this process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def _join_ranks() -> bool:
    """Join the launcher's process group (gloo) unless one is initialized; True when this call joined it."""
    import torch.distributed as dist

    if dist.is_initialized() or not under_torchrun():
        return False
    dist.init_process_group("gloo")
    return True


def build_set(
    source: Any,
    root: str,
    name: str,
    parts: int | None,
    config: WriterConfig,
    options: dict[str, Any] | None = None,
    num_workers: int = 0,
) -> int:
    """Build set ``root/name`` (a directory or URL) from a random-access source, split into ``parts`` (default: one
    per rank), the parts written by ``num_workers`` local worker processes (0: this process; under torchrun: each
    rank's)."""
    import torch.distributed as dist

    from torch_drt.build import build_cache_set, split_rows
    from torch_drt.sampling.topology import resolve_topology

    joined = _join_ranks()
    rank, world = resolve_topology()
    try:
        try:
            inputs = split_rows(source, num_parts=parts or world)
            report = build_cache_set(
                inputs, root, name, writer_config=config, storage_options=options, num_workers=num_workers
            )
        except (TypeError, ValueError, FileExistsError) as e:
            if rank == 0:
                print(f"error: {e}", file=sys.stderr)
            return 2
        if rank == 0:
            print(report.summary())
            for failure in report.failures:
                print(f"  {failure}", file=sys.stderr)
        return 0 if report.ok else 1
    finally:
        if joined:
            dist.destroy_process_group()


def set_info(path: str | Path, as_json: bool, options: dict[str, Any] | None = None) -> int:
    """Print a set's summary: parts, samples, schema (with ``as_json``: only JSON, the manifest included)."""
    try:
        cache_set, layouts = open_cache_set(path, storage_options=options)
    except CacheCorruptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    size = sum(s for layout in layouts for _, s in layout.shards)
    if as_json:  # JSON only on stdout
        summary = {
            "path": str(cache_set.path),
            "format": "cache set",
            "name": cache_set.name,
            "sample_count": cache_set.sample_count,
            "shard_count": sum(len(layout.shards) for layout in layouts),
            "bytes": size,
            "schema": dict(cache_set.schema),
            "parts": [
                {"location": str(p.location), "sample_count": p.sample_count, "cache_id": p.cache_id}
                for p in cache_set.parts
            ],
            "manifest": json.loads(backend_for(path, options).read("cacheset.json", 64 << 20)),
        }
        print(json.dumps(summary, indent=2))
        return 0
    print(f"path:        {cache_set.path}")
    print(f"format:      cache set of {len(cache_set.parts)} parts")
    print(f"set:         {cache_set.name}")
    print(f"samples:     {cache_set.sample_count}")
    print(f"shards:      {sum(len(layout.shards) for layout in layouts)}, {size:,} bytes")
    print("schema:      " + ", ".join(f"{n}: {k}" for n, k in cache_set.schema))
    for part in cache_set.parts:
        print(f"  {part.location:<40} {part.sample_count:>10} samples  cache_id {part.cache_id}")
    return 0


def verify_set(path: str | Path, options: dict[str, Any] | None = None) -> int:
    """Verify a set and every checksum of its parts; print ``ok`` or ``CORRUPT`` and return 0 or 1."""
    try:
        cache_set, layouts = open_cache_set(path, verify=True, storage_options=options)
    except CacheCorruptError as e:
        print(f"CORRUPT {e.path}: {e.reason}")
        return 1
    files = sum(len(layout.checksums) for layout in layouts)
    print(f"ok      {cache_set.path} (set of {len(layouts)} parts, {files} files verified)")
    return 0


def ls_line(entry: Path | str, options: dict[str, Any] | None = None) -> str | None:
    """The ``ls`` line of a set or of an unfinished set build (a directory or URL); None for anything else."""
    from torch_drt.build.lifecycle import read_journal

    name = str(entry).rstrip("/").rsplit("/", 1)[-1]
    if is_cache_set(entry, storage_options=options):
        try:
            cache_set, layouts = open_cache_set(entry, storage_options=options)
        except CacheCorruptError as e:
            return f"{name:<30} invalid set: {e.reason}"
        size = sum(s for layout in layouts for _, s in layout.shards)
        return f"{name:<30} {cache_set.sample_count:>10} samples  {size:>14,} bytes  set of {len(layouts)} parts"
    if (journal := read_journal(entry, options)) is None:
        return None
    planned = [str(p.get("name")) for p in journal.get("parts") or [] if isinstance(p, dict)]
    published = sum(_has_manifest(entry, p, options) for p in planned)
    return f"{name:<30} unfinished set build: {published} of {len(planned)} parts published"


def _has_manifest(entry: Path | str, part: str, options: dict[str, Any] | None) -> bool:
    if isinstance(entry, Path):
        return (entry / part / "manifest.json").is_file()
    return RemoteStore(f"{entry.rstrip('/')}/{part}", options).read_or_none("manifest.json", 1) is not None
