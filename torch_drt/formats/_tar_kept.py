"""A WebDataset tar's index kept in the node cache (``small/<name>``), keyed by the tar's URL, size and ETag: built
by one process of the node, read by every later open on the node (its other processes, later runs, resumes).

A kept index is input from disk: it is read within a bound set by the tar's size and checked to describe a tar of
that size (every field's data 512-byte aligned after a header, in order, within the file, each sample at least one
field, neighbouring samples under different keys) before it is used; one that fails is built again. What it names
is checked again as samples are read (each field's tar header, ``_tar_index.check_headers``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from torch_drt.formats._tar_index import TarIndex
from torch_drt.nodecache.node_cache import NodeCache

logger = logging.getLogger("torch_drt.formats")

_KEPT_FOR = 30 * 24 * 3600.0  # keyed by the object's ETag: it goes stale only with its object
_VERSION = "torch_drt-wds-index-2"
_BLOCK = 512


def kept_name(where: str, size: int, etag: str) -> str:
    """The node cache's name of the index of the tar at ``where`` (a URL without credentials) of ``size`` bytes and
    ``etag``."""
    return hashlib.sha256(json.dumps([_VERSION, where, size, etag]).encode()).hexdigest()[:40]


def kept_limit(size: int) -> int:
    """The most bytes the kept index of a tar of ``size`` bytes may hold (its keys are at most the tar's names,
    JSON-escaped)."""
    return 8 * size + (1 << 16)


def kept_index(node: NodeCache, name: str, size: int, build: Callable[[], TarIndex]) -> tuple[TarIndex, bool]:
    """``(index, kept)``: the node cache's index ``name`` of a tar of ``size`` bytes when it is there and sound
    (``kept``), else ``build()``, kept for the node's later opens (one process of the node builds it)."""
    built: list[TarIndex] = []

    def make() -> bytes:
        built.append(build())
        return encode(built[0])

    data = node.small(name, _KEPT_FOR, make, limit=kept_limit(size))
    if built:
        return built[0], False
    try:
        return decode(data, size), True
    except ValueError as e:  # damaged on the node: built again, and the new one kept
        logger.warning("the kept index %s of a %d-byte tar is not sound (%s): indexing the tar again", name, size, e)
        node.forget(name)
        data = node.small(name, _KEPT_FOR, make, limit=kept_limit(size))
        return (built[0], False) if built else (decode(data, size), True)


def encode(index: TarIndex) -> bytes:
    keys, first, exts, starts, ends = index
    return json.dumps({"keys": keys, "first": first.tolist(), "exts": exts, "starts": starts.tolist(),
                       "ends": ends.tolist()}).encode()


def decode(data: bytes | None, size: int) -> TarIndex:
    """A kept index, checked to describe a tar of ``size`` bytes (``ValueError`` naming what does not fit)."""
    if data is None or len(data) > kept_limit(size):
        raise ValueError("no index, or one larger than the tar allows")
    try:
        raw: Any = json.loads(data)
        if not isinstance(raw, dict) or sorted(raw) != ["ends", "exts", "first", "keys", "starts"]:
            raise ValueError("not an index object")
        keys, exts = _strings(raw["keys"], "keys"), _strings(raw["exts"], "exts")
        first, starts, ends = (_ints(raw[k], k) for k in ("first", "starts", "ends"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (TypeError, OverflowError, UnicodeError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None
    _check(keys, first, exts, starts, ends, size)
    return keys, first, exts, starts, ends


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} is not a list of strings")
    return value


def _ints(value: Any, name: str) -> np.ndarray:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError(f"{name} is not a list of integers")
    return np.asarray(value, dtype=np.int64)  # OverflowError past int64


def _check(keys: list[str], first: np.ndarray, exts: list[str], starts: np.ndarray, ends: np.ndarray, size: int
           ) -> None:
    """Raise ``ValueError`` unless the index can describe a tar of ``size`` bytes."""
    if len(first) != len(keys) + 1 or not len(starts) == len(ends) == len(exts):
        raise ValueError("its lists differ in length")
    if first[0] != 0 or first[-1] != len(exts) or np.any(np.diff(first) < 1):
        raise ValueError("first is not the increasing start of each sample's fields")
    if not all(keys) or any(a == b for a, b in itertools.pairwise(keys)):
        raise ValueError("a key is empty, or two neighbouring samples share one")
    if any("/" in e for e in exts):
        raise ValueError("an extension holds '/'")
    for a, b in zip(first[:-1].tolist(), first[1:].tolist()):
        if len(set(exts[a:b])) != b - a:
            raise ValueError("a sample repeats an extension")
    if not len(starts):
        return
    padded = -(-ends // _BLOCK) * _BLOCK
    if (np.any(starts % _BLOCK) or starts[0] < _BLOCK or np.any(ends < starts)
            or np.any(starts[1:] < padded[:-1] + _BLOCK) or padded[-1] + _BLOCK > size):
        raise ValueError("a field's bytes are not where a tar of this size holds a member's data")
