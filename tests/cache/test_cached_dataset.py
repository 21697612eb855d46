"""CachedDataset: metadata table, edits, epoch length, sampling stream and reader state."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import ListSource, payload

import torch_drt as drt

QUIET = drt.WriterConfig(show_progress=False)


def load(runtime, paths, *, shuffle=False, seed=0, **config):
    return runtime.cached_dataset(paths, reader_config=drt.ReaderConfig(seed=seed, shuffle=shuffle, **config))


def rows(samples):
    return [s.sample_id for s in samples]


def test_metadata_table_columns_and_types(runtime, make_cache):
    a, b = make_cache("a", n=3), make_cache("b", n=2)
    ds = load(runtime, [a, b])
    table = ds.get_metadata()
    assert table.column_names == ["cache_id", "sample_id", "flag", "label", "score", "tag", "weight"]
    assert table.schema.field("weight").type == pa.float64()
    assert table.column("weight").to_pylist() == [1.0] * 5
    assert table.column("sample_id").to_pylist() == [0, 1, 2, 0, 1]
    assert len(set(table.column("cache_id").to_pylist())) == 2
    assert table.column("label").to_pylist() == [0, 1, 2, 0, 1]


def test_sequential_cursor_carries_across_iterators(runtime, make_cache):
    ds = load(runtime, [make_cache(n=5)])
    ds.set_epoch_len(2)
    assert [rows(ds), rows(ds), rows(ds)] == [[0, 1], [2, 3], [4, 0]]


def test_shuffled_windows_form_one_continuous_stream(runtime, make_cache):
    path = make_cache(n=50)
    ds = load(runtime, [path], shuffle=True, seed=7)
    ds.set_epoch_len(2)
    windows = rows(ds) + rows(ds) + rows(ds)
    fresh = load(runtime, [path], shuffle=True, seed=7)
    fresh.set_epoch_len(6)
    assert windows == rows(fresh)
    other = load(runtime, [path], shuffle=True, seed=8)
    other.set_epoch_len(6)
    assert rows(other) != windows


def test_weights_drive_the_draws(runtime, make_cache):
    ds = load(runtime, [make_cache(n=2)], shuffle=True, seed=3, sampling="weighted")
    table = ds.get_metadata()
    ds.update_metadata(table.set_column(table.column_names.index("weight"), "weight", pa.array([1.0, 9.0])))
    ds.set_epoch_len(1000)
    heavy = sum(s.sample_id == 1 for s in ds)
    assert 850 <= heavy <= 950


def test_update_metadata_filters_duplicates_reorders_and_keeps_extra_columns(runtime, make_cache):
    path = make_cache(n=6)
    ds = load(runtime, [path])
    table = ds.get_metadata()
    edited = table.take([5, 1, 1, 3]).append_column("split", pa.array(["a", "b", "c", "d"]))
    before = {p.name: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()}
    ds.update_metadata(edited)
    assert len(ds) == 4
    samples = list(ds)
    assert rows(samples) == [5, 1, 1, 3]
    assert [s.data for s in samples] == [payload(i) for i in (5, 1, 1, 3)]
    assert [s.metadata["split"] for s in samples] == ["a", "b", "c", "d"]
    assert ds.get_metadata().column_names[-1] == "split"
    assert {p.name: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()} == before  # never rewritten


@pytest.mark.parametrize("frame", ["pandas", "polars"])
def test_update_metadata_accepts_dataframes(runtime, make_cache, frame):
    lib = pytest.importorskip(frame)
    ds = load(runtime, [make_cache(n=4)])
    table = ds.get_metadata().take([3, 0])
    df = table.to_pandas() if frame == "pandas" else lib.from_arrow(table)
    ds.update_metadata(df)
    assert rows(ds) == [3, 0]


def _with(table: pa.Table, name: str, values) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, pa.array(values))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.drop_columns(["sample_id"]), "column 'sample_id' is missing"),
        (lambda t: t.drop_columns(["label"]), "column 'label' is missing"),
        (lambda t: _with(t, "sample_id", [0, 1, 9, 2]), "column 'sample_id' row 2: 9 is out of range"),
        (lambda t: _with(t, "sample_id", [0, -1, 1, 2]), "column 'sample_id' row 1: -1 is out of range"),
        (
            lambda t: _with(t, "sample_id", [0.0, 1.5, 2.0, 3.0]),
            "column 'sample_id' row 1: value 1.5 is not integral",
        ),
        (lambda t: _with(t, "cache_id", [1, 2, 3, 4]), "column 'cache_id' row 0: unknown cache id 1"),
        (
            lambda t: _with(t, "weight", [1.0, 0.0, 1.0, 1.0]),
            "column 'weight' row 1: weight must be finite and > 0",
        ),
        (
            lambda t: _with(t, "weight", [1.0, 1.0, float("nan"), 1.0]),
            "column 'weight' row 2: weight must be finite",
        ),
        (lambda t: _with(t, "weight", [1.0, 1.0, 1.0, float("inf")]), "column 'weight' row 3"),
        (lambda t: _with(t, "weight", ["a", "b", "c", "d"]), "column 'weight' must be numeric"),
        (lambda t: _with(t, "label", ["a", "b", "c", "d"]), "column 'label' must keep its Arrow type int64"),
        (lambda t: _with(t, "tag", [None, "x", "y", "z"]), "column 'tag' row 0: null values are not allowed"),
        (lambda t: t.slice(0, 0), "at least one row"),
    ],
)
def test_update_metadata_validates_whole_table_and_keeps_the_old_one(runtime, make_cache, edit, message):
    ds = load(runtime, [make_cache(n=4)])
    ds.set_epoch_len(3)
    list(ds)  # advance the cursor
    old, state = ds.get_metadata(), ds.state_dict()
    with pytest.raises(ValueError) as info:
        ds.update_metadata(edit(old))
    assert message in str(info.value)
    assert ds.get_metadata() is old and ds.state_dict() == state


def test_update_metadata_rejects_non_tables(runtime, make_cache):
    ds = load(runtime, [make_cache(n=4)])
    with pytest.raises(TypeError, match="Arrow-compatible table"):
        ds.update_metadata([1, 2])


def test_update_resets_stream_and_epoch_length(runtime, make_cache):
    ds = load(runtime, [make_cache(n=5)])
    ds.set_epoch_len(3)
    assert rows(ds) == [0, 1, 2]
    ds.update_metadata(ds.get_metadata())
    assert len(ds) == 5 and rows(ds) == [0, 1, 2, 3, 4]


def test_existing_iterators_keep_their_snapshot(runtime, make_cache):
    ds = load(runtime, [make_cache(n=5)])
    it = iter(ds)
    ds.update_metadata(ds.get_metadata().take([4]))
    ds.set_epoch_len(2)
    assert rows(it) == [0, 1, 2, 3, 4]
    assert rows(ds) == [4, 4]


def test_set_epoch_len_validation(runtime, make_cache):
    ds = load(runtime, [make_cache(n=5)])
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="epoch length"):
            ds.set_epoch_len(bad)


def test_state_resumes_exactly_and_refuses_another_table(runtime, make_cache):
    path = make_cache(n=30)
    ds = load(runtime, [path], shuffle=True, seed=11)
    ds.set_epoch_len(7)
    list(ds)
    state = ds.state_dict()
    expected = rows(ds)
    resumed = load(runtime, [path], shuffle=True, seed=11)
    resumed.load_state_dict(state)
    assert rows(resumed) == expected
    far = dict(state, position=10**12)
    resumed.load_state_dict(far)
    assert len(rows(resumed)) == 7  # O(1) at any position
    filtered = load(runtime, [path], shuffle=True, seed=11)
    filtered.update_metadata(filtered.get_metadata().slice(0, 10))
    with pytest.raises(ValueError, match="different metadata table"):
        filtered.load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        load(runtime, [path], shuffle=True, seed=12).load_state_dict(state)


def test_get_item_and_its_errors(runtime, make_cache):
    ds = load(runtime, [make_cache(n=5)])
    cache_id = ds.get_metadata().column("cache_id")[0].as_py()
    sample = ds.get_item(cache_id, 3)
    assert sample == drt.CachedSample(
        payload(3), {"flag": False, "label": 3, "score": 0.75, "tag": "t3"}, cache_id, 3
    )
    with pytest.raises(IndexError, match="sample_id 5 is out of range"):
        ds.get_item(cache_id, 5)
    with pytest.raises(IndexError, match="is not loaded"):
        ds.get_item(cache_id + 1, 0)


def test_iter_batches_matches_sample_iteration(runtime, make_cache):
    path = make_cache(n=23)
    ds = load(runtime, [path], shuffle=True, seed=5)
    batches = list(ds.iter_batches(5))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
    again = load(runtime, [path], shuffle=True, seed=5)
    samples = list(again)
    assert [d for b in batches for d in b.data] == [s.data for s in samples]
    assert np.concatenate([b.sample_id for b in batches]).tolist() == rows(samples)


def test_read_into_gathers_fixed_width_payloads(runtime, tmp_path):
    class Fixed:
        name = "fixed"

        def __iter__(self):
            for i in range(40):
                yield drt.CacheInput(bytes([i]) * 16, {"label": i})

    (res,) = runtime.write_cache(
        [Fixed()], tmp_path, writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=200)
    )
    ds = load(runtime, [res.path])
    out = np.zeros((6, 16), dtype=np.uint8)
    ids = np.array([3, 4, 5, 20, 0, 39])
    ds.reader.read_into(np.zeros(6, dtype=np.int32), ids, out)
    assert out[:, 0].tolist() == ids.tolist() and (out == out[:, :1]).all()


def test_dataset_keeps_runtime_alive(make_cache):
    path = make_cache(n=3)
    ds = drt.DatasetRuntime(1).cached_dataset([path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    import gc

    gc.collect()
    assert rows(ds) == [0, 1, 2]
    assert isinstance(ListSource("x", 1).name, str)
