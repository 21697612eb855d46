"""Records the durability calls a writer makes, in order: ``("synced", (st_dev, st_ino))`` after each real
``os.fsync``, ``("renamed", name)`` after each ``os.rename`` and ``("linked", name)`` after each ``os.link``
(``name``: the target's base name)."""

from __future__ import annotations

import os
from typing import Any


def record_sync_events(monkeypatch: Any) -> list[tuple[str, object]]:
    """Patch ``os.fsync``, ``os.rename`` and ``os.link`` to record into the list returned (they still run)."""
    events: list[tuple[str, object]] = []
    real_fsync, real_rename, real_link = os.fsync, os.rename, os.link

    def fsync(fd: int) -> None:
        real_fsync(fd)
        st = os.fstat(fd)
        events.append(("synced", (st.st_dev, st.st_ino)))

    def rename(src, dst, *args, **kwargs) -> None:
        real_rename(src, dst, *args, **kwargs)
        events.append(("renamed", os.path.basename(dst)))

    def link(src, dst, *args, **kwargs) -> None:
        real_link(src, dst, *args, **kwargs)
        events.append(("linked", os.path.basename(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "link", link)
    return events
