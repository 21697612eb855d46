"""Reader and writer settings: frozen pydantic models with dataset-rt's fields, whose unknown fields are errors.

They behave like dataset-rt 0.4's models where user code touches them: keyword construction, ``model_validate``,
``model_dump``, ``model_copy(update=...)``, a ``pydantic.ValidationError`` (a ``ValueError``) for a bad or unknown
field, and pydantic's lax coercion (``"3"`` and ``3.0`` are ``3``). ``dataclasses.replace`` does not apply: use
``model_copy(update=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

CompressionAlgo = Literal["none", "lz4", "zstd"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ShardCompression(BaseModel):
    """How payloads are compressed: each record on its own, so any sample stays randomly readable.

    ``ShardCompression("zstd")`` (the algorithm as the one positional argument) works too.

    Attributes:
        algo: ``"none"``, ``"lz4"`` (LZ4 block with its size prepended) or ``"zstd"`` (one zstd frame).
        ratio: advisory expected ratio, recorded in the manifest; must be 1.0 for ``"none"``.
        level: compression level for zstd (1-22); ignored otherwise.
    """

    model_config = _FROZEN

    algo: CompressionAlgo = "none"
    ratio: float = Field(default=1.0, gt=0.0)
    level: int = Field(default=3, ge=1, le=22)

    def __init__(self, algo: Any = "none", /, **data: Any) -> None:
        super().__init__(**({"algo": algo} | data))

    @model_validator(mode="after")
    def _ratio_of_none(self) -> ShardCompression:
        if self.algo == "none" and self.ratio != 1.0:
            raise ValueError(f"ratio={self.ratio} must be 1.0 when algo is 'none'")
        return self


class WriterProfilerConfig(BaseModel):
    """Where ``write_cache`` writes its JSON timing profile, when enabled (dataset-rt's shape).

    Attributes:
        enabled: time every writer stage of every source and write the profile after the call (also after
            a source failed or the call was interrupted).
        path: the JSON file (parent directories are created).
    """

    model_config = _FROZEN

    enabled: bool = False
    path: Path = Path("dataset_rt_profile.json")


class WriterConfig(BaseModel):
    """Settings of ``DatasetRuntime.write_cache`` and ``from_cache_sources``.

    Attributes:
        num_processes: 0 writes sources on the runtime's threads; n > 0 writes them in n spawned processes
            (sources must then be picklable). With the profiler enabled, sources are written on threads.
        process_timeout_seconds: with processes, the deadline of a child's start and of each source it writes
            (its unpickling included); when one passes, the children are stopped and every unfinished source
            is a ``CacheWriteError`` (nothing is retried).
        prefetch_size: at most this many samples are read from a source ahead of the shard writer (torch_drt's
            writer writes each sample before reading the next, so it holds one).
        max_shard_bytes: a shard is closed once it holds this many bytes (a record never spans shards).
        shard_compression: per-record compression of payloads (or its algorithm's name).
        show_progress: show a tqdm progress bar per source.
        validate_cache: re-read and verify every checksum of a cache after writing it (and before reusing it).
        profiler: the writer's JSON timing profile.
        durable: sync every file and directory of a cache to disk before publishing it (the default). False
            (torch_drt only, for scratch caches that can be rebuilt) syncs nothing, as dataset-rt's and MosaicML's
            writers do: the cache is still published by one rename once every file is written, so a writer
            process that dies leaves no cache or the complete one, but an operating-system crash or a power loss
            may leave a published cache whose files are incomplete (it then fails to open, or its damaged records
            fail their checks, with ``CacheCorruptError``). A cache written to a URL root is staged in a private
            temporary copy that is uploaded, never synced, whatever ``durable`` says: the object store holds it.
    """

    model_config = _FROZEN

    num_processes: int = Field(default=0, ge=0)
    process_timeout_seconds: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    prefetch_size: int = Field(default=64, gt=0)
    max_shard_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    shard_compression: ShardCompression = ShardCompression()
    show_progress: bool = True
    validate_cache: bool = False
    profiler: WriterProfilerConfig = WriterProfilerConfig()
    durable: bool = True

    @field_validator("shard_compression", mode="before")
    @classmethod
    def _algo_name(cls, value: Any) -> Any:
        return ShardCompression(value) if isinstance(value, str) else value


class ReaderConfig(BaseModel):
    """Settings of a loaded ``CachedDataset``.

    Attributes:
        seed: seed of the shuffled order. Any int is a valid setting, as in dataset-rt; loading a dataset needs one
            in ``[0, 2**64)`` (else ``OverflowError``, as dataset-rt raises).
        prefetch_size: samples read ahead per batch gather when iterating sample by sample.
        shuffle: read the table shuffled (True) or walk it cyclically (False). Shuffled, every row comes once per
            epoch in a new order (a keyed permutation per epoch), unless ``sampling="weighted"``.
        validate_cache: verify every checksum while loading (otherwise structure only).
        shard_window: with ``shuffle``, read the table in the locality-aware exact shuffle instead of the plain
            permutation: every row once per epoch, this many shards at a time (for caches at URLs whose node cache
            is smaller than the dataset; see ``torch_drt.sampling.locality``). Rows must have equal weights.
        sampling: with ``shuffle``, how rows are taken: ``"permutation"`` (every row once per epoch; rows must
            have equal weights) or ``"weighted"`` (draws by weight with replacement: rows repeat and others are
            missed). None: ``"permutation"`` for torch_drt's datasets, ``"weighted"`` for
            ``torch_drt.compat.dataset_rt``'s (dataset-rt's meaning of ``shuffle``).
        record_checks: when a record's checksum (format 2) is compared: ``"every_read"`` (None, the default) or
            ``"first_read"``: a local cache's record only on its first read in each process, later reads trust the
            unchanged mapping (see ``torch_drt.cache.reader.CacheReader`` for what is checked when).
    """

    model_config = _FROZEN

    seed: int
    prefetch_size: int = Field(default=64, gt=0)
    shuffle: bool = True
    validate_cache: bool = False
    shard_window: int | None = Field(default=None, ge=1, strict=True)
    sampling: Literal["permutation", "weighted"] | None = None
    record_checks: Literal["every_read", "first_read"] | None = None

    @model_validator(mode="after")
    def _window_shuffles(self) -> ReaderConfig:
        if self.shard_window is not None and not self.shuffle:
            raise ValueError("shard_window is a way of shuffling: it needs shuffle=True")
        if self.sampling is not None and not self.shuffle:
            raise ValueError(f"sampling={self.sampling!r} is a way of shuffling: it needs shuffle=True")
        if self.shard_window is not None and self.sampling == "weighted":
            raise ValueError(
                f"shard_window={self.shard_window} is an exact order (every row once per epoch): it cannot be "
                "sampling='weighted' (draws with replacement); drop one of them"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """dataset-rt's fields, plus torch_drt's ``shard_window``, ``sampling`` and ``record_checks`` only when set
        (so dumps of either package's settings load in the other's ``ReaderConfig``, whose unknown fields are
        errors)."""
        data = handler(self)
        for name in ("shard_window", "sampling", "record_checks"):
            if getattr(self, name) is None:
                data.pop(name, None)
        return data

    def check_seed(self) -> int:
        """The seed, if a dataset can read with it.

        Raises:
            OverflowError: when it is outside ``[0, 2**64)``, as dataset-rt raises when loading.
        """
        if not 0 <= self.seed < 1 << 64:
            raise OverflowError(f"ReaderConfig.seed={self.seed} must be in [0, 2**64) to read a dataset")
        return self.seed
