"""Writing sources in spawned child processes, each start and each source under ``process_timeout_seconds``.

Each child is started once and writes one source after another (sent pickled; the payloads stay in the child).
The parent waits on the children's result pipes. A child that does not start, or a source that does not finish
(its unpickling included), within the deadline, or a child that dies, stops every child: the sources not
finished then are ``CacheWriteError``s and nothing is retried, as in dataset-rt. A source that raises
``KeyboardInterrupt`` or ``SystemExit`` stops every child too, and the parent re-raises it, as dataset-rt does.
A stopped child's staging directory is removed (its lock died with it), so the next write of that name starts
clean.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from torch_drt.cache.config import WriterConfig
from torch_drt.cache.records import CacheWriteError, CacheWriteResult
from torch_drt.cache.writer import WriteMode, write_source
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.publish import publish_lock, remove_stale_staging

_READY = "ready"
_STOP_GRACE_S = 2.0
_POLL_S = 1.0  # how often a wait looks at the children's liveness


def _child(conn: Connection, root: Path | str, config: WriterConfig, mode: WriteMode, where: dict[str, Any]) -> None:
    """A child: report ready, then write each ``(index, name, position, pickled source)`` it gets until ``b""``.

    ``where``: the ``storage_options`` and ``remote_config`` of a URL root.
    """
    conn.send(_READY)
    while (message := conn.recv_bytes()) != b"":
        index, name, position, payload = pickle.loads(message)
        try:
            source = pickle.loads(payload)
        except Exception as e:
            result: CacheWriteResult = CacheWriteError(name, f"source unpickling failed: {e!r}")
        else:
            try:
                result = write_source(source, root, config, mode=mode, position=position, **where)
            except (KeyboardInterrupt, SystemExit) as e:  # the parent re-raises it
                result = _portable(e)
        conn.send((index, result))


def _portable(error: KeyboardInterrupt | SystemExit) -> BaseException:
    """``error`` if it pickles, else an exception of its base type with its message."""
    try:
        return pickle.loads(pickle.dumps(error))
    except Exception:
        return (KeyboardInterrupt if isinstance(error, KeyboardInterrupt) else SystemExit)(str(error))


@dataclass
class _Child:
    process: Any
    conn: Connection
    deadline: float
    job: tuple[int, str] | None = None  # (index, name) of the source it writes
    ready: bool = False


def _dispatch(child: _Child, index: int, source: Any, timeout: float) -> CacheWriteError | None:
    name = str(getattr(source, "name", index))
    try:
        payload = pickle.dumps(source)
    except Exception as e:
        return CacheWriteError(name, f"source pickling failed (sources must pickle with num_processes > 0): {e!r}")
    child.conn.send_bytes(pickle.dumps((index, name, index, payload)))
    child.job, child.deadline = (index, name), time.monotonic() + timeout
    return None


def _stop(children: list[_Child], root: Path | str) -> None:
    for child in children:
        if child.process.is_alive() and child.job is None and child.ready:
            child.conn.send_bytes(b"")
    for child in children:
        child.process.join(_STOP_GRACE_S if child.job is None else 0)
        if child.process.is_alive():
            child.process.kill()
            child.process.join()
        child.conn.close()
        if child.job is not None and isinstance(root, Path):  # its staging directory's lock died with it (a URL's
            # claim is taken over after RemoteConfig.stale_writer_after)
            with publish_lock(root, child.job[1]):
                remove_stale_staging(root, child.job[1])


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
    where = {"storage_options": None if storage_options is None else dict(storage_options),
             "remote_config": remote_config}
    context = multiprocessing.get_context("spawn")
    timeout = config.process_timeout_seconds
    results: dict[int, CacheWriteResult] = {}
    todo = list(range(len(sources)))
    children: list[_Child] = []
    failure = ""
    try:
        for _ in range(min(config.num_processes, len(sources))):
            parent, child_end = context.Pipe()
            process = context.Process(target=_child, args=(child_end, root, config, mode, where), daemon=True)
            process.start()
            child_end.close()
            children.append(_Child(process, parent, time.monotonic() + timeout))
        while len(results) < len(sources) and not failure:
            for child in children:
                while child.ready and child.job is None and todo:
                    index = todo.pop(0)
                    error = _dispatch(child, index, sources[index], timeout)
                    if error is not None:
                        results[index] = error
            if len(results) == len(sources):
                break
            next_deadline = min(c.deadline for c in children) - time.monotonic()
            wait([c.conn for c in children], timeout=min(max(0.0, next_deadline), _POLL_S))
            failure = _collect(children, results, timeout)
    finally:
        _stop(children, root)
    message = failure or "writer pool stopped"
    return [results.get(i, CacheWriteError(str(getattr(s, "name", i)), message)) for i, s in enumerate(sources)]


def _collect(children: list[_Child], results: dict[int, CacheWriteResult], timeout: float) -> str:
    """Take the children's messages; return why the pool must stop ("" to go on)."""
    for child in children:
        try:
            while child.conn.poll():
                message = child.conn.recv()
                if message == _READY:
                    child.ready, child.deadline = True, float("inf")
                else:
                    index, result = message
                    child.job, child.deadline = None, float("inf")
                    if isinstance(result, BaseException):  # a source's KeyboardInterrupt or SystemExit
                        raise result
                    results[index] = result
        except (EOFError, OSError):  # a child that died; is_alive below says so
            pass
        if child.job is None and child.ready:
            continue
        if not child.process.is_alive():
            return f"writer process exited with code {child.process.exitcode}"
        if time.monotonic() >= child.deadline:
            what = "its start" if not child.ready else "a source"
            return f"writer process timeout exceeded ({timeout:g} s for {what})"
    return ""
