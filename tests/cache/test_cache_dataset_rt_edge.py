"""What exists only to be dataset-rt 0.4.8 lives in ``torch_drt.compat.dataset_rt``; torch_drt's own
``CachedDataset`` has none of it (issue 25, "dataset-rt at the edge")."""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pytest
from conftest import QUIET, ListSource

import torch_drt as drt
import torch_drt.compat.dataset_rt as compat

SEQ = drt.ReaderConfig(seed=0, shuffle=False)

# dataset-rt's names that torch_drt's CachedDataset had only through its interop mixin
DATASET_RT_ONLY = (
    "dump_config",
    "from_config",
    "metadata_backend",
    "runtime_num_workers",
    "samples_metadata",
    "set_samples_metadata",
    "to_torch_iterable_dataset",
    "update_manifests",
)


def test_torch_drts_dataset_has_none_of_dataset_rts_own_names():
    for name in DATASET_RT_ONLY:
        assert not hasattr(drt.CachedDataset, name), name
    for name in DATASET_RT_ONLY[:2] + DATASET_RT_ONLY[3:]:
        assert hasattr(compat.CachedDataset, name), name
    assert issubclass(compat.CachedDataset, drt.CachedDataset)
    assert all(c.__module__.startswith("torch_drt.cache.") for c in drt.CachedDataset.__mro__[:-1])
    assert "SizedTorchIterableDataset" not in drt.__all__ and "SizedTorchIterableDataset" not in drt.cache.__all__
    assert "SizedTorchIterableDataset" in compat.__all__


@pytest.mark.parametrize("module", ["_interop", "export", "torch_iterable"])
def test_the_cache_package_holds_no_dataset_rt_only_module(module):
    assert importlib.util.find_spec(f"torch_drt.cache.{module}") is None
    assert importlib.util.find_spec("torch_drt.compat.dataset_rt.export") is not None


@pytest.fixture
def cache(runtime, tmp_path):
    (result,) = runtime.write_cache(ListSource("a", 12), tmp_path / "caches", writer_config=QUIET)
    return result.path


def test_torch_drts_work_dir_keeps_the_snapshot_only_and_compats_adds_dataset_rts_export(cache, tmp_path):
    ours = drt.DatasetRuntime(1).cached_dataset([cache], reader_config=SEQ)
    edge = compat.DatasetRuntime(1).cached_dataset([cache], reader_config=SEQ)
    for name, dataset, extra in (("ours", ours, {}), ("edge", edge, {"shuffle": False, "verbose": False})):
        root = tmp_path / name
        root.mkdir()
        loader = dataset.to_torch_dataloader(collate_fn=len, batch_size=4, num_workers=0, work_dir=root, **extra)
        assert sum(loader) == 12
    (sub,) = (tmp_path / "ours").iterdir()
    assert sorted(p.name for p in sub.iterdir()) == ["meta.arrow"]
    (sub,) = (tmp_path / "edge").iterdir()
    assert sorted(p.name for p in sub.iterdir()) == ["dataset.json", "meta.arrow", "metadata.arrow"]
    restored = compat.CachedDataset.from_config(sub / "dataset.json")
    assert type(restored) is compat.CachedDataset and restored.get_metadata().equals(edge.get_metadata())


def test_metadata_is_arrow_by_default_polars_on_request_and_another_backend_is_refused(cache):
    pl = pytest.importorskip("polars")
    ours = drt.DatasetRuntime(1).cached_dataset([cache], reader_config=SEQ)
    assert isinstance(ours.get_metadata(), pa.Table) and isinstance(ours.get_metadata(None), pa.Table)
    assert isinstance(ours.get_metadata("polars"), pl.DataFrame)
    with pytest.raises(ValueError, match="backend='pandas' must be 'arrow' or 'polars'"):
        ours.get_metadata("pandas")
    edge = compat.DatasetRuntime(1).cached_dataset([cache], reader_config=SEQ)
    assert isinstance(edge.get_metadata(), pl.DataFrame) and isinstance(edge.get_metadata("arrow"), pa.Table)
