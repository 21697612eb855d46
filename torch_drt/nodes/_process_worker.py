"""The inside of a worker process of ``ProcessPool``: receive tasks, run them, send results whole, in order.

A reader thread takes tasks as they come, so the pool never blocks sending one while the worker is sending a
result; a result is sent whole before the next task starts, so a worker that dies loses no finished result.
"""

from __future__ import annotations

import pickle
import queue
import signal
import threading
import traceback
from multiprocessing.connection import Connection

import torch

from torch_drt.nodes.transport import RingWriter

__all__ = ["portable", "worker_main"]


def portable(error: BaseException) -> BaseException:
    """The error as it can travel to the consumer: itself with the worker's traceback as a note, or a copy."""
    text = "".join(traceback.format_exception(error))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error} (in a worker process)\n{text}")
    error.add_note(f"in a worker process:\n{text}")
    return error


def _receive_all(tasks: Connection, inbox: queue.SimpleQueue) -> None:
    """Read tasks as they come, so the consumer never blocks sending one (the worker may be sending a result)."""
    while True:
        try:
            msg = tasks.recv()
        except (EOFError, OSError):
            msg = None
        inbox.put(msg)
        if msg is None:
            return


def _send(results: Connection, msg: tuple) -> None:
    try:
        results.send(msg)
    except (BrokenPipeError, EOFError, OSError):
        raise
    except Exception as e:  # the batch does not pickle
        results.send((msg[0], False, portable(TypeError(f"the batch cannot be sent from the worker: {e}")), False))


def worker_main(payload: bytes, index: int, tasks: Connection, results: Connection, ring: tuple | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)  # as torch's loader workers: a forked OpenMP pool would hang, and workers share CPUs
    fn, initializer = pickle.loads(payload)
    failed: BaseException | None = None
    if initializer is not None:
        try:
            initializer(index)
        except BaseException as e:  # every task of this worker reports it
            failed = portable(e)
    writer = None if ring is None else RingWriter(*ring)
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_receive_all, args=(tasks, inbox), daemon=True).start()
    while (msg := inbox.get()) is not None:
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
            _send(results, reply)  # sent whole before the next task starts: a death loses no finished result
        except (BrokenPipeError, EOFError, OSError):
            return
        reply = None
