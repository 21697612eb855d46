"""File and record checksums shared by every on-disk store: SHA-256 for files, xxHash3 for fast checks.

SHA-256 is the strong, slow checksum recorded for every published file. XXH3 (64-bit per record, 128-bit per
file) is the cheap one verified on every open and every read: at more than 10 GB/s it costs little next to the
copy it checks. Neither is a defence against a forger who can also rewrite the manifest; both catch bit rot,
truncation, torn writes and files swapped between stores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import xxhash

__all__ = ["copied_checksums", "first_mismatch", "record_checksums", "sha256_file", "xxh3_128_hex"]

_HASH_CHUNK = 1 << 22
_HOT_BYTES = 1 << 20  # records copied and then hashed a part at a time stay in a core's L2 cache in between
# numpy declares ndarray's buffer protocol for Python >= 3.12 only: xxhash hashes arrays on 3.11 too
_record_hash: Callable[[bytes | memoryview | np.ndarray], int] = xxhash.xxh3_64_intdigest  # type: ignore[assignment]


def sha256_file(path: Path) -> str:
    """Return the hex SHA-256 of a file, read in 4 MiB chunks (hashlib releases the GIL)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def xxh3_128_hex(data: bytes | memoryview) -> str:
    """Return the hex XXH3-128 of an in-memory buffer (the cheap whole-file check)."""
    return xxhash.xxh3_128_hexdigest(data)


def record_checksums(records: Iterable[bytes | memoryview | np.ndarray], count: int) -> np.ndarray:
    """Return the XXH3-64 of each of ``count`` records as a uint64 array (one C call per record)."""
    return np.fromiter(map(_record_hash, records), dtype=np.uint64, count=count)


def first_mismatch(records: Sequence[bytes | memoryview | np.ndarray], checksums: np.ndarray) -> int:
    """The position of the first of ``records`` whose XXH3-64 differs from ``checksums`` (uint64, one per record),
    or -1 when every record matches.

    One C call per record and one comparison of two lists: no array is built per call, which matters for the small
    gathers of per-sample reads (a few microseconds of NumPy calls per gather cost more than hashing 64 records of
    a few KiB).
    """
    return _first_difference(list(map(_record_hash, records)), checksums)


def copied_checksums(
    part: Callable[[int, int], list[bytes]], count: int, nbytes: int, checksums: np.ndarray
) -> tuple[list[bytes], int]:
    """Copy ``count`` records of ``nbytes`` in all, about 1 MiB at a time, hashing each part right after its copy.

    ``part(i, j)`` returns copies of records ``i`` to ``j - 1``. Each part is hashed while it is still in the CPU's
    cache: a whole batch hashed after it is copied (4 MiB for 1,024 records of 4 KiB) is read back from memory,
    which made the check cost about twice the hash itself. The bytes hashed are the copies returned.

    Returns:
        The copies, and the position of the first whose XXH3-64 differs from ``checksums`` (uint64, one per
        record; -1 when every record matches).
    """
    step = max(1, count * _HOT_BYTES // max(nbytes, 1))
    if step >= count:
        data = part(0, count)
        return data, first_mismatch(data, checksums)
    data = []
    got: list[int] = []
    for i in range(0, count, step):
        copies = part(i, i + step)
        got += map(_record_hash, copies)
        data += copies
    return data, _first_difference(got, checksums)


def _first_difference(got: list[int], checksums: np.ndarray) -> int:
    want = checksums.tolist()
    if got == want:
        return -1
    return next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
