"""Per-record integrity (issue 10): a damaged record is an error on every read path, never wrong bytes.

Flips run in forked child processes: a native decoder or a memory map that faults fails the test, not pytest.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from conftest import QUIET, ListSource, downgrade_to_v1, flip_outcomes, payload, read_after_truncation

import torch_drt as drt
from torch_drt.cache import open_cache

SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def _cache(tmp_path: Path, algo: str, n: int = 30, name: str = "r") -> Path:
    source = ListSource(name, n)
    (res,) = drt.DatasetRuntime(1).write_cache(
        [source], tmp_path / "clean", writer_config=drt.WriterConfig(show_progress=False, shard_compression=algo)
    )
    assert isinstance(res, drt.CacheWriteSuccess), res
    return res.path


def _sample(bits: int, count: int | None) -> list[int]:
    return list(range(bits)) if count is None else sorted(random.Random(3).sample(range(bits), min(count, bits)))


@pytest.mark.parametrize("algo", ["none", "lz4", "zstd"])
def test_every_flipped_shard_bit_is_a_cache_corrupt_error_on_read(tmp_path, algo):
    clean = _cache(tmp_path, algo)
    bits = (clean / "shards" / "000000.bin").stat().st_size * 8
    outcomes = flip_outcomes(clean, "shards/000000.bin", _sample(bits, 40), tmp_path)
    assert set(outcomes.values()) == {"CacheCorruptError"}, outcomes


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["none", "lz4", "zstd"])
def test_shard_flip_sweep(tmp_path, algo):
    clean = _cache(tmp_path, algo)
    bits = (clean / "shards" / "000000.bin").stat().st_size * 8
    outcomes = flip_outcomes(clean, "shards/000000.bin", _sample(bits, None), tmp_path)
    assert set(outcomes.values()) == {"CacheCorruptError"}, {
        p: o for p, o in outcomes.items() if o != "CacheCorruptError"
    }


@pytest.mark.parametrize("algo", ["lz4", "zstd"])
def test_format_1_caches_stay_readable_and_bound_decompression(tmp_path, algo):
    """Format 1 has no record checksums: header flips must still never ask for absurd memory or crash."""
    clean = _cache(tmp_path, algo)
    downgrade_to_v1(clean)
    layout = open_cache(clean)
    assert layout.format_version == 1 and not layout.record_checksums
    ds = drt.DatasetRuntime(1).cached_dataset([clean], reader_config=SEQ)
    assert [s.data for s in ds] == [payload(i) for i in range(30)]
    header_bits = list(range(6 * 8))  # the size fields of the first record: LZ4 u32, zstd frame header
    outcomes = flip_outcomes(clean, "shards/000000.bin", header_bits, tmp_path)
    assert set(outcomes.values()) <= {"CacheCorruptError", "ok", "wrong"}, outcomes


@pytest.mark.parametrize(("rel", "size"), [("shards/000000.bin", 10), ("index.bin", 0)])
def test_a_file_truncated_after_open_is_an_error_not_sigbus(tmp_path, rel, size):
    clean = _cache(tmp_path, "none", n=2000)
    proc = read_after_truncation(clean, rel, size)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-1000:])
    assert proc.stdout.startswith("CacheCorruptError") and "truncated?" in proc.stdout


def test_every_read_path_verifies(tmp_path, runtime):
    """Iteration, batches, get_item, read_into, the nodes and DocumentStorage all refuse a damaged record."""
    from torchdata.nodes import Batcher, Loader

    from torch_drt.nodes import CacheReaderNode, CacheSampler
    from torch_drt.storage import DocumentStorage

    class Fixed:
        name = "fixed"

        def __iter__(self):
            for i in range(8):
                yield drt.CacheInput(bytes([i]) * 16, {"i": i})

    (res,) = runtime.write_cache([Fixed()], tmp_path, writer_config=QUIET)
    shard = res.path / "shards" / "000000.bin"
    body = bytearray(shard.read_bytes())
    body[16 * 5 + 3] ^= 0x10  # sample 5
    shard.write_bytes(bytes(body))
    ds = runtime.cached_dataset([res.path], reader_config=SEQ)
    cache_id = ds.layouts[0].cache_id
    reads = {
        "iteration": lambda: list(ds),
        "iter_batches": lambda: list(ds.iter_batches(3)),
        "get_item": lambda: ds.get_item(cache_id, 5),
        "read_into": lambda: ds.reader.read_into(np.zeros(8, np.int32), np.arange(8), np.zeros((8, 16), np.uint8)),
        "node": lambda: list(Loader(CacheReaderNode(Batcher(CacheSampler(ds, shuffle=False), 4), ds))),
        "documents": lambda: DocumentStorage(res.path)[5],
        "documents batch": lambda: DocumentStorage(res.path).__getitems__([4, 5]),
    }
    for name, read in reads.items():
        with pytest.raises(drt.CacheCorruptError, match="sample 5: record fails its checksum") as info:
            read()
        assert info.value.path == shard, name
    assert ds.get_item(cache_id, 4).data == bytes([4]) * 16  # the others still read
