"""ShardPrefetcher: download the shards the next reads need, in the order they will be read, within bounds.

A loader knows its future (its order is a pure function of seed, epoch and position), so it hands the prefetcher
the shards of its next batches, in order (``update``); the prefetcher keeps at most ``concurrency`` downloads in
flight and never looks further ahead than ``bytes_ahead`` bytes of shards (counting those already local or
downloading). The shards coming within the bytes ahead are marked recently used, and those that left the plan
demoted, so the node cache evicts shards no planned read needs (those already read) before the ones the next
batches read; the window holds no lock on them (it must not hold the node cache over its limit), so a shard evicted
before its read is fetched again. A read that finds its shard missing asks for it first (``demand``). One
prefetcher serves every remote cache of a process; the node cache makes the processes of a node share the
downloads.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

logger = logging.getLogger("torch_drt.cache")

_SHARED: dict[tuple[int, int, int], ShardPrefetcher] = {}
_SHARED_LOCK = threading.Lock()


def _after_fork() -> None:
    """A lock held by a thread of the parent would never be released in the child; the parent's holds are its own
    (the child closes its copies of their descriptors: the parent's locks stay with the parent's)."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    for prefetcher in list(_SHARED.values()):
        for held in list(prefetcher._held.values()):
            with contextlib.suppress(OSError):
                held.close()
    _SHARED.clear()


os.register_at_fork(after_in_child=_after_fork)


class Fetchable(Protocol):
    """A file the prefetcher can download: a unique ``key``, its ``size``, ``present()``, a blocking
    ``fetch(optional, requested)`` (``optional``: nobody waits for it, so False when the node cache has no room for
    it now; ``requested()``, when given, is called as its download's request is about to go out),
    ``touch()`` (marks it recently used, so that the node cache evicts it last), ``demote()`` (no planned read wants
    it: the node cache evicts it first) and ``hold()`` (a mark that the file is local, whose ``close()`` releases
    whatever it holds; None when the file is not local)."""

    key: str
    size: int

    def present(self) -> bool: ...

    def fetch(self, optional: bool = False, requested: Callable[[], None] | None = None) -> bool: ...

    def touch(self) -> None: ...

    def demote(self) -> None: ...

    def hold(self) -> Any: ...


