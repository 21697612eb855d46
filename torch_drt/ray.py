"""Build a cache set from a ``ray.data.Dataset`` on a Ray cluster, one task per part (the optional extra ``ray``).

The dataset is materialized once in its own order and split into contiguous row ranges (the plan depends on the
row count and the split only, never on the cluster); each range is written by one Ray task with the cache writer
into the set directory, which every node must see (a shared file system). The driver shows one progress bar,
fed by the tasks through a small counter actor (started only when the bar is drawn: an actor is a process of its
own), and publishes the set once every part is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from torch_drt.build.lifecycle import finish_build, start_build
from torch_drt.build.part import write_part
from torch_drt.build.plan import ColumnsToInput, PartPlan, part_bounds, plan_ranges
from torch_drt.build.progress import BuildProgress
from torch_drt.build.report import BuildReport, PartOutcome
from torch_drt.cache import CacheInput, RemoteConfig, WriterConfig

__all__ = ["build_cache_set"]

_POLL_SECONDS = 0.25
_ROWS_PER_CHUNK = 256  # Arrow rows turned into Python rows at a time
_BLOCKS_PER_GET = 64  # a part's blocks fetched from the object store in one call


class _RowCounter:
    """Rows done per part, as a Ray actor: tasks add to it, the driver reads it."""

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}

    def add(self, index: int, n: int) -> None:
        self.rows[index] = self.rows.get(index, 0) + n

    def counts(self) -> dict[int, int]:
        return self.rows


def _arrow_rows(block_refs: Sequence[Any], pieces: Sequence[tuple[int, int]] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a part's blocks, as dicts of Python values, fetched ``_BLOCKS_PER_GET`` blocks at a time (a part
    of a dataset made of many small blocks waited on one object-store round trip per block, between rows).

    Args:
        block_refs: the blocks (Arrow tables, or any Ray Data block), in row order.
        pieces: the ``(start, stop)`` rows of each block that belong to the part (None: every row).
    """
    import pyarrow as pa
    import ray
    from ray.data.block import BlockAccessor

    for start in range(0, len(block_refs), _BLOCKS_PER_GET):
        blocks = ray.get(list(block_refs[start : start + _BLOCKS_PER_GET]))
        for k, block in enumerate(blocks, start):
            table = block if isinstance(block, pa.Table) else BlockAccessor.for_block(block).to_arrow()
            if pieces is not None:
                first, stop = pieces[k]
                table = table.slice(first, stop - first)
            for batch in table.to_batches(max_chunksize=_ROWS_PER_CHUNK):
                yield from batch.to_pylist()


_Blocks = Sequence[tuple[list[Any], list[tuple[int, int]] | None]]  # each part's blocks, the rows of each (None: all)


def _block_pieces(data: Any, bounds: Sequence[tuple[int, int]]) -> list[tuple[list[Any], list[tuple[int, int]]]] | None:
    """Each part's blocks of the materialized ``data`` and the rows of each that belong to it, from the blocks'
    row counts (no Ray Data split: its tasks and round trips cost the driver and the workers CPU per part); None
    when a block's row count is unknown or a block is itself a slice (then ``split_at_indices`` splits)."""
    blocks: list[tuple[Any, int]] = []
    for bundle in data.iter_internal_ref_bundles():
        if any(s is not None for s in getattr(bundle, "slices", None) or ()):
            return None
        for entry in bundle.blocks:
            ref, meta = (entry.ref, entry.metadata) if hasattr(entry, "ref") else entry
            if meta.num_rows is None:
                return None
            blocks.append((ref, meta.num_rows))
    parts, k, first = [], 0, 0  # block k's rows before ``first`` went to earlier parts
    for start, stop in bounds:
        refs, pieces, at = [], [], start
        while at < stop:
            ref, rows = blocks[k]
            take = min(rows - first, stop - at)
            if take > 0:
                refs.append(ref)
                pieces.append((first, first + take))
            first, at = first + take, at + take
            if first == rows:
                k, first = k + 1, 0
        parts.append((refs, pieces))
    return parts


def _write_part_task(
    part: PartPlan,
    block_refs: list[Any],
    set_dir: Path | str,
    config: WriterConfig,
    counter: Any,
    remote: dict,
    pieces: list[tuple[int, int]] | None = None,
):
    """One Ray task: write one part from its blocks (runs on a worker); its rows are counted by ``counter`` (an
    actor handle, or None when no bar shows them)."""
    rows = _arrow_rows(block_refs, pieces)
    progress = None if counter is None else lambda n: counter.add.remote(part.index, n)
    return write_part(dataclasses.replace(part, input=rows), set_dir, config, progress, **remote)


def _materialize_in_order(dataset: Any) -> Any:
    """Run the dataset once, keeping its row order (so that a rerun splits the same rows into the same parts)."""
    options = dataset.context.execution_options
    saved = options.preserve_order, dataset.context.enable_progress_bars
    options.preserve_order, dataset.context.enable_progress_bars = True, False
    try:
        return dataset.materialize()
    finally:
        options.preserve_order, dataset.context.enable_progress_bars = saved


