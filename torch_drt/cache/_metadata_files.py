"""MetadataFiles: whether each cache's ``metadata.arrow`` is still the file a dataset read when it was opened.

A dataset keeps its caches' metadata in memory, verified when it was opened. dataset-rt reads the files again
whenever a table is asked for (``get_metadata``, ``update_metadata``, ``to_torch_dataloader``), so damage done to
them after opening fails there; a dataset checks the same places. A local file whose identity (device, inode,
size, modification and change times) is unchanged is trusted without reading it; one that changed is read and
verified again against its manifest, so a file rewritten with the same bytes passes. Remote caches are read
through the node cache's verified copies: there is nothing on disk to watch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from torch_drt.cache._format import METADATA_FILE
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.validate import CacheLayout, read_metadata

_Stamp = tuple[int, int, int, int, int]


def _stamp(layout: CacheLayout) -> _Stamp | None:
    """The identity of the cache's local metadata file now; None for a remote cache.

    Raises:
        CacheCorruptError: naming the file, when it is gone.
    """
    backend = layout.backend
    where = backend.where(METADATA_FILE) if backend is not None else None
    if backend is None or not isinstance(where, Path) or not backend.stats_cheaply:
        return None
    try:
        st = os.stat(where)
    except OSError as e:
        raise CacheCorruptError(where, f"metadata file cannot be read since the dataset was opened: {e}") from None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class MetadataFiles:
    """The metadata files of a dataset's caches, as they were when it was opened.

    Args:
        layouts: the caches, whose metadata was just read and verified.
    """

    def __init__(self, layouts: Sequence[CacheLayout]) -> None:
        self.layouts = tuple(layouts)
        self._stamps = [_stamp(layout) for layout in self.layouts]

    def check(self) -> None:
        """Verify again each file that changed on disk.

        Raises:
            CacheCorruptError: naming the first file that is gone or no longer the one its manifest records.
        """
        for i, layout in enumerate(self.layouts):
            if self._stamps[i] is None or (now := _stamp(layout)) == self._stamps[i]:
                continue
            read_metadata(layout)  # raises naming the file
            self._stamps[i] = now
