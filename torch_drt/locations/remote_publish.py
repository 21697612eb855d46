"""Publishing a directory (a cache, a token stream) at a URL: claim the name, upload the data, manifest last.

Object stores have no rename, so a cache is published by the order of its uploads: every data file first (with
bounded parallelism, each retried by the project's policy), then the manifest, written only if no manifest is
there (a conditional put where the store has one). Readers open nothing without a manifest, so a writer killed
at any step leaves either nothing that opens or a complete cache.

Two writers of one name are kept apart by a claim object (``<url>/.writer``, see ``_publish_claim``): created
only when absent (a conditional put; on stores without them, written and read back after ``claim_settle``
seconds, the later writer winning), renewed by a heartbeat while the upload runs, and deleted once the manifest
is written. The first writer to claim uploads; the other is told the name is busy. A claim whose heartbeat is
older than ``stale_after`` belongs to a dead or stalled writer: the next writer takes it over (a write
conditional on the stale version), removes every file left under the name (a cache without its manifest) and
publishes. Writers are fenced: each data file is created only where none is (on stores with conditional writes),
a writer whose lease ran out renews it (conditionally: only while the claim is still its own) before its next
write, and the claim is renewed just before and just after the manifest is written; a stalled writer that lost
its claim stops with ``StaleWriterError`` and takes back a manifest it wrote meanwhile, so it never overwrites its
successor's objects nor publishes over them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torch_drt.locations._conditional import put_if, remove_if
from torch_drt.locations._publish_claim import CLAIM_FILE, Claim, StaleWriterError
from torch_drt.locations.remote_store import RemoteStore

logger = logging.getLogger("torch_drt.cache")


def _reached(url: str, step: str) -> None:
    """Log each step of a publish (``claimed``, ``cleaned``, ``uploaded``, ``published``, ``released``)."""
    logger.debug("publishing %s: %s", url, step)


def _upload_all(store: RemoteStore, local: Path, files: Sequence[str], parallel: int, claim: Claim) -> None:
    from torch_drt._progress import Progress

    sizes = {rel: (local / rel).stat().st_size for rel in files}

    def upload(rel: str) -> None:
        claim.fence(store.join(rel))
        if not store.upload(local / rel, rel, create=True):
            raise StaleWriterError(f"{store.join(rel)}: another writer wrote this file while this one uploaded")
        bar.add(sizes[rel])

    with Progress("upload", store.url, total=sum(sizes.values()), unit="B") as bar, \
            ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="torch_drt-upload") as pool:
        for future in [pool.submit(upload, rel) for rel in files]:
            future.result()


def _put_manifest(store: RemoteStore, manifest: str, data: bytes, claim: Claim) -> None:
    """Write the manifest only where none is, the claim renewed just before and just after: a writer that lost it
    meanwhile takes its manifest back (its own only: a conditional delete) and fails."""
    what = store.join(manifest)
    claim.fence(what, renew=True)
    version = put_if(store, manifest, data, None)
    if version is None:
        raise FileExistsError(f"a cache is already published at {store.url}")
    if not claim.renew():
        remove_if(store, manifest, version)
        claim.fence(what)  # raises StaleWriterError


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
        StaleWriterError: when this writer stalled past ``stale_after`` and another one took the name over (it
            stops before its next write; nothing of it is published).
        OSError: when an upload fails after its retries (the claim is released; the next writer cleans up).
    """
    config = store.config
    stale_after = config.stale_writer_after if stale_after is None else stale_after
    if store.read_or_none(manifest, 1) is not None:
        raise FileExistsError(f"a cache is already published at {store.url}")
    claim = Claim(store, stale_after)
    claim.take(config.claim_settle)
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
                    config.upload_concurrency, claim)
        _reached(store.url, "uploaded")
        _put_manifest(store, manifest, (local / manifest).read_bytes(), claim)
        _reached(store.url, "published")
    finally:
        claim.release()
        _reached(store.url, "released")
