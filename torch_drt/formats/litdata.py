"""LitDataset: LitData optimized datasets (``litdata.optimize``) read where they lie: ``index.json`` and its
chunks, uncompressed or zstd-compressed whole, written with the pytree item loader.

An uncompressed chunk is read by the byte ranges of the items asked for (mapped when local, coalesced range
requests when remote); a compressed one is read whole, decompressed within ``max_chunk_bytes`` and kept in the
per-process LRU. LitData records no checksums: damaged bytes are found where the structure shows them (sizes,
offsets, headers), not in values.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache.errors import FormatError, UnsafeEncodingError
from torch_drt.formats import _litdata_serializers as ser
from torch_drt.formats._file_reads import MemoryFile, gather_one, gather_samples, offset_table
from torch_drt.formats._files import Files, many
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations import StoredFile
from torch_drt.locations.remote_config import RemoteConfig

_INDEX_LIMIT = 256 << 20
_ARROW_FOOTER_MAGIC = b"LDARW01\0"


class _Config:
    """One dataset's ``index.json``: its chunks and how their items decode."""

    def __init__(self, root: str, index: Any, where: Path | str, allow_pickle: bool) -> None:
        try:
            config = index["config"]
            if config.get("item_loader", "PyTreeLoader") != "PyTreeLoader":
                raise ValueError(f"item_loader {config['item_loader']!r} is not read here (PyTreeLoader only)")
            if config.get("encryption"):
                raise ValueError("the dataset is encrypted")
            self.compression = config.get("compression")
            level = config.get("compression_level")
            if self.compression and (not str(self.compression).startswith("zstd") or level not in (None, "chunk")):
                raise ValueError(f"compression {self.compression!r} at level {level!r} is not read here "
                                 "(zstd of whole chunks only)")
            self.formats = [str(f) for f in config["data_format"]]
            self.spec = config.get("data_spec")
            self.chunks = [(_name(c["filename"]), _count(c["chunk_size"]), _count(c["chunk_bytes"], 1 << 40))
                           for c in index["chunks"]]
            self.unflatten = ser.unflattener(self.spec, len(self.formats))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise FormatError(where, f"not a LitData index: {type(e).__name__}: {e}") from None
        for i, name in enumerate(self.formats):
            if name.partition(":")[0] in ser.UNSAFE and not allow_pickle:
                raise UnsafeEncodingError(where, f"leaf {i} is serialized with {name!r}, which runs code when "
                                                 "read; pass allow_pickle=True for data you trust")
        try:
            self._build()
        except ValueError as e:
            raise FormatError(where, str(e)) from None
        self.root = root

    def _build(self) -> None:
        """The decoders and the item builder (functions: made again in each process, never pickled)."""
        self.decoders = [ser.decoder(f) for f in self.formats]
        self.unflatten = ser.unflattener(self.spec, len(self.formats))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("decoders", "unflatten")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._build()


def _name(value: Any) -> str:
    name = str(value)
    if not name or name.startswith("/") or ".." in name.split("/") or "\\" in name:
        raise ValueError(f"filename {name!r} lies outside the dataset")
    return name


def _count(value: Any, limit: int = 1 << 32) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise ValueError(f"{value!r} is not a count")
    return value


