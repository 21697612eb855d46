"""``record_checks="every_read"`` copies and hashes a gather a part at a time (about 1 MiB, while each part is in the
CPU's cache: issue 26). Every part is checked: a flipped byte in any part of a gather is a ``CacheCorruptError``
naming the shard and the sample, from one shard or many, in order or shuffled, and intact records come back whole
and in order.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from record_flips import flip_record_bit

import torch_drt as drt
from torch_drt.checksums import copied_checksums, record_checksums

WIDTH = 32768
COUNT = 96  # 3 MiB: a gather of all of them is 3 parts


class Records:
    name = "records"

    def __iter__(self):
        for i, data in enumerate(_payloads()):
            yield drt.CacheInput(data, {"i": i})


def _payloads() -> list[bytes]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, WIDTH, dtype=np.uint8).tobytes() for _ in range(COUNT)]


@pytest.fixture(scope="module", params=["one shard", "many shards"])
def written(request, tmp_path_factory) -> Path:
    shard_bytes = 1 << 30 if request.param == "one shard" else 5 * WIDTH
    rt = drt.DatasetRuntime(num_workers=1)
    config = drt.WriterConfig(show_progress=False, max_shard_bytes=shard_bytes)
    (res,) = rt.write_cache([Records()], tmp_path_factory.mktemp("parts") / "c", writer_config=config)
    rt.close()
    return res.path


def _flip(cache: Path, sample: int) -> Path:
    return flip_record_bit(cache, sample, at="last", mask=0x80)


def _dataset(runtime, cache: Path, shuffle: bool):
    return runtime.cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0, shuffle=shuffle))


@pytest.mark.parametrize("shuffle", [False, True])
def test_intact_records_come_back_whole_and_in_order(written, runtime, shuffle):
    ds = _dataset(runtime, written, shuffle)
    expected = _payloads()
    (batch,) = list(ds.iter_batches(COUNT))
    assert [expected[int(i)] for i in batch.sample_id] == list(batch.data)
    assert sorted(batch.sample_id.tolist()) == list(range(COUNT))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("damaged", [0, 40, COUNT - 1])  # the first, a middle and the last part of the gather
def test_a_flipped_byte_in_any_part_is_an_error_naming_shard_and_sample(written, tmp_path, runtime, shuffle, damaged):
    cache = Path(shutil.copytree(written, tmp_path / "c"))
    shard = _flip(cache, damaged)
    ds = _dataset(runtime, cache, shuffle)
    with pytest.raises(drt.CacheCorruptError, match=f"sample {damaged}: record fails its checksum") as info:
        list(ds.iter_batches(COUNT))
    assert Path(info.value.path) == shard


def test_copied_checksums_hashes_every_part():
    records = [bytes([i]) * (24000 + i) for i in range(200)]  # about 4.6 MiB: 5 parts
    sums = record_checksums(records, len(records))
    asked: list[tuple[int, int]] = []

    def part(i: int, j: int) -> list[bytes]:
        asked.append((i, j))
        return [bytes(r) for r in records[i:j]]

    data, bad = copied_checksums(part, len(records), sum(map(len, records)), sums)
    assert data == records and bad == -1
    assert len(asked) > 1 and asked[0][0] == 0 and asked[-1][1] >= len(records)
    for i in (0, 57, 199):
        wrong = sums.copy()
        wrong[i] ^= np.uint64(1 << 63)
        assert copied_checksums(part, len(records), sum(map(len, records)), wrong)[1] == i
    assert copied_checksums(part, 0, 0, np.empty(0, np.uint64)) == ([], -1)
