"""Publishing a directory (a cache, a token stream) at a URL: claim the name, upload the data, manifest last.

Object stores have no rename, so a cache is published by the order of its uploads: every data file first (with
bounded parallelism, each retried by the project's policy), then the manifest, written only if no manifest is
there (a conditional put where the store has one). Readers open nothing without a manifest, so a writer killed
at any step leaves either nothing that opens or a complete cache.

Two writers of one name are kept apart by a claim object (``<url>/.writer``): created only when absent (a
conditional put; on stores without them, written and read back after ``claim_settle`` seconds, the later writer
winning), refreshed by a heartbeat while the upload runs, and deleted once the manifest is written. The first
writer to claim uploads; the other is told the name is busy. A claim whose heartbeat is older than
``stale_after`` belongs to a dead writer: the next writer removes it and every file left under the name (a
cache without its manifest), then claims the name itself. Each writer checks its claim is still its own before
it writes the manifest.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_drt.cache._format import MANIFEST_FILE
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.remote_config import RemoteConfig
from torch_drt.cache.remote_store import RemoteStore
from torch_drt.cache.validate import is_complete_cache

__all__ = ["CLAIM_FILE", "NameBusyError", "publish_directory", "write_remote"]

logger = logging.getLogger("torch_drt.cache")

CLAIM_FILE = ".writer"
_CLAIM_LIMIT = 1 << 16


class NameBusyError(FileExistsError):
    """Another live writer is publishing at this URL."""


def _reached(url: str, step: str) -> None:
    """Log each step of a publish (``claimed``, ``cleaned``, ``uploaded``, ``published``, ``released``)."""
    logger.debug("publishing %s: %s", url, step)


class _Claim:
    """This writer's claim on a name: taken, kept fresh by a heartbeat, checked, released."""

    def __init__(self, store: RemoteStore) -> None:
        self.store = store
        self.writer = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({"writer": self.writer, "host": socket.gethostname(), "pid": os.getpid(),
                           "time": time.time()}).encode()

    def _current(self) -> dict | None:
        raw = self.store.read_or_none(CLAIM_FILE, _CLAIM_LIMIT)
        if raw is None:
            return None
        try:
            body = json.loads(raw)
            return body if isinstance(body, dict) else {}
        except ValueError:
            return {}  # unreadable: treated as a claim of unknown age (stale)

    def mine(self) -> bool:
        """True when the claim on the store is this writer's."""
        current = self._current()
        return current is not None and current.get("writer") == self.writer

    def take(self, stale_after: float, settle: float) -> bool:
        """Claim the name; True when a stale claim (a dead writer's) was removed first.

        Raises:
            NameBusyError: when a live writer holds the name.
        """
        stole = False
        for _ in range(3):
            if self.store.put_new(CLAIM_FILE, self._body()):
                if stole or not self.store.conditional:  # check-then-put, or a race on a stale claim: re-read
                    time.sleep(settle)
                    if not self.mine():
                        break
                return stole
            current = self._current()
            if current is None:
                continue  # released meanwhile
            age = time.time() - float(current.get("time", 0) or 0)
            if age <= stale_after:
                raise NameBusyError(
                    f"{self.store.url}: another writer (host {current.get('host')!r}, pid {current.get('pid')}) "
                    f"is publishing this cache (its claim {CLAIM_FILE} was refreshed {age:.0f}s ago)"
                )
            logger.warning("%s: removing the stale claim of a writer last seen %.0fs ago", self.store.url, age)
            self.store.remove([CLAIM_FILE])
            stole = True
        raise NameBusyError(f"{self.store.url}: another writer claimed this cache at the same time")

    def beat(self, every: float) -> None:
        """Refresh the claim every ``every`` seconds until ``release``."""

        def run() -> None:
            while not self._stop.wait(every):
                try:
                    if self.mine():
                        self.store.put(CLAIM_FILE, self._body())
                except OSError as e:  # a missed beat is no failure; the next one may pass
                    logger.info("%s: claim heartbeat failed: %s", self.store.url, e)

        self._thread = threading.Thread(target=run, name="torch_drt-publish-claim", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and delete the claim when it is still this writer's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.mine():
                self.store.remove([CLAIM_FILE])
        except OSError as e:  # left behind: the next writer finds it stale
            logger.info("%s: could not remove the claim: %s", self.store.url, e)


def _upload_all(store: RemoteStore, local: Path, files: Sequence[str], parallel: int) -> None:
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="torch_drt-upload") as pool:
        for future in [pool.submit(store.upload, local / rel, rel) for rel in files]:
            future.result()


