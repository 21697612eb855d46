"""VerifiedRecords: which records of an opened cache this process has checked, for ``record_checks="first_read"``.

A record's XXH3-64 is compared with its index entry the first time this process reads it from the cache's mapped
shards; later reads of the same record from the same mappings skip the hash. One bit per record, private to the
process (a forked child starts with its parent's bits: it shares the parent's mappings). Reader threads marking at
once can lose a bit (that record is hashed again on its next read), never set one that was not verified.
"""

from __future__ import annotations

import numpy as np

RECORD_CHECKS = ("every_read", "first_read")  # CacheReader's and ReaderConfig's record_checks
_BIT = np.array([1, 2, 4, 8, 16, 32, 64, 128], dtype=np.uint8)  # record i's bit in its byte: _BIT[i & 7]
_NONE, _FIRST = np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64)  # shared answers: read-only
_NONE.flags.writeable = _FIRST.flags.writeable = False


class VerifiedRecords:
    """A bit per record of one cache: set once the record passed its checksum through this process's mappings.

    Args:
        count: the cache's records.
    """

    def __init__(self, count: int) -> None:
        self._bits = np.zeros((count + 7) >> 3, dtype=np.uint8)

    def unchecked(self, sample_ids: np.ndarray) -> np.ndarray:
        """The positions in ``sample_ids`` (valid ids of the cache) of records not verified yet, in order."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        if ids.size == 1:  # one record (get_item): integer arithmetic costs less than the array operations
            i = int(ids.flat[0])
            return _NONE if int(self._bits[i >> 3]) >> (i & 7) & 1 else _FIRST
        seen = self._bits[ids >> 3] & _BIT[ids & 7]
        return _NONE if seen.all() else np.flatnonzero(seen == 0)  # the later passes: all verified

    def mark(self, sample_ids: np.ndarray) -> None:
        """Record that ``sample_ids`` passed their checksums."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        np.bitwise_or.at(self._bits, ids >> 3, _BIT[ids & 7])

    def forget(self) -> None:
        """Verify every record again from now on (its files were opened anew)."""
        self._bits[:] = 0

    def __repr__(self) -> str:
        return f"VerifiedRecords({int(np.unpackbits(self._bits).sum())} verified)"
