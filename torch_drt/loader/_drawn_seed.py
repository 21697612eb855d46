"""DrawnSeedLoader: a loader's seed, unless given, taken at the first ``iter()`` as torch takes its order there."""

from __future__ import annotations

import warnings
from typing import Any

from torch_drt.loader._split_loader import SplitLoader
from torch_drt.loader._torch_draws import draw_at_iter, loader_seed
from torch_drt.sampling.topology import rank_zeros


class DrawnSeedLoader(SplitLoader):
    """The seed's life in ``StatefulDataLoader``: provisional when built (``peek_seed``), fixed at the first
    ``iter()`` from torch's draw (``_torch_draws``) or by the first ``state_dict()``, agreed with rank zero where
    it decides how ranks split the data, and taken from a loaded checkpoint otherwise.
    """

    def __iter__(self) -> Any:
        first = not self.__dict__.get("_iterated", False)
        drawn = draw_at_iter(self, first)  # torch's draws (the script's next ones)
        self.__dict__["_iterated"] = True
        if first:
            self._commit_seed(self.seed if drawn is None else loader_seed(drawn))
            self._agree_seed()
        return super().__iter__()

    def _agree_seed(self) -> None:
        """A drawn seed that decides how ranks split the data becomes rank zero's on every rank of the group (each
        rank's generator may differ: ``torch.manual_seed(base + rank)``); where the ranks cannot be asked, a warning
        says that their generators must agree."""
        if self._seed_given or self._pending_state is not None or not (self.shuffle and self._split.enabled):
            return
        self._refresh()  # the topology now (the group may exist since the loader was built)
        if self.world_size == 1:
            return
        agreed = rank_zeros(self.seed, self._topology)
        if agreed is None:
            warnings.warn(
                f"shuffle=True split over {self.world_size} ranks without seed=: each rank draws the loader's seed "
                "from its own torch generator, and the ranks' shares overlap unless every generator is in the same "
                "state at the first iter(). Give seed= (as DistributedSampler's seed) to be sure.", stacklevel=3)
        elif agreed != self.seed:
            self._set_seed(agreed)

    def state_dict(self) -> dict[str, Any]:
        self._commit_seed(self.seed)  # a checkpoint records the seed the loader then keeps
        return super().state_dict()

    def _commit_seed(self, seed: int) -> None:
        """Fix the loader's seed once, to ``seed`` (the first ``iter()``'s draw, as torch takes a shuffled order at
        ``iter()``), unless it was given, comes from a loaded checkpoint, or was fixed already (by ``state_dict``)."""
        if self.__dict__.get("_seed_committed"):
            return
        self.__dict__["_seed_committed"] = True
        if not (self._seed_given or self._pending_state is not None or seed == self.seed):
            self._set_seed(seed)

    def _set_seed(self, seed: int) -> None:
        """Make the pipeline again for ``seed`` (before the first epoch starts)."""
        self.__dict__.pop("_mode").close()
        self._seed = self.__dict__["seed"] = seed  # (``seed`` reads the mode's while there is one)
        self._mode = self._build_mode()
        self.__dict__.pop("_sampler_view", None)

    @property
    def seed(self) -> int:
        """The loader's seed: the one given or drawn, or a checkpoint's once a loader with a drawn seed adopted it
        (the mode owns it from construction on: shuffle order, item generators and worker seeds follow it)."""
        mode = self.__dict__.get("_mode")
        return getattr(mode, "seed", self._seed) if mode is not None else self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = value
