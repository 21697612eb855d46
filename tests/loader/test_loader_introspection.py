"""Issue 12 item 7: readable reprs (datasets, loaders, nodes, the datamodule) and logging under ``torch_drt``,
silent by default."""

from __future__ import annotations

import logging
import textwrap

import numpy as np
import pytest
from conftest import QUIET, ListSource
from script_runner import run_script
from torchdata.nodes import IterableWrapper

import torch_drt as drt
from torch_drt import StatefulDataLoader
from torch_drt.nodes import CacheReaderNode, CacheSampler, ItemBatcher, OrderedMapper, WeightedMixer


def test_a_cached_sample_shows_its_payloads_size_not_its_bytes():
    sample = drt.CachedSample(b"\xff" * 10_000, {"label": 3}, 1, 7)
    assert repr(sample) == "CachedSample(data=<10000 bytes>, metadata={'label': 3}, cache_id=1, sample_id=7)"


def test_loader_reprs_name_their_settings():
    loader = StatefulDataLoader(list(range(1000)), batch_size=4, shuffle=True, seed=1, num_workers=2,
                                transform=lambda x: x, worker_method="thread")
    assert repr(loader) == ("StatefulDataLoader(list[1000], batch_size=4, shuffle=True, seed=1, num_workers=2, "
                            "worker_method='thread', transform=<lambda>, epoch=0)")
    list(loader)
    assert repr(loader).endswith("epoch=1)")
    ranked = StatefulDataLoader(list(range(10)), seed=0, rank=1, world_size=2, collate_fn=list)
    assert repr(ranked) == "StatefulDataLoader(list[10], batch_size=1, seed=0, num_workers=0, collate_fn=list, " \
                           "rank=1, world_size=2, epoch=0)"


def test_node_reprs(tmp_path):
    rt = drt.DatasetRuntime(num_workers=1)
    (result,) = rt.write_cache(ListSource("src", 12), tmp_path, writer_config=QUIET)
    dataset = rt.cached_dataset([result.path], reader_config=drt.ReaderConfig(seed=5, shuffle=True))
    assert repr(dataset) == f"CachedDataset(['{result.path}'], rows=12, epoch_len=12, shuffle=True, seed=5)"
    batch = dataset.read_rows(np.array([0, 1]))
    nbytes = sum(map(len, batch.data))
    assert repr(batch) == f"CachedBatch(2 samples, {nbytes} bytes, metadata=['flag', 'label', 'score', 'tag'])"
    sampler = CacheSampler(dataset, rank=0, world_size=1)
    assert repr(sampler) == "CacheSampler(rows=12, shuffle=True, seed=5, rank=0, world_size=1, num_samples=12)"
    reader = CacheReaderNode(sampler, dataset)
    assert repr(reader).startswith("CacheReaderNode(CacheSampler(rows=12")
    batcher = ItemBatcher(IterableWrapper(range(3)), 2)
    assert repr(batcher).startswith("ItemBatcher(<torchdata.nodes") and repr(batcher).endswith(
        "batch_size=2, drop_last=False)")
    mapper = OrderedMapper(batcher, len, num_workers=2)
    assert repr(mapper).startswith("OrderedMapper(ItemBatcher(") and "len, num_workers=2, method='thread'" in repr(
        mapper)
    mixer = WeightedMixer({"a": IterableWrapper(range(2)), "b": IterableWrapper(range(2))}, {"a": 1, "b": 3}, seed=2)
    assert repr(mixer).startswith("WeightedMixer({'a': 1.0, 'b': 3.0}, seed=2")
    rt.close()


def test_the_datamodule_repr(tmp_path):
    pytest.importorskip("lightning")
    from torch_drt.lightning import CacheDataModule

    module = CacheDataModule([tmp_path / "a"], batch_size=8, collate_fn=list)
    text = repr(module)
    assert text.startswith(f"CacheDataModule(['{tmp_path / 'a'}'], batch_size=8") and "collate_fn=list" in text


def test_workers_and_caches_log_under_torch_drt(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="torch_drt")
    rt = drt.DatasetRuntime(num_workers=1)
    (result,) = rt.write_cache(ListSource("src", 4), tmp_path, writer_config=QUIET)
    rt.cached_dataset([result.path], reader_config=drt.ReaderConfig(seed=0))
    loader = StatefulDataLoader(list(range(6)), batch_size=2, num_workers=2, worker_method="process",
                                multiprocessing_context="fork")
    list(loader)
    rt.close()
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    assert ("torch_drt.publish", f"published {result.path}") in messages
    assert any(n == "torch_drt.cache" and m.startswith("opened 1 caches (4 rows)") for n, m in messages)
    assert any(n == "torch_drt.loader" and m.startswith("started loader worker process 0") for n, m in messages)
    assert any(n == "torch_drt.loader" and m == "stopped 2 loader worker processes" for n, m in messages)


def test_logging_is_silent_by_default():
    proc = run_script(textwrap.dedent("""
        import logging
        from torch_drt import StatefulDataLoader
        logging.getLogger("torch_drt.loader").warning("a warning nobody configured")
        loader = StatefulDataLoader(list(range(6)), batch_size=2, num_workers=2)
        print(sum(len(b) for b in loader))
    """))
    assert proc.returncode == 0 and proc.stdout.strip() == "6"
    assert proc.stderr == ""
