"""Bad input to the cache API (issue 10): clear, typed errors; weights of any magnitude draw as they say."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from conftest import QUIET, ListSource, payload

import torch_drt as drt
from torch_drt.sampling.weighted import WeightedDraws

SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def test_a_single_path_is_one_cache(runtime, make_cache):
    path = make_cache("one", n=3)
    for given in (path, str(path)):
        ds = runtime.cached_dataset(given, reader_config=SEQ)
        assert [s.data for s in ds] == [payload(i) for i in range(3)]


def test_a_missing_cache_path_says_it_does_not_exist(runtime, tmp_path):
    with pytest.raises(FileNotFoundError, match="cache path does not exist"):
        runtime.cached_dataset([tmp_path / "never-written"], reader_config=SEQ)


def test_a_failed_write_names_its_cause_and_the_next_call_says_nothing_was_published(runtime, tmp_path):
    class Broken(ListSource):
        def __iter__(self):
            yield from list(super().__iter__())[:2]
            raise ZeroDivisionError("division by zero")

    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache([Broken("b", 5)], tmp_path, writer_config=QUIET)
    (res,) = info.value.results
    assert isinstance(res, drt.CacheWriteError)
    assert (
        "ZeroDivisionError" in res.message and "test_cache_table_input.py" in res.message and "__iter__" in res.message
    )
    with pytest.raises(FileNotFoundError, match="does not exist"):
        runtime.cached_dataset([tmp_path / "b"], reader_config=SEQ)


def _table_with(table: pa.Table, name: str, column) -> pa.Table:
    return pa.Table.from_arrays([*table.columns, column], names=[*table.column_names, name])


def test_a_repeated_reserved_column_is_a_value_error(runtime, make_cache):
    ds = runtime.cached_dataset([make_cache(n=4)], reader_config=SEQ)
    table = ds.get_metadata()
    for name in ("weight", "cache_id", "label"):
        with pytest.raises(ValueError, match=f"column '{name}' appears more than once"):
            ds.update_metadata(_table_with(table, name, table.column(name)))


@pytest.mark.parametrize("name", ["__cache_pos", "__sample_id", "__cum_weight", "__mine"])
def test_internal_column_names_are_refused_up_front(runtime, make_cache, name):
    ds = runtime.cached_dataset([make_cache(n=4)], reader_config=SEQ)
    table = ds.get_metadata()
    with pytest.raises(ValueError, match="reserved"):
        ds.update_metadata(_table_with(table, name, pa.array(np.arange(4))))
    assert [s.data for s in ds] == [payload(i) for i in range(4)]  # iteration still works


def test_internal_and_reserved_metadata_keys_are_refused_at_write(runtime, tmp_path):
    class Keys:
        def __init__(self, key: str) -> None:
            self.name, self.key = f"k{abs(hash(key)) % 1000}", key

        def __iter__(self):
            yield drt.CacheInput(b"x", {self.key: 1})

    for key in ("__cache_pos", "weight", "cache_id", "sample_id"):
        with pytest.raises(drt.CacheSourcesError) as info:
            runtime.write_cache([Keys(key)], tmp_path, writer_config=QUIET)
        (res,) = info.value.results
        assert isinstance(res, drt.CacheWriteError) and "reserved" in res.message, res


def test_a_table_without_weight_is_refused(runtime, make_cache):
    ds = runtime.cached_dataset([make_cache(n=4)], reader_config=SEQ)
    with pytest.raises(ValueError, match="column 'weight' is missing"):
        ds.update_metadata(ds.get_metadata().drop_columns(["weight"]))


def test_cache_ids_of_64_bits_round_trip_through_update_metadata(runtime, tmp_path):
    (res,) = runtime.write_cache([ListSource("a", 5)], tmp_path, writer_config=QUIET)
    manifest = json.loads((res.path / "manifest.json").read_text())
    manifest["cache_id"] = 2**64 - 1  # ids are read up to 2**64 - 1 (dataset-rt caches may hold any u64)
    (res.path / "manifest.json").write_text(json.dumps(manifest))
    ds = runtime.cached_dataset([res.path], reader_config=SEQ)
    assert ds.layouts[0].cache_id == 2**64 - 1
    ds.update_metadata(ds.get_metadata())
    ds.update_metadata(ds.get_metadata().slice(1, 3))
    assert [s.cache_id for s in ds] == [ds.layouts[0].cache_id] * 3
    assert ds.get_item(ds.layouts[0].cache_id, 4).data == payload(4)


def test_get_item_types_and_unknown_ids(runtime, make_cache):
    ds = runtime.cached_dataset([make_cache(n=4)], reader_config=SEQ)
    cache_id = ds.layouts[0].cache_id
    assert ds.get_item(np.uint64(cache_id), np.int64(2)).data == payload(2)
    for bad in (False, 1.0, "1", None):
        with pytest.raises(TypeError, match="must be an int"):
            ds.get_item(bad, 0)
        with pytest.raises(TypeError, match="must be an int"):
            ds.get_item(cache_id, bad)
    for unknown in (cache_id ^ 1, -1, 2**64):
        with pytest.raises(IndexError):
            ds.get_item(unknown, 0)
    with pytest.raises(IndexError, match="out of range"):
        ds.get_item(cache_id, -1)


HUGE = [1e308, 1e308, 1e308, 1.0]


def test_weights_whose_sum_overflows_draw_in_proportion():
    counts = np.bincount(WeightedDraws(np.array(HUGE), seed=1).draws(0, 30_000), minlength=4)
    assert counts[3] == 0 and all(abs(c - 10_000) < 600 for c in counts[:3]), counts


def test_huge_table_weights_draw_in_proportion(runtime, make_cache):
    ds = runtime.cached_dataset([make_cache(n=4)], reader_config=drt.ReaderConfig(seed=3, sampling="weighted"))
    table = ds.get_metadata()
    ds.update_metadata(table.set_column(table.column_names.index("weight"), "weight", pa.array(HUGE)))
    assert ds.get_metadata().column("weight").to_pylist() == HUGE  # the user's weights, as given
    ds.set_epoch_len(30_000)
    counts = np.bincount([s.sample_id for s in ds], minlength=4)
    assert counts[3] == 0 and all(abs(c - 10_000) < 600 for c in counts[:3]), counts


def test_rows_outside_the_active_table_are_index_errors(runtime, make_cache):
    from torchdata.nodes import IterableWrapper, Loader

    from torch_drt.nodes import CacheReaderNode

    ds = runtime.cached_dataset([make_cache(n=4)], reader_config=SEQ)
    for rows in ([4], [-1], [0, 9]):
        with pytest.raises(IndexError, match="out of range for the active metadata table"):
            ds.read_rows(np.array(rows))
    with pytest.raises(IndexError, match="row 7 is out of range"):
        list(Loader(CacheReaderNode(IterableWrapper([1, 7]), ds)))
