"""Reader and writer settings: frozen dataclasses whose unknown fields are errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ReaderConfig", "ShardCompression", "WriterConfig"]

CompressionAlgo = Literal["none", "lz4", "zstd"]
_ALGOS = ("none", "lz4", "zstd")


@dataclass(frozen=True)
class ShardCompression:
    """How payloads are compressed: each record on its own, so any sample stays randomly readable.

    Args:
        algo: ``"none"``, ``"lz4"`` (LZ4 block with its size prepended) or ``"zstd"`` (one zstd frame).
        ratio: advisory expected ratio, recorded in the manifest; must be 1.0 for ``"none"``.
        level: compression level for zstd (1-22); ignored otherwise.
    """

    algo: CompressionAlgo = "none"
    ratio: float = 1.0
    level: int = 3

    def __post_init__(self) -> None:
        if self.algo not in _ALGOS:
            raise ValueError(f"{self.algo=} must be one of {_ALGOS}")
        if self.algo == "none" and self.ratio != 1.0:
            raise ValueError(f"{self.ratio=} must be 1.0 when algo is 'none'")
        if not self.ratio > 0:
            raise ValueError(f"{self.ratio=} must be > 0")
        if not 1 <= self.level <= 22:
            raise ValueError(f"{self.level=} must be in [1, 22]")


@dataclass(frozen=True)
class WriterConfig:
    """Settings of ``DatasetRuntime.write_cache``.

    Args:
        max_shard_bytes: a shard is closed once it holds this many bytes (a record never spans shards).
        shard_compression: per-record compression of payloads.
        num_processes: 0 writes sources on the runtime's threads; n > 0 writes them in n spawned processes
            (sources must then be picklable).
        show_progress: show a tqdm progress bar per source.
        validate_cache: re-read and verify every checksum of a cache after writing it (and before reusing it).
    """

    max_shard_bytes: int = 64 * 1024 * 1024
    shard_compression: ShardCompression = field(default_factory=ShardCompression)
    num_processes: int = 0
    show_progress: bool = True
    validate_cache: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.shard_compression, str):
            object.__setattr__(self, "shard_compression", ShardCompression(self.shard_compression))
        if not isinstance(self.shard_compression, ShardCompression):
            raise TypeError(f"{self.shard_compression=} must be a ShardCompression")
        if not isinstance(self.max_shard_bytes, int) or self.max_shard_bytes < 1:
            raise ValueError(f"{self.max_shard_bytes=} must be an int >= 1")
        if not isinstance(self.num_processes, int) or self.num_processes < 0:
            raise ValueError(f"{self.num_processes=} must be an int >= 0")


@dataclass(frozen=True)
class ReaderConfig:
    """Settings of a loaded ``CachedDataset``.

    Args:
        seed: seed of the shuffled (weighted) draw stream.
        shuffle: draw by weight with replacement (True) or walk the table cyclically (False).
        prefetch_size: samples read ahead per batch gather when iterating sample by sample.
        validate_cache: verify every checksum while loading (otherwise structure only).
        shard_window: with ``shuffle``, read the table in a locality-aware exact shuffle instead: every row once
            per epoch, this many shards at a time (for caches at URLs whose node cache is smaller than the
            dataset; see ``torch_drt.sampling.locality``). Rows must have equal weights. None: weighted draws.
    """

    seed: int
    shuffle: bool = True
    prefetch_size: int = 64
    validate_cache: bool = False
    shard_window: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"{self.seed=} must be an int >= 0")
        if not isinstance(self.prefetch_size, int) or self.prefetch_size < 1:
            raise ValueError(f"{self.prefetch_size=} must be an int >= 1")
        if self.shard_window is not None:
            if not isinstance(self.shard_window, int) or isinstance(self.shard_window, bool) or self.shard_window < 1:
                raise ValueError(f"{self.shard_window=} must be None or an int >= 1")
            if not self.shuffle:
                raise ValueError("shard_window is a way of shuffling: it needs shuffle=True")
