"""Telling a caller when its request to the store is sent, not just asked for (an S3 client's ``before-send``).

A download's ``requested`` callback lets a fork go on once the first batches' requests are out
(``torch_drt.nodecache._warm_start``). Called as the download asks the store client, it came too soon: an fsspec
async client builds and signs each request on its event loop's thread, and a fork holds the GIL while the process
is copied. Asked for before the fork, the last requests of a start went out after it, and after the next fork
(3 of 8 shards some 70 ms late at 2 loading processes, moto behind a proxy). With an S3 client (s3fs on
aiobotocore) the callback is called from the client's ``before-send`` event instead: the request is signed and
handed to its HTTP session (called once the request's task waits next: its request written, or its connection
opening). The callback travels to the event loop in a context variable (fsspec runs a call's
coroutine in a copy of the calling thread's context). Other clients, and an S3 client not made yet: at once, as
before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from typing import Any

_SENT: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("torch_drt_sent", default=None)
_HOOKED: weakref.WeakSet[Any] = weakref.WeakSet()  # the S3 clients whose before-send event calls _before_send
_EVENT = "before-send.s3"


def _before_send(**kwargs: Any) -> None:
    """Call the request's callback once its task next waits (its request written, or its connection opening): a
    callback that let a fork go on now would stop the event loop (the GIL) before the request is written."""
    callback = _SENT.get()
    if callback is not None:
        asyncio.get_running_loop().call_soon(callback)


def _hooked(fs: Any) -> bool:
    """True when the requests of ``fs`` report being sent: its S3 client exists (s3fs makes it on first use, and
    again after some failures) and its ``before-send`` event is hooked now."""
    client = getattr(fs, "_s3", None)
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None:
        return False
    if client not in _HOOKED:
        events.register(_EVENT, _before_send, unique_id="torch_drt-request-sent")
        _HOOKED.add(client)
    return True


@contextlib.contextmanager
def announced(fs: Any, callback: Callable[[], None] | None) -> Iterator[None]:
    """Around this thread's requests to ``fs``: ``callback()`` as each one is sent (it must be idempotent and
    thread-safe: it runs on the client's event loop), or once now where that cannot be told."""
    if callback is None or not _hooked(fs):
        if callback is not None:
            callback()
        yield
        return
    token = _SENT.set(callback)
    try:
        yield
    finally:
        _SENT.reset(token)
