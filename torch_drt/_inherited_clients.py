"""Network clients a forked child inherits from its parent stay alive, unused, for the child's whole life.

A client's pooled connections are sockets its parent keeps using, registered in an event loop's epoll instance
that a forked child shares with its parent. When the child drops its copy of such a client, the client's finalizer
closes the pooled connections: that unregisters the parent's sockets from the shared epoll (the parent's next
request on such a socket then waits for its time-out) and, on a TLS connection, may write a close_notify to a
socket that is the parent's. A child drops its copies when it makes its own clients (``RemoteStore`` and
``ObjectStoreDataset`` make one per process, and fsspec clears its instance cache in a new process;
``HttpDataset`` makes one aiohttp session per event loop, and a child runs its own loop), or when it lets go of a
dataset it inherited. Each of them records the clients it makes here (``made``); a forked child keeps the ones it
inherits referenced, with those of fsspec's instance cache, so their finalizers never run in the child (a loading
worker ends with ``os._exit``, which runs none), and it never uses them (each of its clients is its own).
``client_lock()`` is the lock a process makes its clients under. A fork waits for it (a client being made is made
before the fork): a thread making the process's first client imports its modules (``aiobotocore.session``...), and
a child forked in the middle of that import finds the module's import lock held by a thread it does not have, and
waits for ever when it makes its own client. The child takes a new lock.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from typing import Any

_MADE: weakref.WeakSet[Any] = weakref.WeakSet()  # the clients this process made (store clients, sessions)
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


def _before_fork() -> None:
    _LOCK.acquire()


def _after_fork_in_parent() -> None:
    _LOCK.release()


# Registered before the warm start's hook (``nodecache._warm_start`` imports this module first): hooks run before a
# fork in the reverse order, so the fork waits for the first shards' requests (which make clients) before this lock.
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
