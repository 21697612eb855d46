"""The index of a WebDataset tar: its samples grouped as webdataset's ``group_by_keys`` groups them, built in one
pass over the headers (kept in the node cache for a remote tar: ``_tar_kept``), and each field's header checked
against it as the field is read.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Sequence
from typing import Any

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
        found = _plain_members(reader, file.size)
        reader.seek(0)
        members, stop = found if found is not None else _tarfile_members(reader)
    except CacheCorruptError:
        raise
    except (tarfile.TarError, OSError, ValueError, UnicodeError, EOFError) as e:
        raise FormatError(file.where, f"not a readable uncompressed tar: {type(e).__name__}: {e}") from None
    for name, offset, size in members:
        if ("/" not in name and name.startswith("__") and name.endswith("__")) or _SKIP.match(name):
            continue
        m = _KEY_EXT.match(name)
        if not m:
            continue
        key, ext = m.group(1), m.group(2).lower()
        if offset + size > file.size:
            raise FormatError(file.where, f"member {name!r} of {size} bytes runs past the end of the file")
        if current is None or key != keys[-1]:
            keys.append(key)
            first.append(len(exts))
            current = set()
        if ext in current:
            raise FormatError(file.where, f"member {name!r}: extension {ext!r} twice in sample {key!r}")
        current.add(ext)
        exts.append(ext)
        starts.append(offset)
        ends.append(offset + size)
    _check_end(file, stop)
    first.append(len(exts))
    return (keys, np.asarray(first, np.int64), exts, np.asarray(starts, np.int64), np.asarray(ends, np.int64))


Member = tuple[str, int, int]  # a regular member's name, the offset of its data, its size


def _tarfile_members(reader: RangeReader) -> tuple[list[Member], int]:
    """The regular members as ``tarfile`` reads them (any tar), and the offset where it stopped."""
    tar = tarfile.open(fileobj=reader, mode="r:")  # noqa: SIM115 - read by hand below
    members = []
    while (member := tar.next()) is not None:
        if member.isreg():
            members.append((member.name, member.offset_data, member.size))
    return members, tar.offset


def _plain_members(reader: RangeReader, size: int) -> tuple[list[Member], int] | None:
    """What ``_tarfile_members`` finds, for a tar of ustar headers and pax headers of common keywords only (what
    webdataset's ``TarWriter`` writes; several times faster); None at a header it leaves to ``tarfile`` (GNU long
    names, sparse files, global or unusual pax headers, a damaged first header)."""
    members: list[Member] = []
    pos, pax = 0, None
    while True:
        reader.seek(pos)
        block = reader.read(HEADER)
        if len(block) < HEADER or not any(block):
            return None if pax is not None or (pos == 0 and len(block) < HEADER) else (members, pos)
        parsed = _plain_header(block)
        if parsed is None:
            return None if pos == 0 or pax is not None else (members, pos)
        name, kind, length = parsed
        data = pos + HEADER
        if kind == tarfile.XHDTYPE and pax is None:
            pax = _pax_records(reader.read(length)) if length <= _PAX_LIMIT else None
            if pax is None:
                return None
            pos = data + -(-length // HEADER) * HEADER
            continue
        if pax is not None:
            name, length, pax = pax.get("path", name), pax.get("size", length), None
        if kind in tarfile.REGULAR_TYPES and not (kind == tarfile.AREGTYPE and name.endswith("/")):
            members.append((name, data, length))
            pos = data + -(-length // HEADER) * HEADER
        elif kind in _EXTENDED:
            return None
        elif kind in tarfile.SUPPORTED_TYPES:
            pos = data
        else:
            pos = data + -(-length // HEADER) * HEADER
        if pos > size:
            return members, pos


_PAX_LIMIT = 1 << 16
_PAX_RECORD = re.compile(rb"(\d+) ([^=\n]+)=")
_PAX_IGNORED = frozenset([b"mtime", b"atime", b"ctime", b"uid", b"gid", b"uname", b"gname"])


def _pax_records(data: bytes) -> dict[str, Any] | None:
    """The ``path`` and ``size`` of a pax header of well-formed records of common keywords, None otherwise."""
    out: dict[str, Any] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        m = _PAX_RECORD.match(data, pos)
        if m is None:
            return None
        length, keyword = int(m.group(1)), m.group(2)
        end = pos + length
        if length < 5 or end > len(data) or data[end - 1] != 0x0A:
            return None
        value = data[m.end() : end - 1]
        if keyword == b"path":
            try:
                out["path"] = value.decode("utf-8")
            except UnicodeError:
                return None
        elif keyword == b"size":
            if not value.isdigit():
                return None
            out["size"] = int(value)
        elif keyword not in _PAX_IGNORED:
            return None
        pos = end
    return out


_EXTENDED = frozenset([tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                       tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_SPARSE, b"V", b"M", b"N", b"D"])


def _number(field: bytes) -> int:
    """A numeric header field as ``tarfile`` reads it (octal, or base-256); ``ValueError`` when it is neither."""
    if field[0] in (0o200, 0o377):
        return tarfile.nti(field)  # type: ignore[attr-defined]  # tarfile's own helper, not in typeshed
    return int(field.split(b"\0", 1)[0].strip() or b"0", 8)


def _plain_header(block: bytes) -> tuple[str, bytes, int] | None:
    """``(name, type, size)`` of a header block that ``tarfile`` reads alike, None when it would refuse it."""
    try:
        stored = _number(block[148:156])
        unsigned = sum(block) - sum(block[148:156]) + 256
        if stored != unsigned and stored not in tarfile.calc_chksums(block):  # type: ignore[attr-defined]  # as nti
            return None
        length = _number(block[124:136])
        if length < 0:
            return None
        for a, b in ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345)):
            _number(block[a:b])
    except (ValueError, tarfile.HeaderError):
        return None
    kind = block[156:157]
    name = block[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    prefix = block[345:500].split(b"\0", 1)[0]
    if prefix and kind not in tarfile.GNU_TYPES:
        name = prefix.decode("utf-8", "surrogateescape") + "/" + name
    return name, kind, length


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
    block = bytes(block)
    plain = _plain_header(block)
    if plain is not None and plain[1] in tarfile.REGULAR_TYPES and plain[2] == size:
        m = _KEY_EXT.match(plain[0])
        if m and m.group(1) == key and m.group(2).lower() == ext:
            return None
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
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
    """``(byte, fault)`` of the first field whose header does not fit the index (None: all fit). The checksums are
    summed at once; a header whose name is not plainly ``key.ext`` is read in full (``header_fault``)."""
    if not blocks:
        return None
    return check_heads(np.frombuffer(b"".join(blocks), np.uint8).reshape(len(blocks), HEADER), keys, exts, sizes,
                       starts)


def check_heads(heads: np.ndarray, keys: Sequence[str], exts: Sequence[str], sizes: Sequence[int],
                starts: Sequence[int]) -> tuple[int, str] | None:
    """``check_headers`` of the headers as the rows of a ``(n, 512)`` uint8 array."""
    sums = heads.sum(1, dtype=np.int64) - heads[:, 148:156].sum(1, dtype=np.int64) + 256
    names = np.array([f"{k}.{e}".encode("utf-8", "surrogateescape") for k, e in zip(keys, exts)], dtype="S100")
    kind = heads[:, 156]
    fits = ((heads[:, 345] == 0) & ((kind == 48) | (kind == 0) | (kind == 55)) & (_octal(heads[:, 148:156]) == sums)
            & (_octal(heads[:, 124:136]) == np.asarray(sizes, np.int64))
            & (np.ascontiguousarray(heads[:, :100]).view("S100").ravel() == names))
    for i in np.flatnonzero(~fits).tolist():
        fault = header_fault(heads[i].tobytes(), keys[i], exts[i], sizes[i])
        if fault is not None:
            return starts[i] - HEADER, fault
    return None


def _octal(fields: np.ndarray) -> np.ndarray:
    """Each row's octal number, written as digits then NUL or space bytes only; -1 where it is written otherwise
    (``header_fault`` reads those as ``tarfile`` does)."""
    digit = (fields >= 48) & (fields <= 55)
    lead = np.cumprod(digit, axis=1).sum(1)  # leading digits
    tail_ok = ((fields == 0) | (fields == 32) | np.cumprod(digit, axis=1).astype(bool)).all(1)
    width = fields.shape[1]
    powers = np.where(np.arange(width)[None, :] < lead[:, None],
                      8 ** np.clip(lead[:, None] - 1 - np.arange(width)[None, :], 0, None), 0)
    value = ((fields.astype(np.int64) - 48) * powers).sum(1)
    return np.where((lead > 0) & tail_ok, value, -1)