class LitDataset(ShardSet):
    """A LitData optimized dataset (or several, one after the other) as a map-style dataset: sample ``i`` is item
    ``i`` rebuilt as ``litdata.StreamingDataset`` rebuilds it (its dicts, lists and tuples; numpy arrays, torch
    tensors, PIL images and Python scalars as its serializers return them).

    Args:
        location: a directory holding ``index.json`` (local path or fsspec URL), or a list of them.
        allow_pickle: decode ``pickle`` leaves. Unpickling runs code chosen by whoever wrote the data: only for
            data you trust. Without it such a dataset is refused (``UnsafeEncodingError``).
        storage_options: fsspec options of URLs.
        remote_config: retries, time-outs and range settings of URLs (``torch_drt.RemoteConfig``).
        cache_shards: chunks kept per process (a compressed chunk is kept whole in memory).
        max_chunk_bytes: the most bytes a compressed chunk may decompress to (its index records its size).

    Raises:
        FormatError: the index or a chunk is damaged, or it uses a serializer, compression or item loader not
            read here.
        UnsafeEncodingError: a leaf is pickled and ``allow_pickle`` is False.
    """

    def __init__(
        self,
        location: str | Path | Sequence[str | Path],
        *,
        allow_pickle: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
        cache_shards: int = 4,
        max_chunk_bytes: int = 1 << 31,
    ) -> None:
        self._files = Files(storage_options, remote_config)
        self.max_chunk_bytes = max_chunk_bytes
        self._configs: list[_Config] = []
        self._chunks: list[tuple[int, str, int]] = []  # (config, filename, bytes)
        counts, names = [], []
        for root in many(location):
            root = root.rstrip("/")
            where = self._files.where(root, "index.json")
            try:
                index = json.loads(self._files.read(root, "index.json", _INDEX_LIMIT))
            except ValueError as e:
                raise FormatError(where, f"not a LitData index: {e}") from None
            config = _Config(root, index, where, allow_pickle)
            self._files.list_remote(root)
            for name, size, nbytes in config.chunks:
                self._chunks.append((len(self._configs), name, nbytes))
                counts.append(size)
                names.append(str(self._files.where(root, name)))
            self._configs.append(config)
        super().__init__(counts, names, cache_shards)

    def _chunk_file(self, shard: int) -> StoredFile:
        c, name, nbytes = self._chunks[shard]
        config = self._configs[c]
        return self._files.open(config.root, name, None if config.compression else nbytes)

    def _shard_remote_file(self, shard: int) -> StoredFile | None:
        remote = self._files.remote(self._configs[self._chunks[shard][0]].root)
        return self._chunk_file(shard) if remote else None

    def _load(self, shard: int) -> tuple[StoredFile, np.ndarray]:
        c, _, nbytes = self._chunks[shard]
        config = self._configs[c]
        file = self._chunk_file(shard)
        if config.compression:
            where = file.where
            data = gather_one(file, 0, file.size)
            file.close()
            if nbytes > self.max_chunk_bytes:
                raise FormatError(where, f"chunk_bytes={nbytes} is more than max_chunk_bytes={self.max_chunk_bytes}")
            file = MemoryFile(where, _unzstd(where, data, nbytes))
        if file.size != nbytes:
            raise FormatError(file.where, f"the chunk is {file.size} bytes, index.json records {nbytes}")
        if file.size >= 8 and gather_one(file, file.size - 8, file.size) == _ARROW_FOOTER_MAGIC:
            raise FormatError(file.where, "the chunk carries LitData's Arrow row footer, not read here")
        return file, offset_table(file, int(self.shard_counts[shard]))

    def _sample(self, decoded: tuple[StoredFile, np.ndarray], shard: int, index: int) -> Any:
        return self._shard_samples(decoded, shard, [index])[0]

    def _shard_samples(self, decoded: tuple[StoredFile, np.ndarray], shard: int, indices: list[int]) -> list[Any]:
        file, offsets = decoded
        return [self._item(shard, i, data) for i, data in zip(indices, gather_samples(file, offsets, indices))]

    def _item(self, shard: int, index: int, data: bytes) -> Any:
        """Item ``index`` of chunk ``shard`` rebuilt from its bytes."""
        config = self._configs[self._chunks[shard][0]]
        n = len(config.decoders)
        if len(data) < 4 * n:
            raise FormatError(self.shard_names[shard], f"item {index} is shorter than its {n} leaf sizes")
        sizes = struct.unpack_from(f"<{n}I", data)
        if 4 * n + sum(sizes) > len(data):
            raise FormatError(self.shard_names[shard], f"leaves of item {index} run past its {len(data)} bytes")
        values, at = [], 4 * n
        for leaf, (decode, size) in enumerate(zip(config.decoders, sizes)):
            try:
                values.append(decode(data[at : at + size]))
            except MemoryError:
                raise
            except Exception as e:  # any failure to decode hostile bytes
                raise FormatError(self.shard_names[shard],
                                  f"item {index}, leaf {leaf} ({config.formats[leaf]}): {type(e).__name__}: {e}"
                                  ) from None
            at += size
        return config.unflatten(values)


def _unzstd(where: Path | str, data: bytes, size: int) -> bytes:
    """The chunk decompressed: never more than the ``size + 1`` bytes (whatever its frame header claims)."""
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            return reader.read(size + 1)
    except zstandard.ZstdError as e:
        raise FormatError(where, f"cannot decompress (zstd): {e}") from None