def _run_tasks(
    plan: list[PartPlan], blocks: _Blocks, start: Any, config: WriterConfig, options: dict,
    bar: BuildProgress,
) -> list[PartOutcome]:
    import ray
    from ray.exceptions import RayError

    # an actor handle (Any: ray types its methods as _RowCounter's own, without .remote)
    counter: Any = ray.remote(num_cpus=0)(_RowCounter).remote() if bar.shown else None
    task = ray.remote(_write_part_task).options(**options)
    pending = {}
    for p in plan:
        refs, pieces = blocks[p.index]
        pending[task.remote(p, refs, start.set_dir, config, counter, start.remote, pieces)] = p
    base, finished, outcomes = bar.done, {}, []
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=_POLL_SECONDS)
            for ref in ready:
                part = pending.pop(ref)
                finished[part.index] = part.rows or 0  # its counts may still be on their way to the counter
                try:
                    outcomes.append(ray.get(ref))
                except RayError as e:  # the task died (a killed worker, a lost node) and its retries ran out
                    reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                    outcomes.append(PartOutcome(part.index, part.name, "failed", message=reason))
            counts: dict[int, int] = ray.get(counter.counts.remote()) if counter is not None else {}
            running = {i: n for i, n in counts.items() if i not in finished}
            bar.set(base + sum(finished.values()) + sum(running.values()))
    finally:
        if counter is not None:
            ray.kill(counter)
    return outcomes


def build_cache_set(
    dataset: Any,
    root: str | Path,
    name: str,
    *,
    fn: Callable[[dict[str, Any]], CacheInput | None] | None = None,
    data_column: str = "data",
    metadata_columns: Sequence[str] | None = None,
    rows_per_part: int | None = None,
    num_parts: int | None = None,
    writer_config: WriterConfig | None = None,
    exist_ok: bool = False,
    max_retries: int = 3,
    num_cpus: float = 1,
    storage_options: dict[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> BuildReport:
    """Build the cache set ``root/name`` from ``dataset`` with one Ray task per part, then publish it.

    Connects to Ray as ``ray.data`` does (``ray.init()`` first to choose the cluster). A rerun after a failure
    reuses every part already published and writes the others; a task killed mid-write publishes nothing (Ray
    retries it up to ``max_retries`` times first).

    Args:
        dataset: a ``ray.data.Dataset``; its row order is kept (it is materialized once for the split).
        root: the directory holding the set, visible to every node at the same path, or a URL (parts are staged on
            the workers and uploaded; the set manifest is written last).
        name: the set's name; part ``k`` is the cache ``root/name/name-0000k``.
        fn: row (a dict of Python values) -> ``CacheInput``, or None to leave the row out; runs in the tasks.
            Default: ``data_column`` is the payload and the other columns (or ``metadata_columns``) the metadata.
        data_column: the payload column when ``fn`` is not given.
        metadata_columns: the metadata columns when ``fn`` is not given (default: all but ``data_column``).
        rows_per_part: rows per part (default ``DEFAULT_ROWS_PER_PART``); or give ``num_parts``.
        num_parts: split the rows into this many near-equal parts instead.
        writer_config: the parts' writer settings; ``show_progress`` governs the driver's bar.
        exist_ok: return the report of the set when it is already published instead of raising.
        max_retries: Ray's retries of a task whose worker died.
        num_cpus: CPUs reserved by each task.
        storage_options: fsspec options for a URL root (they travel to the tasks).
        remote_config: remote settings for a URL root.

    Returns:
        A ``BuildReport`` (the set's path when published; each failed part names its input row).

    Raises:
        FileExistsError: when the set is already published and not ``exist_ok``.
        ValueError: for an empty dataset, an invalid name or split, or a plan that differs from an unfinished
            earlier run's.
    """
    try:
        import ray.data  # noqa: F401 - the extra is needed on the driver and the workers
    except ImportError as e:
        raise ImportError("torch_drt.ray needs Ray Data: pip install 'torch_drt[ray]'") from e
    config = writer_config or WriterConfig()
    convert = fn or ColumnsToInput(data_column, metadata_columns)
    data = _materialize_in_order(dataset)
    bounds = part_bounds(data.count(), rows_per_part, num_parts)
    if not bounds:
        raise ValueError(f"the dataset has no rows: there is nothing to build into set {name!r}")
    plan = plan_ranges(name, bounds, convert)
    start = start_build(
        root, name, plan, exist_ok=exist_ok, verify=config.validate_cache, storage_options=storage_options,
        remote_config=remote_config,
    )
    if start.complete is not None:
        return start.complete
    blocks: _Blocks | None = _block_pieces(data, bounds)
    if blocks is None:
        splits = data.split_at_indices([a for a, _ in bounds[1:]]) if len(bounds) > 1 else [data]
        blocks = [(split.to_arrow_refs(), None) for split in splits]
    todo = [p for p in plan if p.index not in start.done]
    options = {"max_retries": max_retries, "num_cpus": num_cpus}
    with BuildProgress(name, bounds[-1][1], enabled=config.show_progress) as bar:
        bar.add(sum(plan[i].rows or 0 for i in start.done))
        outcomes = _run_tasks(todo, blocks, start, config, options, bar) if todo else []
    return finish_build(start, name, [*start.done.values(), *outcomes])
