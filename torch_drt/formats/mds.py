"""MDSDataset: MosaicML Streaming (MDS) datasets read where they lie: ``index.json`` and its shards, raw or
compressed, every column encoding that does not execute code.

A raw shard is read by the byte ranges of the samples asked for (mapped when local, coalesced range requests when
remote). A compressed shard, or any shard whose index lists hashes, is read whole, verified against every hash
the index lists that this machine computes (``sha256`` ones through the node cache when remote), decompressed
within the size the index records, and kept in the per-process LRU of shards.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torch_drt.cache.errors import FormatError, UnsafeEncodingError
from torch_drt.formats import _mds_encodings as enc
from torch_drt.formats._file_reads import MemoryFile, gather_samples, offset_table
from torch_drt.formats._files import Files, many
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations import StoredFile
from torch_drt.locations.remote_config import RemoteConfig

_INDEX_LIMIT = 256 << 20
_MAX_SHARD_BYTES = 1 << 32  # an index claiming more for one shard is damaged (MDS writes 64 MiB by default)


def _decompressor(algo: str) -> Callable[[bytes, int], bytes] | None:
    """``decompress(data, raw_size)`` for an MDS compression name (``zstd:7``, ``gz``, ``bz2``), or None; it
    never produces more than ``raw_size + 1`` bytes (whatever a damaged header claims)."""
    family = algo.split(":", 1)[0]
    if family == "zstd":
        import zstandard

        def unzstd(data: bytes, size: int) -> bytes:
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
                return reader.read(size + 1)

        return unzstd
    if family == "gz":
        return lambda data, size: zlib.decompressobj(wbits=31).decompress(data, size + 1)
    if family == "bz2":
        return lambda data, size: bz2.BZ2Decompressor().decompress(data, max_length=size + 1)
    return None


def zstd_error() -> type[Exception]:
    import zstandard

    return zstandard.ZstdError


def _hashers() -> dict[str, Callable[[bytes], str]]:
    out: dict[str, Callable[[bytes], str]] = {
        name: (lambda n: lambda d: hashlib.new(n, d).hexdigest())(name)
        for name in hashlib.algorithms_available if not name.startswith("shake_")
    }
    try:
        import xxhash

        for name in xxhash.algorithms_available:
            out[name] = (lambda f: lambda d: f(d).hexdigest())(getattr(xxhash, name))
    except ImportError:
        pass
    return out


class _Shard:
    """One shard as ``index.json`` describes it."""

    def __init__(self, root: str, entry: Any, where: Path | str, allow_pickle: bool, decode_images: bool) -> None:
        try:
            if entry.get("format") != "mds":
                raise ValueError(f"format {entry.get('format')!r} is not 'mds'")
            self.samples = _count(entry["samples"], "samples")
            self.names = [str(n) for n in entry["column_names"]]
            encodings = [str(e) for e in entry["column_encodings"]]
            sizes = list(entry["column_sizes"])
            if not len(self.names) == len(encodings) == len(sizes):
                raise ValueError("column_names, column_encodings and column_sizes differ in length")
            self.raw = _file_entry(entry["raw_data"])
            self.zip = _file_entry(entry["zip_data"]) if entry.get("zip_data") else None
            self.compression = entry.get("compression")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise FormatError(where, f"a shard entry: {type(e).__name__}: {e}") from None
        for name, encoding in zip(self.names, encodings):
            if encoding in enc.UNSAFE and not allow_pickle:
                raise UnsafeEncodingError(where, f"column {name!r} is encoded with {encoding!r}, which runs code when "
                                                 "read; pass allow_pickle=True for data you trust")
        self.encodings, self.decode_images = encodings, decode_images
        try:
            expected = [enc.fixed_size(e) for e in encodings]
            self._build()
        except ValueError as e:
            raise FormatError(where, str(e)) from None
        if [s if s is None else int(s) for s in sizes] != expected:
            raise FormatError(where, f"column_sizes {sizes} do not match the encodings {encodings}")
        self.sizes = expected
        self.root = root
        if self.zip is not None and self.unzip is None:
            raise FormatError(where, f"compression {self.compression!r} is not supported here")

    def _build(self) -> None:
        """The decoders (functions: made again in each process, never pickled)."""
        self.decoders = [enc.decoder(e, self.decode_images) for e in self.encodings]
        variable = sum(1 for e in self.encodings if enc.fixed_size(e) is None)
        self.head = struct.Struct(f"<{variable}I")  # the sizes of the variable columns, before the values
        self.columns = list(zip(self.names, self.decoders, (enc.fixed_size(e) for e in self.encodings)))
        self.unzip = None if self.zip is None else _decompressor(str(self.compression))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("decoders", "unzip", "head", "columns")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._build()


def _count(value: Any, what: str, limit: int = 1 << 32) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise ValueError(f"{what}={value!r} is not a count")
    return value


def _file_entry(entry: Any) -> tuple[str, int, dict[str, str]]:
    name = str(entry["basename"])
    if name.startswith("/") or ".." in name.split("/") or "\\" in name or not name:
        raise ValueError(f"basename {name!r} lies outside the dataset")
    hashes = entry.get("hashes") or {}
    if not isinstance(hashes, dict):
        raise ValueError("hashes is not an object")
    return name, _count(entry["bytes"], "bytes", _MAX_SHARD_BYTES), {str(k): str(v) for k, v in hashes.items()}


class MDSDataset(ShardSet):
    """An MDS dataset (or several, one after the other) as a map-style dataset of dicts, one field per column,
    decoded as ``streaming``'s ``StreamingDataset`` decodes them.

    Args:
        location: a directory holding ``index.json`` (local path or fsspec URL), or a list of them.
        allow_pickle: decode ``pkl`` columns. Unpickling runs code chosen by whoever wrote the data: only for data
            you trust. Without it such a dataset is refused (``UnsafeEncodingError``).
        decode_images: ``pil``/``jpeg``/``png`` columns as PIL images as MDS returns them (default), else bytes.
        storage_options: fsspec options of URLs.
        remote_config: node cache, retries, time-outs and range settings of URLs (``torch_drt.RemoteConfig``).
        cache_shards: shards kept per process (a compressed or hashed shard is kept whole in memory).

    Raises:
        FormatError: the index or a shard is damaged, or a hash the index lists does not match.
        UnsafeEncodingError: a column is pickled and ``allow_pickle`` is False.
    """

    def __init__(
        self,
        location: str | Path | Sequence[str | Path],
        *,
        allow_pickle: bool = False,
        decode_images: bool = True,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
        cache_shards: int = 4,
    ) -> None:
        self._files = Files(storage_options, remote_config)
        self._shards: list[_Shard] = []
        for root in many(location):
            root = root.rstrip("/")
            where = self._files.where(root, "index.json")
            try:
                index = json.loads(self._files.read(root, "index.json", _INDEX_LIMIT))
                entries = index["shards"]
                if not isinstance(entries, list):
                    raise TypeError("shards is not a list")
            except (ValueError, KeyError, TypeError) as e:
                raise FormatError(where, f"not an MDS index: {type(e).__name__}: {e}") from None
            self._shards += [_Shard(root, e, where, allow_pickle, decode_images) for e in entries]
            self._files.list_remote(root)
        super().__init__([s.samples for s in self._shards],
                         [str(self._files.where(s.root, (s.zip or s.raw)[0])) for s in self._shards], cache_shards)

    def _shard_file(self, shard: int) -> StoredFile:
        """Shard ``shard``'s file, opened (through the node cache when remote, keyed by its sha256 when the index
        records one)."""
        s = self._shards[shard]
        name, size, hashes = s.zip or s.raw
        checksum = ("sha256", hashes["sha256"]) if "sha256" in hashes else None
        return self._files.open(s.root, name, size, checksum)

    def _shard_remote_file(self, shard: int) -> StoredFile | None:
        return self._shard_file(shard) if self._files.remote(self._shards[shard].root) else None

    def _load(self, shard: int) -> tuple[StoredFile, np.ndarray]:
        """The shard's bytes (opened, or read whole and verified) and its sample offsets.

        A raw remote shard whose index records a sha256 is read from the node cache's copy, verified against it
        when downloaded; locally, or with other hashes only, or compressed, the shard is read whole and checked
        against every hash the index lists."""
        s = self._shards[shard]
        name, size, hashes = s.zip or s.raw
        where = self._files.where(s.root, name)
        if s.zip is None and (not hashes or ("sha256" in hashes and self._files.remote(s.root))):
            file = self._shard_file(shard)
            if file.size != size:
                raise FormatError(where, f"file is {file.size} bytes, index.json records {size}")
        else:
            checksum = ("sha256", hashes["sha256"]) if "sha256" in hashes else None
            if self._files.remote(s.root):
                data = self._files.whole(s.root, name, size, checksum)
            else:
                data = self._files.read(s.root, name, size, checksum)
            _verify(where, data, size, hashes)
            if s.unzip is not None:
                _, raw_size, raw_hashes = s.raw
                try:
                    data = s.unzip(data, raw_size)
                except (OSError, ValueError, EOFError, zlib.error, zstd_error()) as e:
                    raise FormatError(where, f"cannot decompress ({s.compression}): {e}") from None
                _verify(where, data, raw_size, raw_hashes)
            file = MemoryFile(where, data)
        return file, offset_table(file, s.samples)

    def _sample(self, decoded: tuple[StoredFile, np.ndarray], shard: int, index: int) -> dict[str, Any]:
        return self._shard_samples(decoded, shard, [index])[0]

    def _shard_samples(self, decoded: tuple[StoredFile, np.ndarray], shard: int, indices: list[int]) -> list[Any]:
        file, offsets = decoded
        return [self._decode(shard, data) for data in gather_samples(file, offsets, indices)]

    def _decode(self, shard: int, data: bytes) -> dict[str, Any]:
        s = self._shards[shard]
        head = s.head
        if head.size > len(data):
            raise FormatError(self.shard_names[shard], "a sample is shorter than its column sizes")
        variable = iter(head.unpack_from(data))
        sizes = [next(variable) if size is None else size for _, _, size in s.columns]
        at = head.size
        if at + sum(sizes) > len(data):
            raise FormatError(self.shard_names[shard], f"columns of {sum(sizes)} bytes run past their sample")
        out = {}
        for (name, decode, _), size in zip(s.columns, sizes):
            try:
                out[name] = decode(data[at : at + size])
            except MemoryError:
                raise
            except Exception as e:  # any failure to decode hostile bytes (PIL's and pickle's included)
                raise FormatError(self.shard_names[shard], f"column {name!r}: {type(e).__name__}: {e}") from None
            at += size
        return out


def _verify(where: Path | str, data: bytes, size: int, hashes: dict[str, str]) -> None:
    if len(data) != size:
        raise FormatError(where, f"{len(data)} bytes where index.json records {size}")
    hashers = _hashers()
    for algo, expected in hashes.items():
        if algo in hashers and hashers[algo](data) != expected:
            raise FormatError(where, f"{algo} is not the {expected} index.json records (damaged?)")
