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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_drt.build.part import published_part
from torch_drt.build.plan import PartPlan
from torch_drt.build.report import BuildReport, PartOutcome
from torch_drt.cache import CacheCorruptError, is_cache_set, open_cache_set, publish_cache_set
from torch_drt.cache.cache_set import read_cache_set

__all__ = ["JOURNAL_FILE", "BuildStart", "finish_build", "read_journal", "set_directory", "start_build"]

JOURNAL_FILE = ".build-plan.json"
_JOURNAL_FORMAT = "torch_drt.cacheset.plan"


@dataclass(frozen=True)
class BuildStart:
    """Where a build stands before any part is written.

    Attributes:
        set_dir: the set directory (the parts' root).
        done: the parts already published, by index.
        complete: the report of a set already published (only with ``exist_ok``): nothing is left to do.
    """

    set_dir: Path
    done: dict[int, PartOutcome]
    complete: BuildReport | None = None


def set_directory(root: str | Path, name: str) -> Path:
    """The directory of set ``name`` under ``root``: the one place that turns a build root into a location.

    Raises:
        ValueError: for an object-store root (builds write to a local or shared file system for now).
    """
    text = str(root)
    if "://" in text and not text.startswith("file://"):
        from torch_drt.sources.template import redact

        raise ValueError(f"{redact(text)}: building a set into an object store is not supported yet")
    return Path(text.removeprefix("file://")) / name


def read_journal(set_dir: Path) -> dict[str, Any] | None:
    """The plan a build of this set recorded, or None when none was recorded (or it is unreadable)."""
    try:
        body = json.loads((set_dir / JOURNAL_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("format") == _JOURNAL_FORMAT else None


def _check_plan(set_dir: Path, name: str, plan: Sequence[PartPlan]) -> None:
    """Record the plan on the first run; on a later run, refuse a plan that differs from the recorded one."""
    body = {"format": _JOURNAL_FORMAT, "version": 1, "set": name, "parts": [p.describe() for p in plan]}
    recorded = read_journal(set_dir)
    if recorded is None:
        tmp = set_dir / f".{JOURNAL_FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True))
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


def _existing(set_dir: Path, name: str, plan: Sequence[PartPlan]) -> BuildReport:
    cache_set, layouts = open_cache_set(set_dir)
    by_name = {part.location: layout for part, layout in zip(cache_set.parts, layouts)}
    if stray := sorted(set(by_name) - {p.name for p in plan}):
        raise ValueError(f"the set at {set_dir} was not built by this plan: it has parts {stray}")
    outcomes = tuple(
        PartOutcome(p.index, p.name, "reused", set_dir / p.name, by_name[p.name].sample_count)
        if p.name in by_name
        else PartOutcome(p.index, p.name, "empty")
        for p in plan
    )
    return BuildReport(name, set_dir, outcomes)


def start_build(
    root: str | Path, name: str, plan: Sequence[PartPlan], *, exist_ok: bool = False, verify: bool = False
) -> BuildStart:
    """Check the set is not published (or, with ``exist_ok``, is this very build), record or check the plan, and
    find the parts already published.

    Raises:
        FileExistsError: when the set is already published (and not ``exist_ok``).
        ValueError: when an earlier run of this set recorded another plan.
    """
    set_dir = set_directory(root, name)
    if is_cache_set(set_dir):
        if not exist_ok:
            raise FileExistsError(f"cache set already exists: {set_dir} (a set is never overwritten)")
        _check_plan(set_dir, name, plan)
        return BuildStart(set_dir, {}, _existing(set_dir, name, plan))
    set_dir.mkdir(parents=True, exist_ok=True)
    _check_plan(set_dir, name, plan)
    done = {p.index: o for p in plan if (o := published_part(p, set_dir, verify=verify)) is not None}
    return BuildStart(set_dir, done)


def finish_build(start: BuildStart, name: str, outcomes: Sequence[PartOutcome]) -> BuildReport:
    """Publish the set when every part is written, reused or empty; else report the failures.

    Parts that failed publish nothing; the others stay published and a rerun reuses them.
    """
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
        publish_cache_set(start.set_dir, [o.path for o in kept])
    except FileExistsError:
        if [p.location for p in read_cache_set(start.set_dir).parts] != [o.name for o in kept]:
            return BuildReport(name, None, outcomes, f"another set was published at {start.set_dir} meanwhile")
    except (ValueError, CacheCorruptError) as e:  # the parts do not form one dataset (another schema)
        return BuildReport(name, None, outcomes, str(e))
    return BuildReport(name, start.set_dir, outcomes)
