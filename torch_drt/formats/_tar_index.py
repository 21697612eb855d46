"""The index of a WebDataset tar: its samples grouped as webdataset's ``group_by_keys`` groups them, built in one
pass over the headers (kept in the node cache for a remote tar: ``_tar_kept``), and each field's header checked
against it as the field is read.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Sequence

import numpy as np

from torch_drt.cache.errors import CacheCorruptError, FormatError
from torch_drt.formats._file_reads import RangeReader
from torch_drt.locations import StoredFile

_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_SKIP = re.compile(r"__[^/]*__($|/)")  # webdataset's skip_meta
_TAIL_LIMIT = 1 << 20  # bytes after the last header that may be read to check they are the end-of-archive zeros
HEADER = tarfile.BLOCKSIZE

# per sample its key and first field; per field its extension, start and end
TarIndex = tuple[list[str], np.ndarray, list[str], np.ndarray, np.ndarray]


def index_tar(file: StoredFile, block: int) -> TarIndex:
    """One pass over a tar's headers: samples grouped as webdataset's ``group_by_keys`` groups them."""
    keys: list[str] = []
    first: list[int] = []
    exts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    current: set[str] | None = None
    reader = RangeReader(file, block)
    try:
        tar = tarfile.open(fileobj=reader, mode="r:")  # noqa: SIM115 - read by hand below
        while True:
            member = tar.next()
            if member is None:
                break
            name = member.name
            if not member.isreg() or ("/" not in name and name.startswith("__") and name.endswith("__")):
                continue
            if _SKIP.match(name):
                continue
            m = _KEY_EXT.match(name)
            if not m:
                continue
            key, ext = m.group(1), m.group(2).lower()
            if member.offset_data + member.size > file.size:
                raise FormatError(file.where, f"member {name!r} of {member.size} bytes runs past the end of the file")
            if current is None or key != keys[-1]:
                keys.append(key)
                first.append(len(exts))
                current = set()
            if ext in current:
                raise FormatError(file.where, f"member {name!r}: extension {ext!r} twice in sample {key!r}")
            current.add(ext)
            exts.append(ext)
            starts.append(member.offset_data)
            ends.append(member.offset_data + member.size)
        stop = tar.offset
    except CacheCorruptError:
        raise
    except (tarfile.TarError, OSError, ValueError, UnicodeError, EOFError) as e:
        raise FormatError(file.where, f"not a readable uncompressed tar: {type(e).__name__}: {e}") from None
    _check_end(file, stop)
    first.append(len(exts))
    return (keys, np.asarray(first, np.int64), exts, np.asarray(starts, np.int64), np.asarray(ends, np.int64))


def _check_end(file: StoredFile, stop: int) -> None:
    """``tarfile`` ends quietly at a damaged or missing header: what follows the last member must be the archive's
    end (zero blocks), else the shard was cut or damaged."""
    rest = file.size - stop
    if rest < tarfile.BLOCKSIZE:
        raise FormatError(file.where, f"the file ends at byte {file.size} without the end-of-archive block (cut?)")
    if rest > _TAIL_LIMIT:
        raise FormatError(file.where, f"an invalid tar header at byte {stop} ({rest} bytes follow it)")
    file.check()
    tail = file.gather([stop], [file.size])[0]
    if any(tail):
        raise FormatError(file.where, f"an invalid tar header at byte {stop}")


def header_fault(block: bytes | memoryview, key: str, ext: str, size: int) -> str | None:
    """What is wrong with ``block``, the 512 bytes before a field's data, as the header of member ``key.ext`` of
    ``size`` bytes (None: nothing). A name written in an extended header before it (a long or non-ASCII name) is
    matched as this header holds it: its first 100 bytes, or its ASCII form."""
    try:
        info = tarfile.TarInfo.frombuf(bytes(block), "utf-8", "surrogateescape")
    except (tarfile.HeaderError, ValueError) as e:
        return f"no tar header ({e})"
    if not info.isreg() or info.size != size:
        return f"member {info.name!r} is no file of {size} bytes"
    m = _KEY_EXT.match(info.name)
    if m and (m.group(1), m.group(2).lower()) == (key, ext):
        return None
    real = f"{key}.{ext}".lower()
    seen = info.name.lower()
    raw = bytes(block[:100]).lower()
    if seen == real.encode("ascii", "replace").decode() or (
            b"\0" not in raw and any(real.encode(*enc).startswith(raw) for enc in _ENCODINGS)):
        return None
    return f"member {info.name!r} is not {key}.{ext}"


_ENCODINGS = (("utf-8", "surrogateescape"), ("ascii", "replace"))


def check_headers(blocks: Sequence[bytes | memoryview], keys: Sequence[str], exts: Sequence[str],
                  sizes: Sequence[int], starts: Sequence[int]) -> tuple[int, str] | None:
    """``(byte, fault)`` of the first field whose header does not fit the index (None: all fit)."""
    for block, key, ext, size, start in zip(blocks, keys, exts, sizes, starts):
        fault = header_fault(block, key, ext, size)
        if fault is not None:
            return start - HEADER, fault
    return None
