"""dataset-rt's ``CachedDataset.to_torch_iterable_dataset``: the dataset as a sized torch ``IterableDataset`` (no
workers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from torch.utils.data import IterableDataset, get_worker_info

from torch_drt.cache.records import CachedSample

if TYPE_CHECKING:
    from torch_drt.cache.dataset import CachedDataset


@runtime_checkable
class SizedTorchIterableDataset(Protocol):
    """What ``CachedDataset.to_torch_iterable_dataset`` returns: a sized torch ``IterableDataset``."""

    def __iter__(self) -> Iterator[CachedSample]: ...

    def __len__(self) -> int: ...


class CachedIterableDataset(IterableDataset):
    """Iterates its ``CachedDataset`` (the same samples in the same order) in the calling process only.

    Use it with a torch ``DataLoader`` with ``num_workers=0``; a loading worker gets ``RuntimeError``, as in
    dataset-rt. ``CachedDataset.to_torch_dataloader`` is the multiprocessing loader.

    Args:
        dataset: the dataset; ``len()`` is its current epoch length.
    """

    def __init__(self, dataset: CachedDataset) -> None:
        self.dataset = dataset

    def __iter__(self) -> Iterator[CachedSample]:
        if get_worker_info() is not None:
            raise RuntimeError(
                "Use Dataloader with num workers = 0. Use DatasetRuntime(num_workers=N) for parallel cache reads "
                "(or CachedDataset.to_torch_dataloader for loading processes)."
            )
        return iter(self.dataset)

    def __len__(self) -> int:
        return len(self.dataset)
