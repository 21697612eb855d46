"""The loader's metadata snapshot reads a batch's metadata as Arrow's ``take(rows).to_pylist()`` gives it, whichever
way it reads each column (numeric columns without nulls straight from the map, the others through Arrow)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

import torch_drt as drt
from torch_drt.cache.loader._snapshot import Snapshot, export_snapshot

N = 50


def _columns() -> dict[str, pa.Array]:
    rng = np.random.default_rng(0)
    ints = rng.integers(-1000, 1000, N)
    return {
        "i64": pa.array(ints),
        "u8": pa.array((ints % 200).astype(np.uint8)),
        "u64": pa.array(np.arange(N, dtype=np.uint64) + (1 << 63)),  # past int64: Python ints either way
        "f32": pa.array(rng.random(N).astype(np.float32)),
        "f64": pa.array(rng.random(N)),
        "f16": pa.array(rng.random(N).astype(np.float16)),
        "ok": pa.array(ints % 2 == 0),
        "name": pa.array([f"n{i}" for i in range(N)]),
        "maybe": pa.array([None if i % 3 == 0 else i for i in range(N)], type=pa.int64()),
        "when": pa.array(ints.astype("datetime64[s]")),
    }


def _snapshot(tmp_path, columns: dict[str, pa.Array]) -> Snapshot:
    table = pa.table({"cache_id": np.zeros(N, np.uint64), "sample_id": np.arange(N), "weight": np.ones(N)} | columns)
    active = SimpleNamespace(table=table, cache_pos=np.zeros(N, np.int64), sample_ids=np.arange(N),
                             weights=np.ones(N))
    return Snapshot(export_snapshot(active, [0], tmp_path / "meta.arrow"))


@pytest.mark.parametrize("names", [["i64"], ["name"], ["maybe"], None, []])
def test_meta_values_are_arrows_python_values_of_the_rows(tmp_path, names):
    columns = _columns()
    snap = _snapshot(tmp_path, columns if names is None else {n: columns[n] for n in names})
    for rows in (np.array([3, 0, 49, 3, 17]), np.arange(N)[::-1], np.array([], dtype=np.int64)):
        got_names, got = snap.meta_values(rows)
        expected = snap.meta.take(pa.array(rows))
        assert got_names == expected.column_names
        for name, values, column in zip(got_names, got, expected.columns):
            want = column.to_pylist()
            assert values == want, name
            assert [type(v) for v in values] == [type(v) for v in want], name  # int stays int, float float, ...


def test_the_loader_gives_each_sample_its_rows_metadata(tmp_path):
    class Source:
        name = "src"

        def __iter__(self):
            for i in range(40):
                yield drt.CacheInput(bytes([i]) * 8, {"label": i, "score": i / 4, "tag": f"t{i}"})

    ds = drt.DatasetRuntime(1).from_cache_sources(
        Source(), tmp_path / "c", reader_config=drt.ReaderConfig(seed=0),
        writer_config=drt.WriterConfig(show_progress=False),
    )
    loader = ds.to_torch_dataloader(batch_size=7, shuffle=True, seed=3, num_workers=0, collate_fn=list)
    samples = [s for batch in loader for s in batch]
    assert sorted(s.metadata["label"] for s in samples) == list(range(40))
    for s in samples:
        i = s.data[0]
        assert s.data == bytes([i]) * 8 and type(s.data) is bytes
        assert s.metadata == {"label": i, "score": i / 4, "tag": f"t{i}"}
        assert type(s.metadata["label"]) is int and type(s.metadata["score"]) is float


def test_a_batchs_index_entries_are_the_indexs_rows(tmp_path):
    class Source:
        name = "src"

        def __iter__(self):
            for i in range(30):
                yield drt.CacheInput(bytes([i]) * (i + 1), {"label": i})

    ds = drt.DatasetRuntime(1).from_cache_sources(
        Source(), tmp_path / "c", reader_config=drt.ReaderConfig(seed=0),
        writer_config=drt.WriterConfig(show_progress=False),
    )
    cache = ds.reader._caches[0]
    for ids in (np.array([29, 0, 7, 7]), np.arange(30)[::-1], np.array([], dtype=np.int64)):
        got, want = cache.entries(ids), cache.index[ids]
        assert got.dtype == want.dtype and got.shape == want.shape and (got == want).all()
        assert (cache.entries(ids, "length") == want["length"]).all()
    assert ds.reader.read_many(np.zeros(3, np.int64), np.array([4, 0, 29])) == [bytes([4]) * 5, b"\0", bytes([29]) * 30]
    with pytest.raises(IndexError, match="sample_id 30 is out of range"):
        cache.entries(np.array([1, 30]))
