"""The two ends of every set build, whatever the engine: start (plan check, reusable parts) and finish (publish).

A build of set ``S`` under ``ROOT`` writes its parts into ``ROOT/S/`` and records its plan there in
``.build-plan.json`` first; a later run of the same build (after a failure) must plan the same parts and reuses
every part already published. The set itself (``ROOT/S/cacheset.json``) is published last, once every part is
written, and is never overwritten.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch_drt.build._set_entries import SetEntries
from torch_drt.build.part import published_part
from torch_drt.build.plan import PartPlan
from torch_drt.build.report import BuildReport, PartOutcome
from torch_drt.cache import CacheCorruptError, RemoteConfig, is_cache_set, open_cache_set
from torch_drt.locations.location import Location
from torch_drt.locations.remote_store import RemoteStore
from torch_drt.publish import fsync_dir
from torch_drt.sets.cache_set import read_cache_set
from torch_drt.sets.cache_set_publish import publish_described

JOURNAL_FILE = ".build-plan.json"
_JOURNAL_FORMAT = "torch_drt.cacheset.plan"


@dataclass(frozen=True)
class BuildStart:
    """Where a build stands before any part is written.

    Attributes:
        set_dir: the set directory (the parts' root), or its URL.
        done: the parts already published, by index.
        complete: the report of a set already published (only with ``exist_ok``): nothing is left to do.
        remote: ``storage_options`` and ``remote_config`` for a URL root (keyword arguments of ``write_part``).
    """

    set_dir: Path | str
    done: dict[int, PartOutcome]
    complete: BuildReport | None = None
    remote: dict[str, Any] = field(default_factory=dict)


def set_directory(root: str | Path, name: str) -> Path | str:
    """The directory of set ``name`` under ``root``: the one place that turns a build root into a location (a URL
    root gives the set's URL: parts are staged locally and uploaded, the set manifest written last)."""
    return Location.parse(root).join(name).target


def read_journal(set_dir: Path | str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The plan a build of this set recorded, or None when none was recorded (or it is unreadable)."""
    try:
        if isinstance(set_dir, str):
            raw = RemoteStore(set_dir, storage_options).read_or_none(JOURNAL_FILE, 64 << 20)
            if raw is None:
                return None
        else:
            raw = (set_dir / JOURNAL_FILE).read_bytes()
        body = json.loads(raw)
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("format") == _JOURNAL_FORMAT else None


def _check_plan(set_dir: Path | str, name: str, plan: Sequence[PartPlan], remote: dict[str, Any]) -> None:
    """Record the plan on the first run; on a later run, refuse a plan that differs from the recorded one."""
    body: dict[str, Any] = {"format": _JOURNAL_FORMAT, "version": 1, "set": name, "parts": [p.describe() for p in plan]}
    recorded = read_journal(set_dir, remote.get("storage_options"))
    if recorded is None:
        text = json.dumps(body, indent=2, sort_keys=True)
        if isinstance(set_dir, str):
            RemoteStore(set_dir, remote.get("storage_options"), remote.get("remote_config")).put(
                JOURNAL_FILE, text.encode()
            )
            return
        tmp = set_dir / f".{JOURNAL_FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        tmp.write_text(text)
        os.replace(tmp, set_dir / JOURNAL_FILE)
        return
    if recorded.get("parts") == body["parts"]:
        return
    old, new = recorded.get("parts") or [], body["parts"]
    first = next((k for k in range(max(len(old), len(new))) if k >= len(old) or k >= len(new) or old[k] != new[k]), 0)
    was = old[first] if first < len(old) else "absent"
    now = new[first] if first < len(new) else "absent"
    raise ValueError(
        f"set {name!r} at {set_dir} was started with another plan ({len(old)} parts, now {len(new)}; part {first} "
        f"was {was}, now {now}): resume with the same input and split, or remove {set_dir} to start over"
    )


def _existing(set_dir: Path | str, name: str, plan: Sequence[PartPlan], remote: dict[str, Any]) -> BuildReport:
    cache_set, layouts = open_cache_set(set_dir, **remote)
    by_name = {part.location: layout for part, layout in zip(cache_set.parts, layouts)}
    if stray := sorted(set(by_name) - {p.name for p in plan}):
        raise ValueError(f"the set at {set_dir} was not built by this plan: it has parts {stray}")
    outcomes = tuple(
        PartOutcome(p.index, p.name, "reused", part_location(set_dir, p.name), by_name[p.name].sample_count)
        if p.name in by_name
        else PartOutcome(p.index, p.name, "empty")
        for p in plan
    )
    return BuildReport(name, set_dir, outcomes)


def part_location(set_dir: Path | str, part: str) -> Path | str:
    """Where part ``part`` of the set lives (a path, or a URL)."""
    return f"{set_dir}/{part}" if isinstance(set_dir, str) else set_dir / part


def start_build(
    root: str | Path,
    name: str,
    plan: Sequence[PartPlan],
    *,
    exist_ok: bool = False,
    verify: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> BuildStart:
    """Check the set is not published (or, with ``exist_ok``, is this very build), record or check the plan, and
    find the parts already published.

    Raises:
        FileExistsError: when the set is already published (and not ``exist_ok``).
        ValueError: when an earlier run of this set recorded another plan.
    """
    set_dir = set_directory(root, name)
    remote: dict[str, Any] = (
        {"storage_options": storage_options, "remote_config": remote_config} if isinstance(set_dir, str) else {}
    )
    if is_cache_set(set_dir, **remote):
        if not exist_ok:
            raise FileExistsError(f"cache set already exists: {set_dir} (a set is never overwritten)")
        _check_plan(set_dir, name, plan, remote)
        return BuildStart(set_dir, {}, _existing(set_dir, name, plan, remote), remote)
    if isinstance(set_dir, Path):
        set_dir.mkdir(parents=True, exist_ok=True)
    _check_plan(set_dir, name, plan, remote)
    done = {p.index: o for p in plan if (o := published_part(p, set_dir, verify=verify, **remote)) is not None}
    return BuildStart(set_dir, done, remote=remote)


def finish_build(
    start: BuildStart, name: str, outcomes: Sequence[PartOutcome], entries: SetEntries | None = None
) -> BuildReport:
    """Publish the set when every part is written, reused or empty; else report the failures.

    ``entries`` holds the set manifest's entries the driver made as parts were reported done (``_set_entries``);
    those of the other parts are made here.

    Parts that failed publish nothing; the others stay published and a rerun reuses them. A local set directory is
    synced first, once: the parts' publishing renames (which ``write_part`` leaves unsynced) are durable before the
    set is published, and a finished build's written parts before it returns.
    """
    if isinstance(start.set_dir, Path):
        fsync_dir(start.set_dir)
    outcomes = tuple(sorted(outcomes, key=lambda o: o.index))
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        shown = "; ".join(str(o) for o in failed[:5]) + ("; ..." if len(failed) > 5 else "")
        return BuildReport(
            name, None, outcomes, f"{len(failed)} of {len(outcomes)} parts failed (a rerun reuses the others): {shown}"
        )
    kept = [o for o in outcomes if o.status in ("written", "reused")]
    if not kept:
        return BuildReport(name, None, outcomes, "every part is empty: there is nothing to publish")
    try:
        if entries is None:
            entries = SetEntries(start.set_dir, start.remote)
        publish_described(entries.location, [entries.entry(o) for o in kept], **start.remote)
    except FileExistsError:
        if [p.location for p in read_cache_set(start.set_dir, **start.remote).parts] != [o.name for o in kept]:
            return BuildReport(name, None, outcomes, f"another set was published at {start.set_dir} meanwhile")
    except (ValueError, CacheCorruptError) as e:  # the parts do not form one dataset (another schema)
        return BuildReport(name, None, outcomes, str(e))
    return BuildReport(name, start.set_dir, outcomes)
