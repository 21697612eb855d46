"""RangeReader: a seekable file object over an opened stored file, for pyarrow and ``tarfile``."""

from __future__ import annotations

import io

from torch_drt.cache.errors import FormatError
from torch_drt.locations import StoredFile


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
