"""A least-recently-used cache of shard numbers, for the tests that count what a read order downloads."""

from __future__ import annotations

import collections


class LruShards:
    """Holds at most ``capacity`` shards; ``read(g)`` is True when shard ``g`` had to be fetched."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: collections.OrderedDict[int, None] = collections.OrderedDict()

    def read(self, g: int) -> bool:
        if g in self._held:
            self._held.move_to_end(g)
            return False
        self._held[g] = None
        if len(self._held) > self.capacity:
            self._held.popitem(last=False)
        return True
