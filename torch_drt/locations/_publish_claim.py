"""A writer's claim on a name at a URL (``<url>/.writer``): taken, renewed, checked before every write, released.

The claim is a lease. Every change to it is a conditional write on the version this writer last saw
(``_conditional``): taking it only while it is missing, or while it is the stale claim that was read; renewing it
only while it is still this writer's own. On S3 the store enforces these conditions, so once another writer has
taken the name over, no renewal of the old writer can succeed. A writer counts its lease from the moment before
its last successful renewal (a monotonic clock, which runs on while the process is stopped); ``fence`` refuses to
write once ``stale_after`` has passed without one, unless a renewal (conditional, so only while the claim is
still its own) succeeds first. A stalled writer that resumes thus fails with ``StaleWriterError`` before its next
write instead of overwriting its successor's objects.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid

from torch_drt.locations._conditional import put_if, read_versioned, remove_if
from torch_drt.locations.remote_store import RemoteStore

logger = logging.getLogger("torch_drt.cache")

CLAIM_FILE = ".writer"


class NameBusyError(FileExistsError):
    """Another live writer is publishing at this URL."""


class StaleWriterError(NameBusyError):
    """This writer lost its claim (it stalled past ``stale_writer_after`` and another writer took the name over):
    it stopped before writing anything more."""


class Claim:
    """This writer's claim on a name.

    Args:
        store: the URL being published.
        stale_after: seconds without a renewal after which a claim counts as abandoned.
    """

    def __init__(self, store: RemoteStore, stale_after: float) -> None:
        self.store = store
        self.stale_after = stale_after
        self.writer = uuid.uuid4().hex
        self.version: str | None = None  # the claim's version on the store, as this writer last wrote it
        self.confirmed = 0.0  # time.monotonic() before the last write of the claim that succeeded
        self.lost = False
        self._lock = threading.Lock()  # one renewal at a time (the heartbeat and the uploads)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({"writer": self.writer, "host": socket.gethostname(), "pid": os.getpid(),
                           "time": time.time()}).encode()

    def _current(self) -> tuple[dict, str] | None:
        found = read_versioned(self.store, CLAIM_FILE)
        if found is None:
            return None
        try:
            body = json.loads(found[0])
        except ValueError:
            body = {}  # unreadable: a claim of unknown age (stale)
        return (body if isinstance(body, dict) else {}), found[1]

    def _write(self, expected: str | None, settle: float) -> bool:
        """Write this writer's claim over ``expected`` (None: only where none is); on stores without conditional
        writes, read it back after ``settle`` seconds (the later writer wins)."""
        started = time.monotonic()
        version = put_if(self.store, CLAIM_FILE, self._body(), expected)
        if version is None:
            return False
        if not self.store.conditional:
            time.sleep(settle)
            current = self._current()
            if current is None or current[1] != version:
                return False
        self.version, self.confirmed = version, started
        return True

    def take(self, settle: float) -> bool:
        """Claim the name; True when a stale claim (a dead or stalled writer's) was taken over.

        Raises:
            NameBusyError: when a live writer holds the name.
        """
        for _ in range(3):
            if self._write(None, settle):
                return False
            current = self._current()
            if current is None:
                continue  # released meanwhile
            body, version = current
            age = time.time() - float(body.get("time", 0) or 0)
            if age <= self.stale_after:
                raise NameBusyError(
                    f"{self.store.url}: another writer (host {body.get('host')!r}, pid {body.get('pid')}) "
                    f"is publishing this cache (its claim {CLAIM_FILE} was refreshed {age:.0f}s ago)"
                )
            logger.warning("%s: taking over the stale claim of a writer last seen %.0fs ago", self.store.url, age)
            if self._write(version, settle):
                return True
        raise NameBusyError(f"{self.store.url}: another writer claimed this cache at the same time")

    def renew(self) -> bool:
        """Rewrite the claim while it is still this writer's; False (and lost for good) when it is not."""
        with self._lock:
            if not self.lost and not self._write(self.version, 0.0):
                self.lost = True
            return not self.lost

    def fence(self, what: str, *, renew: bool = False) -> None:
        """Check the lease before writing ``what``: renewed within ``stale_after`` (or now, with ``renew``), else
        renewed now.

        Raises:
            StaleWriterError: when another writer has taken the name over.
        """
        expired = self.lost or time.monotonic() - self.confirmed >= self.stale_after
        if (renew or expired) and not self.renew():
            raise StaleWriterError(
                f"{self.store.url}: this writer's claim was taken over by another writer (it stalled for more than "
                f"stale_writer_after={self.stale_after}s); it stopped at {what} and publishes nothing"
            )

    def beat(self, every: float) -> None:
        """Renew the claim every ``every`` seconds until ``release`` (or until it is lost)."""

        def run() -> None:
            while not self._stop.wait(every):
                try:
                    if not self.renew():
                        return
                except OSError as e:  # a missed beat is no failure; the next one may pass
                    logger.info("%s: claim heartbeat failed: %s", self.store.url, e)

        self._thread = threading.Thread(target=run, name="torch_drt-publish-claim", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and delete the claim while it is still this writer's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if not self.lost and self.version is not None:
                remove_if(self.store, CLAIM_FILE, self.version)
        except OSError as e:  # left behind: the next writer finds it stale
            logger.info("%s: could not remove the claim: %s", self.store.url, e)