def publish_directory(local: Path, store: RemoteStore, manifest: str, *, stale_after: float | None = None) -> None:
    """Upload every file under ``local`` to ``store``'s URL, ``manifest`` last and only if none is there.

    Args:
        local: the complete directory (its ``manifest`` included), e.g. a cache written to a staging root.
        store: the target URL.
        manifest: the manifest's path relative to ``local``; a reader opens nothing without it.
        stale_after: seconds after which another writer's claim is abandoned (default: the store config's).

    Raises:
        FileExistsError: when a manifest is already published at the URL (nothing is changed).
        NameBusyError: when another live writer is publishing there.
        OSError: when an upload fails after its retries (the claim is released; the next writer cleans up).
    """
    config = store.config
    stale_after = config.stale_writer_after if stale_after is None else stale_after
    if store.read_or_none(manifest, 1) is not None:
        raise FileExistsError(f"a cache is already published at {store.url}")
    claim = _Claim(store)
    claim.take(stale_after, config.claim_settle)
    _reached(store.url, "claimed")
    try:
        if stale_after > 0:
            claim.beat(max(0.05, stale_after / 4))
        left = [rel for rel in store.list() if rel != CLAIM_FILE]
        if manifest in left:
            raise FileExistsError(f"a cache is already published at {store.url}")
        if left:
            logger.warning("%s: removing %d files an interrupted writer left (no manifest)", store.url, len(left))
            store.remove(left)
        _reached(store.url, "cleaned")
        files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
        data = [rel for rel in files if rel != manifest]
        _upload_all(store, local, sorted(data, key=lambda rel: (not rel.startswith("shards/"), rel)),
                    config.upload_concurrency)
        _reached(store.url, "uploaded")
        if not claim.mine():
            raise NameBusyError(f"{store.url}: this writer's claim was taken over (stalled for {stale_after}s?)")
        if not store.put_new(manifest, (local / manifest).read_bytes()):
            raise FileExistsError(f"a cache is already published at {store.url}")
        _reached(store.url, "published")
    finally:
        claim.release()
        _reached(store.url, "released")


def write_remote(
    source: Any,
    name: str,
    root: str,
    stage: Callable[[Any, Path], CacheWriteResult],
    mode: str,
    verify: bool,
    remote: RemoteConfig,
    options: Mapping[str, Any] | None,
) -> CacheWriteResult:
    """Write ``source`` with ``stage(source, staging_root)`` (the local writer) under a local staging root, then
    publish it at ``root/name``; ``mode="reuse"`` accepts a cache already published there (by another writer too).

    Raises:
        Exception: what the upload raises after its retries (the caller reports it); nothing is published then.
    """
    store = RemoteStore(f"{root.rstrip('/')}/{name}", options, remote)
    check = {"storage_options": options, "remote_config": remote}
    if store.read_or_none(MANIFEST_FILE, 1) is not None:
        if mode == "create":
            return CacheWriteError(name, f"cache already exists: {store.url}")
        if is_complete_cache(store.url, verify=verify, **check):
            logger.info("reused the cache of source %r at %s", name, store.url)
            return CacheWriteSuccess(name, store.url)
        return CacheWriteError(name, f"a cache is published at {store.url} but does not open; remove it to rebuild")
    staging = Path(tempfile.mkdtemp(prefix="torch_drt-publish-", dir=remote.staging_dir))
    try:
        written = stage(source, staging)
        if isinstance(written, CacheWriteError):
            return written
        publish_directory(staging / name, store, MANIFEST_FILE)
    except FileExistsError as e:
        if mode == "reuse" and is_complete_cache(store.url, **check):
            logger.info("reused the cache of source %r at %s (another writer published it first)", name, store.url)
            return CacheWriteSuccess(name, store.url)
        return CacheWriteError(name, str(e))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return CacheWriteSuccess(name, store.url)
