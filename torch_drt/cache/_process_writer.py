"""Writing sources in spawned child processes of the one process pool (``torch_drt._processes``), as dataset-rt does.

The pool does not restart its workers and puts ``process_timeout_seconds`` on each child's start and on each source
(its unpickling included): a child that dies or passes a deadline stops every child, the sources not finished
then are ``CacheWriteError``s and nothing is retried. A source that raises ``KeyboardInterrupt`` or ``SystemExit``
stops every child too, and the parent re-raises it. Each source is pickled here (one that does not pickle is its
own ``CacheWriteError``) and sent to an idle child; the payloads stay in the child. A stopped child's staging
directory is removed (its lock died with it), so the next write of that name starts clean. A child imports neither
torch nor the pool's transport (which imports it): it starts seconds sooner.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch_drt._processes.pool import ProcessPool, Task
from torch_drt._processes.supervision import Supervision, WorkerExited, WorkerTimeout
from torch_drt.cache.config import WriterConfig
from torch_drt.cache.records import CacheWriteError, CacheWriteResult
from torch_drt.cache.writer import WriteMode, write_source
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.publish import publish_lock, remove_stale_staging

_WAIT_S = 60.0  # one wait of the parent (the pool wakes it for every result, death and deadline)


def _write_one(
    root: Path | str, config: WriterConfig, mode: WriteMode, where: dict[str, Any], job: tuple[int, str, bytes]
) -> CacheWriteResult:
    """In a child: write the source of ``job`` (its position, name and pickled source)."""
    position, name, payload = job
    try:
        source = pickle.loads(payload)
    except Exception as e:
        return CacheWriteError(name, f"source unpickling failed: {e!r}")
    return write_source(source, root, config, mode=mode, position=position, **where)


def _name(source: Any, index: int) -> str:
    return str(getattr(source, "name", index))


def _take(
    pool: ProcessPool, running: dict[int, Task], results: dict[int, CacheWriteResult], sources: list[Any]
) -> None:
    """Wait until a running source is done; move the results of those done from ``running`` to ``results``."""
    while not pool.wait_any(list(running.values()), _WAIT_S):
        pass
    for index in [i for i, task in running.items() if pool.done(task)]:
        task = running.pop(index)
        try:
            results[index] = pool.result(task)  # a source's KeyboardInterrupt or SystemExit raises here
        except Exception as e:  # a result that could not travel back
            results[index] = CacheWriteError(_name(sources[index], index), f"{type(e).__name__}: {e}")


def write_in_processes(
    sources: list[Any],
    root: Path | str,
    config: WriterConfig,
    mode: WriteMode,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> list[CacheWriteResult]:
    """Write ``sources`` in ``config.num_processes`` spawned children; one result per source, in input order.

    ``root`` may be a URL (with its ``storage_options`` and ``remote_config``): each child stages and uploads.
    """
    if not sources:
        return []
    where = {"storage_options": None if storage_options is None else dict(storage_options),
             "remote_config": remote_config}
    timeout = config.process_timeout_seconds
    children = min(config.num_processes, len(sources))
    results: dict[int, CacheWriteResult] = {}
    running: dict[int, Task] = {}  # by source index, at most one per child
    failure = "writer pool stopped"
    pool = ProcessPool(
        functools.partial(_write_one, root, config, mode, where),
        children,
        "spawn",
        supervision=Supervision(restart=False, start_timeout=timeout, task_timeout=timeout),
        torch_threads=None,  # a child sets no torch threads (and imports no torch)
    )
    try:
        for index, source in enumerate(sources):
            try:
                payload = pickle.dumps(source)
            except Exception as e:
                message = f"source pickling failed (sources must pickle with num_processes > 0): {e!r}"
                results[index] = CacheWriteError(_name(source, index), message)
                continue
            if len(running) == children:
                _take(pool, running, results, sources)
            running[index] = pool.submit((index, _name(source, index), payload))  # the least busy child: an idle one
        while running:
            _take(pool, running, results, sources)
    except WorkerExited as e:
        failure = f"writer process exited with code {e.exitcode}"
    except WorkerTimeout as e:
        failure = f"writer process timeout exceeded ({timeout:g} s for {'its start' if e.starting else 'a source'})"
    finally:
        pool.close(wait=True)  # idle children exit, busy ones are killed: gone on return, their locks released
        if isinstance(root, Path):  # a killed child's staging lock died with it (a URL's claim is taken over
            # after RemoteConfig.stale_writer_after)
            for index in running:
                with publish_lock(root, _name(sources[index], index)):
                    remove_stale_staging(root, _name(sources[index], index))
    return [results.get(i, CacheWriteError(_name(s, i), failure)) for i, s in enumerate(sources)]
