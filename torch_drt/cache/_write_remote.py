"""Writing a cache at a URL: the local writer stages it, ``publish_directory`` publishes it."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch_drt.cache._format import MANIFEST_FILE
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.validate import is_complete_cache
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.locations.remote_publish import publish_directory
from torch_drt.locations.remote_store import RemoteStore

logger = logging.getLogger("torch_drt.cache")


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
