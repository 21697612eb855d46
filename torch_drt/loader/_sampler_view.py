"""A loader's sharding described as a ``DistributedSampler``, so Lightning and Fabric keep the loader as it is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from torch.utils.data import DistributedSampler

if TYPE_CHECKING:
    from torch_drt.loader.base import PipelineLoader

__all__ = ["LoaderShards"]


class LoaderShards(DistributedSampler):
    """What a torch_drt loader shards by, in ``DistributedSampler``'s terms (its ``loader.sampler``).

    Lightning (``use_distributed_sampler=True``) and Fabric (``setup_dataloaders``) replace a loader's sampler
    with a ``DistributedSampler`` unless it already is one; a torch_drt loader shards by itself (rank and world
    size from the process group), so it reports its sharding this way and is left alone. ``set_epoch`` is a
    no-op: the loader counts its own epochs (and restores them from checkpoints). Iterating it gives this rank's
    indices of the current epoch where the loader can tell them (map-style datasets).
    """

    def __init__(self, loader: PipelineLoader) -> None:  # DistributedSampler.__init__ would query the group
        self._loader = loader
        self.dataset = loader.dataset
        self.num_replicas, self.rank = loader.world_size, loader.rank
        self.shuffle, self.seed, self.drop_last = bool(loader.shuffle), loader.seed, loader.drop_last
        self.epoch = loader._position.epoch

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """Items per epoch on this rank."""
        return self._loader._mode.items_per_epoch()

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Items per epoch over all ranks (padding included)."""
        return self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        return iter(self._loader._mode.epoch_indices(self.epoch))

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Ignored: the loader counts its own epochs."""
