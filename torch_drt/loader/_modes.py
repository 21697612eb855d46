"""Which mode a StatefulDataLoader's dataset gets, built in one place for the loader's current topology."""

from __future__ import annotations

from typing import Any

from torchdata.nodes import BaseNode

from torch_drt.loader._arguments import check_not_empty, is_iterable_dataset
from torch_drt.loader._batch_sampler_mode import BatchSamplerMode
from torch_drt.loader._iterable_mode import WorkerStreamsMode
from torch_drt.loader._map_mode import MapMode
from torch_drt.loader._node_mode import NodeMode
from torch_drt.loader.base import LoaderMode
from torch_drt.nodes.iterable_source import IterableSource


def build_mode(loader: Any) -> LoaderMode:
    """The pipeline of ``loader`` for its current topology: node mode for a torchdata node, worker streams or one
    stream for an IterableDataset, batch-sampler mode, else map-style mode. The modes read ``batch_size`` 1 when
    the loader does not batch or a ``batch_sampler`` does.

    Raises:
        ValueError: when ``drop_last`` leaves the loader's own split by rank without a batch.
    """
    dataset, batch_size = loader.dataset, loader.batch_size
    streams = isinstance(dataset, BaseNode) or is_iterable_dataset(dataset)
    check_not_empty(dataset, batch_size, loader.drop_last, loader._user_sampler, loader._batch_sampler, streams,
                    loader._topology, loader.split_by_rank)
    loader.batch_size = 1 if batch_size is None else batch_size
    try:
        if isinstance(dataset, BaseNode):
            return NodeMode(loader, dataset)
        every = loader.snapshot_every_n_steps * loader.batch_size
        if streams:
            if loader.worker_method == "process" and loader.num_workers > 0:
                return WorkerStreamsMode(loader, every)
            return NodeMode(loader, IterableSource(dataset, every), stride=loader.world_size, offset=loader.rank)
        if loader._batch_sampler is not None:
            return BatchSamplerMode(loader, loader._batch_sampler)
        return MapMode(loader, loader._user_sampler, loader._seed_given)
    finally:
        loader.batch_size = batch_size
