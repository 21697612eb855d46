"""The node cache: verified copies of remote files on a node's disk, shared by its processes, and the prefetcher
that fills it ahead of the reads (used by ``torch_drt.locations.remote``)."""

from __future__ import annotations

from torch_drt.nodecache.node_cache import NodeCache
from torch_drt.nodecache.prefetch import ShardPrefetcher

__all__ = ["NodeCache", "ShardPrefetcher"]
