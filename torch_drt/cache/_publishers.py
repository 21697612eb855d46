"""Where a written cache goes: one publisher per kind of location, one interface for the writer.

The writer asks a publisher three things, whatever the location: is a usable cache already published under the
name (``existing``), where to write a new one (``staging``, a fresh private directory), and to make it visible
in one step (``publish``). A local root stages beside its target and publishes by atomic rename under a lock; a
URL root stages in a private temporary directory (``RemoteConfig.staging_dir``) and publishes through
``locations.remote_publish`` (the manifest last, under the writer's claim on the name).
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from torch_drt._scratch import ScratchDir
from torch_drt.cache._format import MANIFEST_FILE
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.validate import is_complete_cache
from torch_drt.locations.location import Location
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.locations.remote_publish import publish_directory
from torch_drt.locations.remote_store import RemoteStore
from torch_drt.publish import StagingDir, move_aside, publish_lock, remove_stale_staging

logger = logging.getLogger("torch_drt.cache")

WriteMode = Literal["create", "reuse"]


class Publisher(ABC):
    """Publishes the cache of one source name at one root.

    Args:
        name: the cache's name (the source's name, already validated).
        verify: whether a cache found already published is verified in full before it is reused.
    """

    def __init__(self, name: str, verify: bool) -> None:
        self.name, self.verify = name, verify

    @property
    @abstractmethod
    def where(self) -> str:
        """Where the cache is published, fit for a log line (a URL without credentials or query)."""

    @property
    @abstractmethod
    def syncs_staging(self) -> bool:
        """Whether the files written into ``staging`` are synced before ``publish`` (when ``WriterConfig.durable``):
        True where the staged directory itself becomes the cache, False where it is only a copy to upload."""

    @abstractmethod
    def existing(self, mode: WriteMode) -> CacheWriteResult | None:
        """The result when nothing needs writing (``mode="reuse"`` and a complete cache is there) or may be written
        (an error); None to go on and write."""

    @abstractmethod
    def staging(self) -> contextlib.AbstractContextManager[Path]:
        """A fresh private directory to write the cache into, removed on exit unless it was published."""

    @abstractmethod
    def publish(
        self, staged: Path, mode: WriteMode, sync_root: bool = True, *, durable: bool = True
    ) -> CacheWriteResult:
        """Make the cache written in ``staged`` visible under the name in one step (durable on return unless
        ``sync_root`` or ``durable`` is False: see ``StagingDir.publish``). ``durable``: the writer synced every
        file and directory of ``staged``, ``staged`` itself included (``writer._finish``)."""


class LocalPublisher(Publisher):
    """A local root: staged beside the target (same file system), published by rename under ``publish_lock``."""

    def __init__(self, root: Path, name: str, verify: bool) -> None:
        super().__init__(name, verify)
        self.root = root
        self._staging_dir: StagingDir | None = None

    @property
    def where(self) -> str:
        return str(self.root / self.name)

    @property
    def syncs_staging(self) -> bool:
        return True  # the staging directory is renamed into place: its files are the cache

    def existing(self, mode: WriteMode) -> CacheWriteResult | None:
        if mode != "reuse" or not is_complete_cache(self.root / self.name, verify=self.verify):
            return None
        with publish_lock(self.root, self.name):
            remove_stale_staging(self.root, self.name)
        logger.info("reused the cache of source %r at %s", self.name, self.root / self.name)
        return CacheWriteSuccess(self.name, self.root / self.name)

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        with StagingDir(self.root, self.name) as staging:
            self._staging_dir = staging
            try:
                yield staging.path
            finally:
                self._staging_dir = None

    def publish(
        self, staged: Path, mode: WriteMode, sync_root: bool = True, *, durable: bool = True
    ) -> CacheWriteResult:
        staging = self._staging_dir
        if staging is None or staging.path != staged:
            raise ValueError(f"{staged=} is not this publisher's open staging directory")
        root, name, target = self.root, self.name, staging.target
        with publish_lock(root, name):
            remove_stale_staging(root, name)
            if target.exists() or target.is_symlink():
                if mode == "create":
                    staging.discard()
                    return CacheWriteError(name, f"cache path already exists: {target}")
                if is_complete_cache(target, verify=self.verify):
                    staging.discard()  # another writer published it first
                    return CacheWriteSuccess(name, target)
                move_aside(target)
            staging.publish(sync_root, durable=durable, synced=True)  # durable: synced by the writer
        return CacheWriteSuccess(name, target)


class RemotePublisher(Publisher):
    """A URL root: staged in a private temporary directory, uploaded by ``publish_directory`` (manifest last)."""

    def __init__(self, root: Location, name: str, verify: bool) -> None:
        super().__init__(name, verify)
        self.remote = root.remote_config or RemoteConfig()
        self.options = root.storage_options
        self.target = root.join(name)
        self.store = RemoteStore(self.target.url, self.options, self.remote)

    @property
    def where(self) -> str:
        return self.target.redacted()

    @property
    def syncs_staging(self) -> bool:
        return False  # a private copy, removed after the upload: the object store holds the durable cache

    def _complete(self, verify: bool) -> bool:
        return is_complete_cache(self.store.url, verify=verify, storage_options=self.options,
                                 remote_config=self.remote)

    def existing(self, mode: WriteMode) -> CacheWriteResult | None:
        if self.store.read_or_none(MANIFEST_FILE, 1) is None:
            return None
        if mode == "create":
            return CacheWriteError(self.name, f"cache already exists: {self.store.url}")
        if self._complete(self.verify):
            logger.info("reused the cache of source %r at %s", self.name, self.store.url)
            return CacheWriteSuccess(self.name, self.store.url)
        return CacheWriteError(self.name, f"a cache is published at {self.store.url} but does not open; remove it "
                                          "to rebuild")

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        with ScratchDir("torch_drt-publish-", self.remote.staging_dir) as tmp:  # a killed writer's: see ScratchDir
            (tmp.path / self.name).mkdir()
            yield tmp.path / self.name

    def publish(
        self, staged: Path, mode: WriteMode, sync_root: bool = True, *, durable: bool = True
    ) -> CacheWriteResult:
        try:  # the local staging copy is never synced (``syncs_staging``): the upload is what publishes
            publish_directory(staged, self.store, MANIFEST_FILE)
        except FileExistsError as e:
            if mode == "reuse" and self._complete(False):
                logger.info("reused the cache of source %r at %s (another writer published it first)", self.name,
                            self.store.url)
                return CacheWriteSuccess(self.name, self.store.url)
            return CacheWriteError(self.name, str(e))
        return CacheWriteSuccess(self.name, self.store.url)


def publisher_for(root: Location, name: str, verify: bool) -> Publisher:
    """The publisher of the cache ``name`` under ``root`` (local or remote, decided by the location once)."""
    if root.is_remote:
        return RemotePublisher(root, name, verify)
    return LocalPublisher(root.path, name, verify)
