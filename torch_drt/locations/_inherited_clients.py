"""Store clients a forked child inherits from its parent stay alive, unused, for the child's whole life.

An fsspec async client (s3fs, gcsfs, adlfs, http) runs on an event loop whose epoll instance a forked child shares
with its parent. When the child drops its copy of the parent's client (``RemoteStore`` makes a new one per
process, and fsspec clears its instance cache in a new process), the client's finalizer closes the pooled
connections, which unregisters the parent's sockets from that shared epoll: the parent's next request on such a
socket then waits for its time-out, and the child prints "attached to a different loop" tracebacks. Keeping the
inherited clients referenced means their finalizers never run in the child (a loading worker ends with
``os._exit``, which runs none). ``client_lock()`` is the lock a process makes its clients under (a new one in
each child, so that a lock the parent held at the fork does not block it).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from typing import Any

_MADE: weakref.WeakSet[Any] = weakref.WeakSet()  # the clients this process made (RemoteStore.fs)
_INHERITED: list[Any] = []  # in a forked child: the parent's clients, never dropped
_LOCK = threading.Lock()


def client_lock() -> threading.Lock:
    """The lock this process makes its store clients under (one client per store and process)."""
    return _LOCK


def made(client: Any) -> Any:
    """Record a client this process made (returned unchanged)."""
    with contextlib.suppress(TypeError):  # not weak-referenceable: fsspec's instance cache keeps it anyway
        _MADE.add(client)
    return client


def _async_classes() -> list[type]:
    """The fsspec async filesystem classes imported so far (each keeps an instance cache)."""
    asyn = sys.modules.get("fsspec.asyn")
    if asyn is None:
        return []
    out, todo = [], [asyn.AsyncFileSystem]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()
    _INHERITED.extend(_MADE)
    for cls in _async_classes():
        _INHERITED.extend(getattr(cls, "_cache", {}).values())


os.register_at_fork(after_in_child=_after_fork_in_child)
