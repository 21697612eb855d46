"""Downloads a process starts for reads of other processes of the node: the first batches' shards, requested by a
loader's own process before it forks its loading processes (their fork and start-up, imports and store clients,
are no longer ahead of the first request). The processes find the files in the node cache, downloaded or
downloading (they wait for that download, as for any process's of the node).

The first batch's files go first: the others (the next processes' first batches) are taken by the threads as they
come free, but their requests wait until every file of the first batch ended (its download's ``requested`` call
holds them back), so that the first batch does not share the network with them; a file held back so is locked and
reserved in the node cache, so the loading processes wait for it rather than download it again.

A fork of the process (the loading processes, a restarted one, the user's) waits for the files queued here to be
requested (each download's ``requested`` call: its request is about to go out), at most ``FORK_WAIT_S``, so that
the first requests are under way while the children start; the downloads go on in this process after the fork.
A child starts without them: it drops its copies of their lock files' descriptors (``_node_files``), makes its
own store client (``torch_drt._inherited_clients``) and waits for the files as for any other process's downloads.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch_drt import _inherited_clients  # noqa: F401  its fork hook first: see the end of this module
from torch_drt.nodecache import _node_files  # noqa: F401  (the same)

if TYPE_CHECKING:
    from torch_drt.nodecache.prefetch import Fetchable

logger = logging.getLogger("torch_drt.cache")

FORK_WAIT_S = 0.05  # the longest a fork waits for the files queued here to be requested
_cond = threading.Condition()
_queue: collections.deque[tuple[Fetchable, bool]] = collections.deque()  # (file, of a first batch)
_asking = 0  # files taken from the queue whose request has not gone out yet (nor was held back)
_busy = 0  # files taken from the queue whose fetch has not ended
_first = 0  # files of a first batch queued or in flight: the other files' requests wait until none is left
_sending = 0  # downloads whose request went out and that have not ended
_limit = 1  # the downloads in flight at once (``fetch_now``'s ``threads``)
_threads: list[threading.Thread] = []


def fetch_now(files: Sequence[Fetchable], threads: int, first: int | None = None) -> None:
    """Start downloading ``files`` into their node cache, in this order, on up to ``threads`` threads of this
    process at once; only the ones that fit under the node cache's limit now (a prefetch). The requests of the
    files after the first ``first`` (None: all of them) wait until those ended; each has a thread of its own
    (up to ``threads`` more), which holds it meanwhile. Failures are left to the reads that need the files (they
    surface their own errors)."""
    global _first, _limit
    if not files:
        return
    n = len(files) if first is None else max(0, min(first, len(files)))
    with _cond:
        _queue.extend((file, i < n) for i, file in enumerate(files))
        _first += n
        _limit = threads
        held = sum(1 for _, leading in _queue if not leading)
        starting = [threading.Thread(target=_work, name="torch_drt-first-shards", daemon=True)
                    for _ in range(min(threads + min(held, threads), len(_queue)) - len(_threads))]
        _threads.extend(starting)
    _start(starting)


def _start(threads: list[threading.Thread]) -> None:
    """Start ``threads`` (counted in ``_threads`` already), not under the lock: ``Thread.start`` waits for the new
    thread, where a garbage collection may run first, and a finalizer run there that takes the lock would wait for
    ever. The ones that cannot start are forgotten (the error is the caller's)."""
    for n, thread in enumerate(threads):
        try:
            thread.start()
        except BaseException:
            with _cond:
                _threads[:] = [t for t in _threads if t not in threads[n:]]
                _cond.notify_all()
            raise


def running() -> bool:
    """True while a download started here is queued or in flight."""
    with _cond:
        return bool(_queue) or any(t.is_alive() for t in _threads)


def wait_taken(timeout: float) -> bool:
    """Wait until the files queued here were requested (or found local, or failed) as far as the threads can take
    them now (more files than threads wait for a thread), at most ``timeout`` seconds; True when they were."""
    deadline = time.monotonic() + timeout
    with _cond:
        while _asking or (_queue and _busy < len(_threads)):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _cond.wait(left)
    return True


def _work() -> None:
    """A download thread: counted in ``_threads`` from before it starts (``fetch_now``) until it leaves here (not
    ``is_alive()``: a thread starting has its ident before it is alive), under the lock that finds the queue dry."""
    me = threading.current_thread()
    try:
        _download_queued(me)
    finally:
        with _cond:  # (an error outside a fetch: it counts no more)
            _uncount(me)


def _uncount(thread: threading.Thread) -> None:
    """(Under the lock.) ``thread`` counts no more (one that ``_start`` forgot already: nothing to do)."""
    if thread in _threads:
        _threads.remove(thread)
        _cond.notify_all()


def _download_queued(me: threading.Thread) -> None:
    while True:
        with _cond:
            if not _queue:
                _uncount(me)
                return
            file, leading = _queue.popleft()
            _take()
        asked, sent = [False], [False]
        try:
            file.fetch(optional=True, requested=functools.partial(_requested, asked, sent, leading))
        except Exception as e:  # a read that needs the file surfaces the error itself
            logger.info("fetching %s for the first batches failed: %s", file.key, e)
        finally:
            with _cond:
                _asked(asked)  # (found local, waited for another process's download, failed)
                _ended(sent, leading)


def _ended(sent: list[bool], leading: bool) -> None:
    """(Under the lock.) A file's fetch ended: it is busy no more, nor in flight, nor a first batch's."""
    global _busy, _first, _sending
    _busy -= 1
    _sending -= sent[0]
    _first -= leading
    _cond.notify_all()


def _take() -> None:
    """(Under the lock.) A file was taken from the queue: it counts as asking and busy."""
    global _asking, _busy
    _asking += 1
    _busy += 1


def _asked(asked: list[bool]) -> None:
    """(Under the lock.) The file's request went out, was held back, or is not needed: it asks no more (once)."""
    global _asking
    if not asked[0]:
        asked[0] = True
        _asking -= 1
        _cond.notify_all()


def _requested(asked: list[bool], sent: list[bool], leading: bool) -> None:
    """A download's ``requested`` call: its request goes out once fewer than ``_limit`` are in flight and, unless
    it is a first batch's, every file of a first batch ended (a fork does not wait for it: it counts as asked)."""
    global _sending
    with _cond:
        _asked(asked)
        if sent[0]:  # (called again: it is in flight already)
            return
        while (not leading and _first) or _sending >= _limit:
            _cond.wait()
        _sending += 1
        sent[0] = True


def _before_fork() -> None:
    """The files queued here are requested before the fork (at most ``FORK_WAIT_S``)."""
    wait_taken(FORK_WAIT_S)


def _after_fork_in_child() -> None:
    global _cond, _asking, _busy, _first, _sending
    _cond = threading.Condition()
    _queue.clear()
    _threads.clear()  # the parent's threads are not the child's
    _asking = _busy = _first = _sending = 0


# Hooks run before a fork in the reverse order of their registration: this one (registered after _node_files's and
# _inherited_clients's, imported above) waits for the requests before _node_files's takes its guard, which their
# lock files need, and before _inherited_clients's takes the lock clients are made under, which they may need.
os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