class ShardPrefetcher:
    """Background downloads of future shards: ``concurrency`` threads, ``bytes_ahead`` bytes of lookahead.

    Args:
        concurrency: downloads in flight at once (threads, started on first use).
        bytes_ahead: the plan is followed only as far as its shards' sizes add up to this (the first one always).
    """

    def __init__(self, concurrency: int, bytes_ahead: int) -> None:
        if concurrency < 1 or bytes_ahead < 1:
            raise ValueError(f"{concurrency=} and {bytes_ahead=} must be > 0")
        self.concurrency, self.bytes_ahead = concurrency, bytes_ahead
        self._cond = threading.Condition()
        self._plan: list[Fetchable] = []
        self._first: list[Fetchable] = []  # after a start or a resume: the files the first read needs
        self._holding = False  # after a start or a resume: the rest of the plan waits for the next plan
        self._urgent: collections.deque[tuple[Fetchable, bool]] = collections.deque()
        self._running: set[str] = set()
        self._failed: set[str] = set()  # failed in this plan (tried again in the next one)
        self._deferred: set[str] = set()  # not fetched for want of room under the node cache's limit (this plan)
        self._planned: dict[str, Fetchable] = {}
        self._held: dict[str, Any] = {}
        self._bound = bytes_ahead  # the bytes ahead of the current plan (``update``)
        self._window: set[str] = set()  # the plan's files within the bytes ahead at the last update (touched)
        self._looked: set[str] = set()  # a running plan's files found not local when they came into view
        self._threads: list[threading.Thread] = []
        self.fetched = 0  # downloads this prefetcher ran to completion (for tests and benchmarks)

    def __repr__(self) -> str:
        shown = f"concurrency={self.concurrency}, bytes_ahead={self.bytes_ahead}, fetched={self.fetched}"
        return f"ShardPrefetcher({shown})"

    @classmethod
    def shared(cls, concurrency: int, bytes_ahead: int) -> ShardPrefetcher:
        """The one prefetcher of this process for these bounds."""
        key = (os.getpid(), concurrency, bytes_ahead)
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = cls(concurrency, bytes_ahead)
            return _SHARED[key]

    def update(self, upcoming: Sequence[Fetchable], first: int = 0, bytes_ahead: int | None = None,
               hold: bool = False) -> None:
        """Replace the plan: the files the next reads need, in the order they will be read (repeats are fine).

        Files that came within the bytes ahead are marked recently used, latest-needed first, and files that left
        the plan from its front (read, and not needed again within it) are demoted, so that downloads for the plan
        evict what no planned read needs before what the plan needs last (not after a start or a resume: a new
        plan says nothing about what was read). Only the files within the bytes ahead are marked: the plan may
        reach epochs ahead (a loading process's plan holds every shard of its next batches), and a file needed
        epochs from now is not recently used; marked so it would be kept over the shards read just now, which the
        next epoch (walking the shards backward) reads first.

        Args:
            upcoming: the files, in read order.
            first: after a start or a resume, how many of the plan's first (distinct) files the next read needs:
                only they download until they are all local (the first batch does not share the network with the
                whole lookahead), then the whole plan. 0 in a running pipeline.
            bytes_ahead: this plan's bound (None: the prefetcher's ``bytes_ahead``), e.g. a node cache's quarter
                split among a loader's loading processes (``RemoteConfig.bytes_ahead``).
            hold: with ``first``, the rest of the plan waits for the next plan, not just for the first read's
                files (a loading process: its next plan comes as soon as its first batch is out, and until then
                the first batch shares neither the network nor the CPU with the lookahead). Not for a loader's
                own process, whose next plan waits for the training step.
        """
        planned: dict[str, Fetchable] = {}
        plan = [planned.setdefault(f.key, f) for f in upcoming if f.key not in planned]
        read = []  # a running loader's plan: held files that left it were read (a start says nothing of it)
        if not first:  # (held: read from the front of the plan, not just dropped by another loader's plan)
            read = [self._planned[k] for k in self._planned.keys() - planned.keys() if k in self._held]
        self._planned = planned
        with self._cond:
            same = [f.key for f in plan] == [f.key for f in self._plan]
            if not first and same and not self._first and not self._holding:
                return  # the same plan (a warm pipeline between shard boundaries): nothing to hold or wake
            self._plan, self._first, self._holding = plan, plan[:first], bool(first) and hold
            self._bound = self.bytes_ahead if bytes_ahead is None else max(1, bytes_ahead)
            if first:
                self._looked.clear()  # a start or a resume: every file is looked at again
            self._deferred.clear()  # reads moved on: files they read may be evicted now
            self._failed.clear()  # and failed downloads are tried again (a read that needs one surfaces its error)
            self._hold_ahead()
            starting = []
            if self._due():
                starting = self._threads_to_start()
                self._cond.notify_all()
            window = self._ahead_of_plan()
            came = [f for f in window if f.key not in self._window]
            self._window = {f.key for f in window}
        _start(starting)
        for file in reversed(came):  # the next reads' files: evicted after the files read before them
            file.touch()
        for file in read:  # after this process let go of them: a file another one holds stays wanted
            file.demote()

    def _ahead(self) -> list[Fetchable]:
        """The plan's files within ``bytes_ahead`` (the first one always); after a start or a resume only the first
        read's, until they are local (``hold``: until the next plan)."""
        if self._holding:
            return self._first
        return self._first or self._ahead_of_plan()

    def _ahead_of_plan(self) -> list[Fetchable]:
        """The plan's files within ``bytes_ahead`` (the first one always)."""
        out: list[Fetchable] = []
        ahead = 0
        for file in self._plan:
            ahead += file.size
            if ahead > self._bound and out:
                break
            out.append(file)
        return out

    def _due(self) -> bool:
        """Whether a file within the bytes ahead may need downloading (under the lock; held files are local)."""
        return any(f.key not in self._held and f.key not in self._running and f.key not in self._failed
                   and f.key not in self._deferred for f in self._ahead())

    def _hold_ahead(self) -> None:
        """Hold the local files within the bytes ahead, release the others (under the lock); once the first read's
        files are all local (or failed), none is awaited (the rest of the plan waits for the next plan). A running
        plan looks at a file once when it comes into view (a cold epoch's window is hundreds of files, and a plan
        comes every batch): one found not local is held when this prefetcher fetched it (``_hold_fetched``) or
        found it fetched by another process (``_next``)."""
        wanted = {f.key: f for f in [*self._first, *self._ahead_of_plan()]}
        for key in [k for k in self._held if k not in wanted]:
            self._held.pop(key).close()
        looked = self._looked
        looked.intersection_update(wanted)
        for key, file in wanted.items():
            if key in self._held or (key in looked and not self._first):
                continue
            if (held := file.hold()) is not None:
                self._held[key] = held
            else:
                looked.add(key)
        if self._first and all(f.key in self._held or f.key in self._failed for f in self._first):
            self._first = []

    def _hold_fetched(self, file: Fetchable) -> None:
        """After ``file`` was fetched (under the lock): hold it when the bytes ahead want it. Only while the first
        read's files come is every wanted file looked at again (one of them may have come from another process);
        a running plan's other files are looked at by the next ``update`` and by ``_next``, so that a download's
        end costs no look at every file of a long plan."""
        if self._first:
            self._hold_ahead()
            return
        if file.key not in self._held and any(f.key == file.key for f in self._ahead_of_plan()):
            held = file.hold()
            if held is not None:
                self._held[file.key] = held

    def demand(self, file: Fetchable, waited: bool = True) -> None:
        """Fetch ``file`` before anything planned (a read needs it now: it waits for it, or, not ``waited``, is
        served by byte ranges meanwhile and the file downloads only if the node cache has room); a no-op when it
        is being fetched."""
        with self._cond:
            if file.key in self._running or file.key in self._failed:
                return
            self._urgent.append((file, waited))
            starting = self._threads_to_start()
            self._cond.notify()
        _start(starting)

    def pending(self, key: str) -> bool:
        """True while ``key`` is being downloaded by this process or waits to be (``demand``)."""
        with self._cond:
            return key in self._running or any(f.key == key for f, _ in self._urgent)

    def busy(self, key: str) -> bool:
        """True while ``key`` is being downloaded by this process."""
        with self._cond:
            return key in self._running

    def _threads_to_start(self) -> list[threading.Thread]:
        """The download threads still missing (under the lock; counted from now on): the caller starts them once
        it released the lock (``_start``)."""
        new = []
        while len(self._threads) < self.concurrency:
            new.append(threading.Thread(target=self._work, name="torch_drt-prefetch", daemon=True))
            self._threads.append(new[-1])
        return new

    def _next(self) -> tuple[Fetchable, bool] | None:
        """The next file to download and whether a read waits for it (under the lock), or None when nothing is
        due."""
        while self._urgent:
            file, waited = self._urgent.popleft()
            if file.key not in self._running and not file.present():
                return file, waited
        for file in self._ahead():
            key = file.key
            if key in self._running or key in self._held or key in self._failed or key in self._deferred:
                continue  # (a held file was local when held: one evicted since is fetched when a read demands it)
            if file.present():
                if (held := file.hold()) is not None:
                    self._held[key] = held  # fetched by another process: due no more
                continue
            return file, False
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                task = self._next()
                while task is None:
                    self._cond.wait()
                    task = self._next()
                file, waited = task
                self._running.add(file.key)
            try:
                fetched = file.fetch(optional=not waited)
            except Exception as e:  # a read that needs the file surfaces the error itself
                logger.info("prefetching %s failed: %s", file.key, e)
                with self._cond:
                    self._failed.add(file.key)
            else:
                with self._cond:
                    if not fetched:  # no room under the node cache's limit now: the next plan tries again
                        self._deferred.add(file.key)
                        continue
                    self.fetched += 1
                    self._hold_fetched(file)
            finally:
                with self._cond:
                    self._running.discard(file.key)
                    self._cond.notify_all()


def _start(threads: list[threading.Thread]) -> None:
    """Start ``threads`` (not under the prefetcher's lock: ``Thread.start`` waits for the new thread, where a
    garbage collection may run first, and a loader collected then withdraws its plan, which takes that lock)."""
    for thread in threads:
        thread.start()
