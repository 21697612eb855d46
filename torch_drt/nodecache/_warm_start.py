"""Downloads a process starts for reads of other processes of the node: the first batches' shards, fetched by a
loader's own process while its loading processes start (their start-up, imports and store clients, is no longer
ahead of the first request). The processes find the files in the node cache, downloaded or downloading (they wait
for that download, as for any process's of the node).

No fork happens while one of these downloads is in flight: a fork of the process (a loading process restarted,
the next epoch's processes, the user's) first stops them from starting more files and waits for the ones in flight
(each is bounded by the store's time-outs; the wait by ``FORK_WAIT_S``); the files left are fetched by the
processes that read them.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch_drt.nodecache import _node_files  # noqa: F401  its fork hook first: see the end of this module

if TYPE_CHECKING:
    from torch_drt.nodecache.prefetch import Fetchable

logger = logging.getLogger("torch_drt.cache")

FORK_WAIT_S = 120.0  # the longest a fork waits for the downloads in flight
_lock = threading.Lock()
_queue: collections.deque[Fetchable] = collections.deque()
_threads: list[threading.Thread] = []


def fetch_now(files: Sequence[Fetchable], threads: int) -> None:
    """Start downloading ``files`` into their node cache, in this order, on up to ``threads`` threads of this
    process; only the ones that fit under the node cache's limit now (a prefetch). Failures are left to the reads
    that need the files (they surface their own errors)."""
    if not files:
        return
    with _lock:
        _queue.extend(files)
        _threads[:] = [t for t in _threads if t.is_alive()]
        for _ in range(min(threads, len(files)) - len(_threads)):
            thread = threading.Thread(target=_work, name="torch_drt-first-shards", daemon=True)
            thread.start()
            _threads.append(thread)


def running() -> bool:
    """True while a download started here is queued or in flight."""
    with _lock:
        return bool(_queue) or any(t.is_alive() for t in _threads)


def _work() -> None:
    while True:
        with _lock:
            if not _queue:
                _threads.remove(threading.current_thread())
                return
            file = _queue.popleft()
        try:
            file.fetch(optional=True)
        except Exception as e:  # a read that needs the file surfaces the error itself
            logger.info("fetching %s for the first batches failed: %s", file.key, e)


def _before_fork() -> None:
    """No new file starts; the downloads in flight end before the fork (at most ``FORK_WAIT_S``)."""
    with _lock:
        _queue.clear()
        live = list(_threads)
    deadline = time.monotonic() + FORK_WAIT_S
    for thread in live:
        thread.join(max(0.0, deadline - time.monotonic()))


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _queue.clear()
    _threads.clear()  # the parent's threads are not the child's


# Hooks run before a fork in the reverse order of their registration: this one (registered after _node_files's,
# imported above) waits for the downloads before _node_files's takes its guard, which their lock files need.
os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
