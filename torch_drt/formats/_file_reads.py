"""Reads of an opened foreign-dataset file (a ``StoredFile``): byte ranges checked against its size, samples by a
shard's offset table, a file object for pyarrow and ``tarfile``, and a file held whole in memory."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torch_drt.cache.errors import FormatError
from torch_drt.locations import StoredFile


class MemoryFile(StoredFile):
    """A file read whole (and verified, or decompressed) into memory, read like any opened file."""

    def __init__(self, where: Path | str, data: bytes) -> None:
        super().__init__(where, len(data))
        self.data = data

    def gather(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        return [self.data[a:b] for a, b in zip(starts, ends)]

    def view(self) -> memoryview:
        return memoryview(self.data)

    def check(self) -> None:
        """Nothing to check: the bytes are this process's own."""


class RangeReader(io.RawIOBase):
    """A read-only, seekable file object over a ``StoredFile`` (for pyarrow and ``tarfile``): reads of at least
    ``block`` bytes, the last one kept, so that small sequential reads cost one range request per block.

    Args:
        file: the opened file.
        block: bytes fetched per request at least.
    """

    def __init__(self, file: StoredFile, block: int = 1 << 20) -> None:
        super().__init__()
        self.file, self.block, self.pos = file, block, 0
        self._buf, self._buf_at = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.file.size}[whence]
        if base + offset < 0:
            raise OSError(f"seek to {base + offset} before the start of {self.file.where}")
        self.pos = base + offset
        return self.pos

    def readinto(self, out) -> int:
        data = self.read(len(out))
        out[: len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        size = self.file.size
        end = size if n is None or n < 0 else min(size, self.pos + n)
        if end <= self.pos:
            return b""
        a, b = self._buf_at, self._buf_at + len(self._buf)
        if not (a <= self.pos and end <= b):
            view = self.file.view()
            if view is not None:
                self._buf, self._buf_at = bytes(view[self.pos : end]), self.pos
            else:
                fetch_end = min(size, max(end, self.pos + self.block))
                self._buf, self._buf_at = self.file.gather([self.pos], [fetch_end])[0], self.pos
                if len(self._buf) < end - self.pos:
                    raise FormatError(self.file.where, f"file ends before byte {end}")
        data = self._buf[self.pos - self._buf_at : end - self._buf_at]
        self.pos += len(data)
        return bytes(data)


def gather_one(file: StoredFile, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of ``file``; a range outside it is a ``FormatError``."""
    if not 0 <= start <= end <= file.size:
        raise FormatError(file.where, f"byte range [{start}, {end}) lies outside the file's {file.size} bytes")
    file.check()
    return bytes(file.gather([start], [end])[0])


def gather_samples(file: StoredFile, offsets: np.ndarray, indices: Sequence[int]) -> list[bytes]:
    """The bytes of samples ``indices`` of a shard whose checked ``offset_table`` is ``offsets``, in one gather
    (one coalesced request for a remote file not in the node cache yet)."""
    for i in indices:
        if not 0 <= i < len(offsets) - 1:
            raise FormatError(file.where, f"sample {i} is not in the shard's {len(offsets) - 1}")
    file.check()
    got = file.gather([int(offsets[i]) for i in indices], [int(offsets[i + 1]) for i in indices])
    return [bytes(d) for d in got]


def offset_table(file: StoredFile, samples: int) -> np.ndarray:
    """The ``samples + 1`` offsets of a shard that starts ``[count: u32][offsets: (count + 1) * u32]`` (MDS shards,
    LitData chunks), checked against the count the index records and the file's size."""
    head = 4 * (samples + 2)
    if file.size < head:
        raise FormatError(file.where, f"file of {file.size} bytes is shorter than the header of {samples} samples")
    raw = gather_one(file, 0, head)
    count = int.from_bytes(raw[:4], "little")
    if count != samples:
        raise FormatError(file.where, f"the shard holds {count} samples, the index records {samples}")
    offsets = np.frombuffer(raw, np.uint32, samples + 1, 4).astype(np.int64)
    if offsets[0] < head or np.any(np.diff(offsets) < 0) or offsets[-1] > file.size:
        raise FormatError(file.where, "sample offsets are out of order or outside the file")
    return offsets
