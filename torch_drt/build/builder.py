"""``build_cache_set``: build a set from sources or row ranges, in this process or across torchrun ranks."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_drt.build._set_entries import SetEntries
from torch_drt.build._workers import check_workers, write_parts
from torch_drt.build.lifecycle import finish_build, start_build
from torch_drt.build.plan import plan_parts
from torch_drt.build.progress import BuildProgress
from torch_drt.build.report import BuildReport
from torch_drt.cache import RemoteConfig, WriterConfig


def build_cache_set(
    inputs: Sequence[Any],
    root: str | Path,
    name: str,
    *,
    writer_config: WriterConfig | None = None,
    exist_ok: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
    num_workers: int = 0,
    multiprocessing_context: str | None = None,
) -> BuildReport:
    """Build the cache set ``root/name``, one part per input, and publish it once every part is written.

    In a torchrun job (``torch.distributed`` initialized with several ranks) every rank calls this with the same
    inputs: the parts left to write are dealt to the ranks in turn, rank 0 shows one progress bar for the whole
    build and publishes the set after all ranks finished, and every rank returns the same report. Otherwise the
    parts are written one after another in this process, or by ``num_workers`` local worker processes (a part at a
    time each; a worker that dies is replaced and its part written again; one that dies twice fails the part).
    Either way the set is the same, byte for byte.

    A rerun of a build that failed (a bad row, a killed rank) reuses every part already published and writes the
    others; it must plan the same parts (same inputs, same split).

    Args:
        inputs: the parts' inputs: ``RowRange`` objects (see ``split_rows``) or cache sources (objects with
            ``name`` and ``__iter__`` yielding ``CacheInput``), one part each.
        root: the directory that holds the set (``root/name``); shared by every node of a multi-node job. Or a
            URL (``s3://bucket/sets``): each part is staged locally and uploaded, the set manifest written last.
        name: the set's name; part ``k`` is the cache ``root/name/name-0000k``.
        writer_config: the parts' writer settings; ``show_progress`` governs the build's one bar.
        exist_ok: when the set is already published, return its report instead of raising (the plan must
            match the one it was built with).
        storage_options: fsspec options for a URL root.
        remote_config: remote settings for a URL root.
        num_workers: worker processes writing the parts (0: this process); under torchrun, each rank's.
        multiprocessing_context: their start method (default fork where there is fork; with spawn or forkserver the
            inputs and row functions must pickle).

    Returns:
        A ``BuildReport``: the set's path when published, each part's outcome (failures name the input row).

    Raises:
        FileExistsError: when the set is already published and not ``exist_ok`` (it is never overwritten).
        ValueError: for an invalid name, split or worker setting, when an earlier unfinished run planned other
            parts, or when ranks pass different inputs.
    """
    check_workers(num_workers, multiprocessing_context)
    workers: dict[str, Any] = {"num_workers": num_workers, "multiprocessing_context": multiprocessing_context}
    config = writer_config or WriterConfig()
    plan = plan_parts(name, inputs)
    if "torch.distributed" in sys.modules:  # else no process group can be initialized (and torch stays unloaded)
        from torch_drt.build._distributed import Ranks, build_on_ranks

        ranks = Ranks.current()
        if ranks is not None:
            try:
                return build_on_ranks(
                    ranks, plan, root, name, config, exist_ok, storage_options, remote_config, workers
                )
            finally:
                ranks.close()
    start = start_build(
        root, name, plan, exist_ok=exist_ok, verify=config.validate_cache, storage_options=storage_options,
        remote_config=remote_config,
    )
    if start.complete is not None:
        return start.complete
    known = [p.rows for p in plan]
    total = None if None in known else sum(r or 0 for r in known)
    with BuildProgress(name, total, enabled=config.show_progress) as bar:
        bar.add(sum(plan[i].rows or 0 for i in start.done))
        entries = SetEntries(start.set_dir, start.remote)  # made as each part is done, not all at the end
        for reused in start.done.values():
            entries.add(reused)
        todo = [p for p in plan if p.index not in start.done]
        written = write_parts(todo, start.set_dir, config, bar.add, start.remote, **workers, on_done=entries.add)
    return finish_build(start, name, [*start.done.values(), *written], entries)
