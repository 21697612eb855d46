"""SplitLoader: a pipeline loader whose rank split is resolved at each ``iter()`` and whose samplers are torch's.

torch's ``DataLoader`` never splits by rank, exposes the user's ``sampler`` / ``batch_sampler`` (or its own
``SequentialSampler`` / ``RandomSampler`` / ``BatchSampler``), and knows nothing of process groups. A torch_drt
loader splits by rank only when asked (``RankSplit``), and then over the process group as it is when an epoch
starts (a loader built before ``init_process_group`` splits once the group exists): the pipeline is rebuilt
when the topology changed between epochs, and the delivered position, a global one, carries over.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import BatchSampler

from torch_drt.loader._batch_sampler_mode import BatchSamplerMode
from torch_drt.loader._map_mode import MapMode
from torch_drt.loader._sampler_view import sampler_view
from torch_drt.loader.base import LoaderMode, PipelineLoader
from torch_drt.sampling.topology import RankSplit


class SplitLoader(PipelineLoader):
    """The torch-facing rank split and samplers of ``StatefulDataLoader`` (see the module docstring).

    Subclasses set ``_split`` (a ``RankSplit``), ``_topology`` (its first resolution), ``_user_sampler``,
    ``_batch_sampler``, ``_seed`` and ``_seed_given``, and implement ``_build_mode`` (the pipeline for
    ``_topology``).
    """

    _split: RankSplit
    _topology: tuple[int, int]
    seed: int  # a subclass's seed is the one given or drawn (never None)
    _seed: int
    _user_sampler: Any = None
    _batch_sampler: Any = None
    _seed_given: bool = False
    _pending_state: Any = None  # a loaded checkpoint not started yet: parsed again if the pipeline is rebuilt

    def _build_mode(self) -> LoaderMode:
        raise NotImplementedError

    @property
    def rank(self) -> int:  # type: ignore[override]
        """This rank in the loader's own split (0 when it does not split by rank)."""
        return self._topology[0]

    @property
    def world_size(self) -> int:  # type: ignore[override]
        """Ranks of the loader's own split (1 when it does not split by rank)."""
        return self._topology[1]

    def _refresh(self) -> None:
        """Resolve the rank split again (``split_by_rank``: the process group may exist now); when it changed
        and no epoch is running, rebuild the pipeline for it (the delivered position is global: it carries)."""
        topology = self._split.resolve()
        if topology == self._topology or self._position.active:
            return
        self._mode.close()
        self._seed, self._topology = self.seed, topology
        self._mode = self._build_mode()
        self.__dict__.pop("_sampler_view", None)
        if self._pending_state is not None:  # a loaded checkpoint not started: checked against the new topology
            self._position.load(*self._mode.parse_state(self._pending_state))

    @property
    def sampler(self) -> Any:  # type: ignore[override]
        """The user's sampler, as given; else torch's kind: a ``SequentialSampler``, a ``RandomSampler`` over the
        loader's permutation, or, where the loader splits by rank itself (or reads a stream or node that does),
        a ``DistributedSampler`` view that Lightning and Fabric leave alone."""
        if self._user_sampler is not None:
            return self._user_sampler
        self._refresh()
        if self._split.enabled or not isinstance(self._mode, MapMode | BatchSamplerMode):
            return sampler_view(self, own_split=True)  # a view of the live position: made at each access
        if "_sampler_view" not in self.__dict__:
            self.__dict__["_sampler_view"] = sampler_view(self, own_split=False)
        return self.__dict__["_sampler_view"]

    @property
    def batch_sampler(self) -> Any:  # type: ignore[override]
        """The user's batch sampler, as given; else torch's ``BatchSampler`` over ``sampler`` (None without
        batching, or for streams and nodes)."""
        if self._batch_sampler is not None or self.batch_size is None or not isinstance(self._mode, MapMode):
            return self._batch_sampler
        return BatchSampler(self.sampler, self.batch_size, self.drop_last)

    @batch_sampler.setter
    def batch_sampler(self, value: Any) -> None:
        self._batch_sampler = value

    def __len__(self) -> int:
        self._refresh()
        return super().__len__()

    def state_dict(self) -> dict[str, Any]:
        self._refresh()
        return super().state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        self._refresh()
        super().load_state_dict(state_dict)
        self._pending_state = state_dict

    def __iter__(self) -> Any:
        self._refresh()
        iterator = super().__iter__()
        self._pending_state = None
        return iterator
