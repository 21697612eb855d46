"""Writing a build's parts: one after another in this process, or in local worker processes (``num_workers``).

Worker processes are the project's process pool (``torch_drt._processes``): each worker holds at most one part at a
time (the next part goes to the first worker that is free), a worker that dies is replaced and its part is written
again from the start by the replacement, and a part whose worker died twice fails (the rerun writes it). A part
killed mid-write publishes nothing (``write_part``). With fork the workers inherit the writer's first-use imports
(``warm_up``) and report their rows as they go through a shared array, one slot per part (no lock a killed worker
could leave taken); with spawn or forkserver the plan is pickled to each worker and the bar moves once per part.

With fork each part is sent with a hint, the part its worker gets next (one no other worker was told; a worker gets
its hinted part when it is still there, else the first left): while the writer ends the current part (its hash,
syncs and publish: mostly waiting on the disk) the worker converts the hinted part's first rows (``_prefetch.py``).
A part is converted ahead at most once in a build (a shared flag), so a row that kills its worker kills it at most
once outside its own part: the part being ended then is written again by the replacement, which converts nothing
ahead, and the killing part fails alone as it would have. A part a dead worker had already published is found
published by the replacement: written by this build, it is reported ``"written"``.

With fork and several workers, once no part is left to start a free worker helps a running part: it converts that
part's last rows, which the part's writer takes instead of converting them, so the workers end together rather than
one idling while another converts the rest of its part (``_tail_help.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch_drt._scratch import ScratchDir
from torch_drt.build._prefetch import Prefetch, can_prefetch
from torch_drt.build._tail_help import TailHelp
from torch_drt.build.part import write_part
from torch_drt.build.plan import PartPlan
from torch_drt.build.report import PartOutcome
from torch_drt.cache import WriterConfig
from torch_drt.cache.writer import warm_up

_POLL_SECONDS = 0.25


def check_workers(num_workers: int, multiprocessing_context: str | None) -> None:
    """Validate the worker settings up front.

    Raises:
        ValueError: for a count that is not an int >= 0 or an unknown start method.
    """
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise ValueError(f"{num_workers=} must be an int >= 0")
    if multiprocessing_context is not None and multiprocessing_context not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"{multiprocessing_context=} is not a start method here ({multiprocessing.get_all_start_methods()})"
        )


class _WritePart:
    """The workers' function: for the task ``(k, hint, False)`` write part ``plan[k]``, counting its rows in
    ``counts[k]``, converting part ``hint``'s first rows ahead while part ``k`` ends (when ``ahead``, a flag per
    part, allows) and taking the last rows a helper converted (``tail``); for ``(k, None, True)`` help part ``k``'s
    writer with its last rows (``_tail_help.py``), returning how many."""

    def __init__(self, plan: Sequence[PartPlan], set_dir: Path | str, config: WriterConfig, remote: dict,
                 counts: Any, ahead: Any, tail: TailHelp | None = None) -> None:
        self.plan, self.set_dir, self.config, self.remote, self.counts = plan, set_dir, config, remote, counts
        self.ahead, self.tail = ahead, tail
        self._prefetch: Prefetch | None = None

    def _start_prefetch(self, hint: int) -> None:
        if not self.ahead[hint]:  # never twice in a build: a row that kills its worker kills one ahead at most once
            self.ahead[hint] = 1
            self._prefetch = Prefetch(self.plan[hint])

    def __call__(self, task: tuple[int, int | None, bool]) -> PartOutcome | int:
        k, hint, helps = task
        prefetch, self._prefetch = self._prefetch, None
        head = prefetch.take() if prefetch is not None else []
        if prefetch is not None and prefetch.index != k:
            head = []  # another worker took the hinted part (the build's tail)
        if helps:
            assert self.tail is not None
            return self.tail.help(k)
        progress = None
        if self.counts is not None:
            counts = self.counts
            counts[k] = 0  # a part written again after its worker died counts from the start

            def progress(n: int) -> None:
                counts[k] += n

        at_end = None
        if hint is not None and self.ahead is not None and can_prefetch(self.plan[hint]):
            at_end = functools.partial(self._start_prefetch, hint)
        take = self.tail.taker(k) if self.tail is not None and can_prefetch(self.plan[k]) else None
        outcome = write_part(self.plan[k], self.set_dir, self.config, progress, **self.remote, head=head,
                             at_end=at_end, take=take)
        if self._prefetch is not None:
            self._prefetch.stop()  # the rows it converted wait for the next task
        if outcome.status == "reused":  # published by this build's worker that died after publishing it
            outcome = dataclasses.replace(outcome, status="written")
        return outcome


def write_parts(
    plan: Sequence[PartPlan],
    set_dir: Path | str,
    config: WriterConfig,
    progress: Callable[[int], None],
    remote: dict[str, Any],
    num_workers: int = 0,
    multiprocessing_context: str | None = None,
    on_done: Callable[[PartOutcome], None] | None = None,
) -> list[PartOutcome]:
    """Write every part of ``plan``; one outcome each (never raises for a part: a failure is its outcome).

    Args:
        plan: the parts to write.
        set_dir: the set directory (or URL).
        config: the parts' writer settings.
        progress: called with the number of input rows done since its last call.
        remote: ``storage_options`` and ``remote_config`` for a URL set directory.
        num_workers: worker processes (0: one after another in this process).
        multiprocessing_context: the workers' start method (None: fork where there is fork).
        on_done: called in this process with each part's outcome as the part is done (with workers, once the free
            workers were given their next parts: it overlaps the parts still being written).
    """
    report = on_done or (lambda outcome: None)
    if num_workers == 0 or not plan:
        written = []
        for p in plan:
            written.append(write_part(p, set_dir, config, progress, **remote))
            report(written[-1])
        return written
    from concurrent.futures.process import BrokenProcessPool

    from torch_drt._processes.pool import ProcessPool

    method = multiprocessing_context or ("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    ctx = multiprocessing.get_context(method)
    fork = ctx.get_start_method() == "fork"
    if fork:
        warm_up()  # forked workers inherit the writer's first-use imports instead of each paying them
    counts = ctx.RawArray("q", len(plan)) if fork else None  # inherited, never pickled
    ahead = ctx.RawArray("b", len(plan)) if fork else None  # parts converted ahead once already
    workers = min(num_workers, len(plan))
    tail, scratch = None, None
    if fork and workers > 1:
        with contextlib.suppress(OSError):  # no scratch directory: no help
            scratch = ScratchDir("torch_drt-build-")  # a killed build's goes with the next build's
            tail = TailHelp(ctx, plan, str(scratch.path))
    write = _WritePart(plan, set_dir, config, remote, counts, ahead, tail)
    pool = ProcessPool(write, workers, method, torch_threads=None)
    outcomes: dict[int, PartOutcome] = {}
    running: dict[int, tuple[Any, int]] = {}  # part -> (task, worker)
    helping: dict[int, tuple[Any, int]] = {}  # worker -> (help task, part)
    shown = 0
    unreported: list[int] = []  # parts done, their outcomes not yet passed to on_done

    def show() -> None:
        nonlocal shown
        done = sum(plan[k].rows or 0 for k in outcomes)
        if counts is not None:
            done += sum(counts[k] for k in running)
        if done > shown:
            progress(done - shown)
            shown = done

    try:
        pending = list(range(len(plan)))
        idle = list(range(workers))
        hints: dict[int, int] = {}  # worker -> the part it was told comes next
        while pending or running or helping:
            starting = []
            while pending and idle:  # every idle worker's part first, then their hints
                w = idle.pop(0)
                k, told = hints.pop(w, None), set(hints.values())
                if k not in pending:  # the first part no other worker was told of; in the tail, the first left
                    k = next((p for p in pending if p not in told), pending[0])
                pending.remove(k)
                starting.append((w, k))
            for w, k in starting:
                told = set(hints.values())
                hint = next((p for p in pending if p not in told), None) if fork else None
                if hint is not None:
                    hints[w] = hint
                running[k] = (pool.submit((k, hint, False), affinity=w), w)
            while tail is not None and not pending and idle:  # the tail: a free worker helps a running part
                k = tail.pick(list(running), {part for _, part in helping.values()})
                if k is None:
                    break
                w = idle.pop(0)
                helping[w] = (pool.submit((k, None, True), affinity=w), k)
            for k in unreported:
                report(outcomes[k])
            unreported.clear()
            pool.wait_any([task for task, _ in (*running.values(), *helping.values())], _POLL_SECONDS)
            for w, (task, _) in list(helping.items()):
                if pool.done(task):
                    del helping[w]
                    idle.append(w)
                    with contextlib.suppress(BrokenProcessPool):  # a row killed the helper twice: its writer fails it
                        pool.result(task)
            for k, (task, w) in list(running.items()):
                if not pool.done(task):
                    continue
                del running[k]
                idle.append(w)
                try:
                    outcomes[k] = pool.result(task)
                except BrokenProcessPool as e:  # its worker died twice while writing it
                    code = re.search(r"exit code -?\d+", str(e))
                    why = f"the worker processes writing it died twice ({code.group(0) if code else e})"
                    outcomes[k] = PartOutcome(plan[k].index, plan[k].name, "failed", message=why)
                unreported.append(k)
                if tail is not None:
                    tail.end(k)  # its helper stops (a part that failed early would keep it converting)
            show()
        for k in unreported:
            report(outcomes[k])
    finally:
        pool.close()  # idle workers exit, busy ones (only on an error here) are killed
        if scratch is not None:
            scratch.close()
    return [outcomes[k] for k in range(len(plan))]
