"""The inside of a worker process of ``ProcessPool``: receive tasks, run them, send results whole, in order.

One thread does everything. A result is written whole before the next task starts, so a worker that dies loses
no finished result; while the result pipe is full the worker keeps reading the tasks that arrive, so the pool
never blocks sending a task while this worker waits to send a result (no deadlock, whatever their sizes). Once its
function and initializer are in place it reports its start: a reply without a task id (the pool's start deadline).

A worker watches its parent, as torch's loader workers do: when the process that started it is gone (killed, or
ended by ``os._exit`` without closing its pool) the worker exits within ``PARENT_CHECK_S``. It cannot rely on an
end of file on its task pipe: forked siblings inherit the pipe's sending end and hold it open.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import traceback
from collections import deque
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

PARENT_CHECK_S = 1.0  # how often a waiting worker looks whether its parent is still there


class _ParentGone(OSError):
    """The process that started this worker is gone."""


def portable(error: BaseException) -> BaseException:
    """The error as it can travel to the consumer: itself with the worker's traceback as a note, or a copy."""
    text = "".join(traceback.format_exception(error))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error} (in a worker process)\n{text}")
    error.add_note(f"in a worker process:\n{text}")
    return error


def _message(reply: tuple) -> bytes:
    """``reply`` framed as ``Connection.recv_bytes`` reads it (a result that does not pickle becomes an error)."""
    try:
        body = bytes(ForkingPickler.dumps(reply))
    except Exception as e:
        error = portable(TypeError(f"the batch cannot be sent from the worker: {e}"))
        body = bytes(ForkingPickler.dumps((reply[0], False, error, False)))
    n = len(body)
    return (struct.pack("!i", n) if n < 0x7FFFFFFF else struct.pack("!iQ", -1, n)) + body


def _write(results: Connection, tasks: Connection, data: bytes, inbox: deque, parent: int) -> None:
    """Write ``data`` whole; while the pipe is full, take the tasks that arrive into ``inbox``.

    Raises:
        OSError: the pool is gone (``_ParentGone`` when its process is).
    """
    out, view = results.fileno(), memoryview(data)
    while view:
        try:
            view = view[os.write(out, view) :]
        except BlockingIOError:
            readable, writable, _ = select.select([tasks.fileno()], [out], [], PARENT_CHECK_S)
            if readable:
                inbox.append(_receive(tasks, parent))
            elif not writable and os.getppid() != parent:
                raise _ParentGone from None


def _receive(tasks: Connection, parent: int) -> Any:
    """The next task, or None once the pool is gone (its pipe closed, or its process)."""
    try:
        while not tasks.poll(PARENT_CHECK_S):
            if os.getppid() != parent:
                return None
        return tasks.recv()
    except (EOFError, OSError):
        return None


def worker_main(
    payload: Any,
    index: int,
    tasks: Connection,
    results: Connection,
    ring: tuple | None,
    threads: int | None,
    parent: int | None = None,
) -> None:
    # the pool's process, as it gave its pid (a parent that died before this line would read as init's); None: the
    # fork server's (forkserver), which ends with the pool's process
    parent = os.getppid() if parent is None else parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if threads is not None:  # 1 as torch's loader workers: a forked OpenMP pool would hang, and workers share CPUs
        import torch  # only then: a spawned worker that does not need torch starts seconds sooner without it

        torch.set_num_threads(threads)
    fn, initializer = payload if isinstance(payload, tuple) else pickle.loads(payload)  # a tuple: forked
    failed: BaseException | None = None
    if initializer is not None:
        try:
            initializer(index)
        except BaseException as e:  # every task of this worker reports it
            failed = portable(e)
    writer = None
    if ring is not None:
        from torch_drt._processes.transport import RingWriter  # imports torch

        writer = RingWriter(*ring)
    os.set_blocking(results.fileno(), False)
    inbox: deque = deque()
    reply: tuple[Any, bool, Any, bool] | None  # (None between tasks: the batch is not held)
    try:
        _write(results, tasks, _message((None, True, None, False)), inbox, parent)  # it started (no task id)
    except OSError:  # the pool is gone
        return
    while (msg := inbox.popleft() if inbox else _receive(tasks, parent)) is not None:
        task_id, item, slot = msg
        try:
            if failed is not None:
                raise failed
            value = fn(item)
            value, packed = (value, False) if writer is None else writer.pack(value, slot)
            reply = (task_id, True, value, packed)
        except BaseException as e:
            reply = (task_id, False, e if e is failed else portable(e), False)
        msg = item = value = None
        try:
            _write(results, tasks, _message(reply), inbox, parent)
        except OSError:  # the pool is gone
            return
        reply = None
