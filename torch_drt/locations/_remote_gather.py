"""A remote backend's read of many records across its shards: local shards are sliced, the others are read with
coalesced byte ranges while they download (or, without record checksums, once downloaded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch_drt._stage_clock import count_bytes
from torch_drt.locations._ranges import coalesce, read_coalesced
from torch_drt.locations._remote_file import RemoteFile
from torch_drt.locations.base import StoredFile

if TYPE_CHECKING:
    from torch_drt.locations.remote import RemoteBackend


def gather(
    backend: RemoteBackend,
    files: Sequence[StoredFile],
    numbers: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
) -> list[bytes]:
    """Bytes ``[starts[i], ends[i])`` of ``files[numbers[i]]`` for each ``i`` (see ``RemoteBackend.gather``); the
    shards a read waits for download at once, not one by one."""
    groups: dict[int, list[int]] = {}
    for i, number in enumerate(numbers):
        groups.setdefault(number, []).append(i)
    out: list[bytes] = [b""] * len(numbers)
    remote: list[tuple[RemoteFile, list[int]]] = []
    waits: list[tuple[RemoteFile, list[int]]] = []
    config = backend.config
    shards_mode = config.read_mode == "shards"
    for number, rows in groups.items():
        file = files[number]
        assert isinstance(file, RemoteFile)
        if not (file.downloadable and (shards_mode or not file.ranges_ok)):
            remote.append((file, rows))
            continue
        a, b = [starts[i] for i in rows], [ends[i] for i in rows]
        got = file.slices(a, b, wait=False)
        if got is not None:
            _place(out, rows, got)
            count_bytes("node_cache_hit", sum(b) - sum(a))  # (slices of the checked extents: len b - a)
        elif not file.ranges_ok or backend.node.downloading(file.key) or _mostly(backend, file, a, b):
            waits.append((file, rows))  # no ranges, in flight, or most of it wanted: fetch its bytes once
        else:
            remote.append((file, rows))  # a cold miss: it downloads while this read is served by ranges
    for file, _ in waits:
        if file.downloadable and shards_mode:
            backend.prefetcher.demand(file)  # all at once, ahead of anything planned
    for file, _ in remote:
        if file.downloadable and shards_mode:
            backend.prefetcher.demand(file, waited=False)  # served by ranges now: it downloads if there is room
    if remote:
        read_coalesced(backend.ranges, [(f.rel, rows) for f, rows in remote], starts, ends, config.range_gap,
                       config.range_max, out)
    for file, rows in waits:
        a, b = [starts[i] for i in rows], [ends[i] for i in rows]
        got = file.arrived(a, b) if shards_mode else None  # this process's download: its bytes as they come
        if got is None:
            got = file.slices(a, b, wait=True)
        assert got is not None
        _place(out, rows, got)
        count_bytes("node_cache_hit", sum(len(g) for g in got))
    return out


def _mostly(backend: RemoteBackend, file: RemoteFile, starts: Sequence[int], ends: Sequence[int]) -> bool:
    """True when the coalesced ranges of a read cover more than half of the file (then it is downloaded)."""
    requests, _ = coalesce(starts, ends, backend.config.range_gap, backend.config.range_max)
    return 2 * sum(b - a for a, b in requests) > file.size


def _place(out: list[bytes], rows: Sequence[int], got: Sequence[bytes]) -> None:
    for i, d in zip(rows, got):
        out[i] = d
