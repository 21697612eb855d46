"""The index of a WebDataset tar: its samples grouped as webdataset's ``group_by_keys`` groups them, built in one
pass over the headers, and kept in the node cache for a remote tar (so a later run on the node skips the pass).
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Callable
from typing import Any

import numpy as np

from torch_drt.cache.errors import CacheCorruptError, FormatError
from torch_drt.formats._range_reader import RangeReader
from torch_drt.locations import CacheBackend, StoredFile

_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_SKIP = re.compile(r"__[^/]*__($|/)")  # webdataset's skip_meta
_TAIL_LIMIT = 1 << 20  # bytes after the last header that may be read to check they are the end-of-archive zeros
_KEPT_FOR = 30 * 24 * 3600.0  # a kept index is keyed by the object's ETag: it goes stale only with its object
_VERSION = "torch_drt-wds-index-1"

# per sample its key and first field; per field its extension, start and end
TarIndex = tuple[list[str], np.ndarray, list[str], np.ndarray, np.ndarray]


def kept_index(backend: CacheBackend, rel: str, file: StoredFile, build: Callable[[], TarIndex]) -> TarIndex:
    """``build()``, or for a remote tar whose store reports an ETag, the node cache's copy of it (built by one
    process of the node; a copy that does not fit the tar is built again)."""
    store, node = getattr(backend, "store", None), getattr(backend, "node", None)
    if store is None or node is None:
        return build()
    try:
        info = store.run("checking", rel, lambda: store.fs.info(store.path(rel)))
    except (OSError, ValueError):
        return build()
    etag = info.get("ETag") or info.get("etag")
    if not etag:
        return build()
    name = hashlib.sha256(json.dumps([_VERSION, str(file.where), file.size, str(etag)]).encode()).hexdigest()[:40]
    data = node.small(name, _KEPT_FOR, lambda: _encode(build()))
    try:
        return _decode(data, file.size)
    except ValueError:  # damaged on the node: build it again and keep the new one
        node.forget(name)
        return build()


def _encode(index: TarIndex) -> bytes:
    keys, first, exts, starts, ends = index
    return json.dumps({"keys": keys, "first": first.tolist(), "exts": exts, "starts": starts.tolist(),
                       "ends": ends.tolist()}).encode()


def _decode(data: bytes | None, size: int) -> TarIndex:
    """A kept index, checked to describe a tar of ``size`` bytes (``ValueError`` otherwise)."""
    if data is None:
        raise ValueError("no index")
    try:
        raw: Any = json.loads(data)
        keys, exts = [str(k) for k in raw["keys"]], [str(e) for e in raw["exts"]]
        first, starts, ends = (np.asarray(raw[k], dtype=np.int64) for k in ("first", "starts", "ends"))
    except (KeyError, TypeError, OverflowError) as e:
        raise ValueError(str(e)) from None
    ok = (len(first) == len(keys) + 1 and len(starts) == len(ends) == len(exts) and first[0] == 0
          and first[-1] == len(exts) and bool(np.all(np.diff(first) >= 0)) and bool(np.all(starts <= ends))
          and (not len(starts) or (starts.min() >= 0 and ends.max() <= size)))
    if not ok:
        raise ValueError("the kept index does not fit the tar")
    return keys, first, exts, starts, ends


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
