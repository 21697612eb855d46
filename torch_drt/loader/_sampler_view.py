"""What ``loader.sampler`` is: the user's sampler, else torch's kind of sampler describing the loader's order.

torch's ``DataLoader.sampler`` is the user's sampler, else a ``SequentialSampler`` or a ``RandomSampler``; Lightning
and Fabric read it to decide whether to inject a ``DistributedSampler`` (they do unless it already is one) and
call its ``set_epoch``. A torch_drt loader answers the same way:

- a user ``sampler`` is returned as given (``set_epoch`` reaches it);
- without one and without torch_drt's own rank split, a ``SequentialSampler`` or a ``RandomSampler``
  (``LoaderPermutation``, iterating the loader's keyed permutation), so Lightning shards it as it shards torch's;
- with torch_drt's own rank split (``split_by_rank``, ``rank``/``world_size``), and for streams and nodes that
  shard themselves, a ``DistributedSampler`` view (``LoaderShards``) that Lightning leaves alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler

if TYPE_CHECKING:
    from torch_drt.loader.base import PipelineLoader


def sampler_view(loader: Any, own_split: bool) -> Any:
    """What ``loader.sampler`` is without a user sampler: a ``LoaderShards`` when the loader splits by rank itself
    (``own_split``), else torch's ``RandomSampler`` kind when shuffled, else a ``SequentialSampler`` (also with a
    user ``batch_sampler``, as in torch)."""
    if own_split:
        return LoaderShards(loader)
    return LoaderPermutation(loader) if loader.shuffle else SequentialSampler(loader.dataset)


class LoaderShards(DistributedSampler):
    """What a torch_drt loader shards by, in ``DistributedSampler``'s terms.

    Lightning (``use_distributed_sampler=True``) and Fabric (``setup_dataloaders``) replace a loader's sampler
    with a ``DistributedSampler`` unless it already is one; a loader that splits by rank itself reports its
    sharding this way and is left alone. ``set_epoch`` is a no-op: the loader counts its own epochs (and
    restores them from checkpoints). Iterating it gives this rank's indices of the current epoch where the
    loader can tell them (map-style datasets).
    """

    def __init__(self, loader: PipelineLoader) -> None:  # DistributedSampler.__init__ would query the group
        self._loader = loader
        self.dataset = loader.dataset
        self.num_replicas, self.rank = loader.world_size, loader.rank
        # torch types DistributedSampler.seed int; PipelineLoader's is None until a subclass sets it (all do)
        self.shuffle, self.seed, self.drop_last = bool(loader.shuffle), loader.seed, loader.drop_last  # type: ignore[assignment]
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


class LoaderPermutation(RandomSampler):
    """A shuffled loader's order as torch's ``RandomSampler`` (what ``loader.sampler`` is in torch when
    ``shuffle=True``): iterating it gives the indices of the loader's current epoch, its keyed permutation.

    Lightning reads ``isinstance(loader.sampler, RandomSampler)`` as "shuffled" and, under DDP, rebuilds the
    loader with ``DistributedSampler(shuffle=True)``, as it does torch's.
    """

    def __init__(self, loader: Any) -> None:  # RandomSampler.__init__ would check num_samples and a generator
        self._loader = loader
        self.data_source = loader.dataset
        self.replacement, self._num_samples, self.generator = False, None, loader.generator

    @property
    def num_samples(self) -> int:
        return len(self.data_source)

    def __iter__(self) -> Iterator[int]:
        return iter(self._loader._mode.epoch_indices(self._loader._position.epoch))

    def __len__(self) -> int:
        return self.num_samples
