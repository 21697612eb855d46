"""WeightedMixer: a weighted mix of several sources, each sharded across ranks, with per-rank streams."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from torch_drt._state_fields import MAX_EPOCH, StateFields, check_node_state
from torch_drt.describe import described
from torch_drt.sampling import derive_key, uniform
from torch_drt.sampling.stride import owns
from torch_drt.sampling.topology import resolve_topology

CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED = "CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED"
ALL_DATASETS_EXHAUSTED = "ALL_DATASETS_EXHAUSTED"
FIRST_DATASET_EXHAUSTED = "FIRST_DATASET_EXHAUSTED"
CYCLE_FOREVER = "CYCLE_FOREVER"
_CRITERIA = (CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED, ALL_DATASETS_EXHAUSTED, FIRST_DATASET_EXHAUSTED, CYCLE_FOREVER)


class WeightedMixer(BaseNode[Any]):
    """Draws the next item from source ``k`` with probability ``weights[k] / sum(weights)``.

    Unlike torchdata's ``MultiNodeWeightedSampler``, each source is sharded across ranks: rank r of W keeps
    the items r, r+W, r+2W, ... of every source (each source item reaches exactly one rank), and the choice
    stream is keyed by (seed, rank, world_size, epoch), so distinct ranks, seeds or world sizes get distinct
    streams. Choice k is a pure function of those and k, so the state is the draw count, the sources' states,
    how many items each source has produced, which sources are exhausted, and the rank and world size: a state
    resumes only on the rank and world size it was taken on (elsewhere its items would be others, so it is
    refused; a state from before they were saved is taken as it is). ``torch_drt.lm.MixerNode`` plans one global
    stream instead and resumes under any world size.

    Args:
        source: name -> node.
        weights: name -> positive weight (same names).
        seed: the stream seed.
        stop_criteria: torchdata's names: ``CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED`` (default),
            ``ALL_DATASETS_EXHAUSTED``, ``FIRST_DATASET_EXHAUSTED`` or ``CYCLE_FOREVER``.
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
    """

    DRAWS_KEY = "draws"
    EPOCH_KEY = "epoch"
    SOURCES_KEY = "source_states"
    PULLED_KEY = "pulled"
    EXHAUSTED_KEY = "exhausted"
    RANK_KEY = "rank"
    WORLD_SIZE_KEY = "world_size"
    _CHUNK = 1024

    def __init__(
        self,
        source: Mapping[str, BaseNode],
        weights: Mapping[str, float],
        *,
        seed: int = 0,
        stop_criteria: str = CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        if set(source) != set(weights) or not source:
            raise ValueError(f"source names {sorted(source)} and weight names {sorted(weights)} must match")
        bad = {k: w for k, w in weights.items() if not (isinstance(w, int | float) and np.isfinite(w) and w > 0)}
        if bad:
            raise ValueError(f"weights must be finite and > 0, got {bad}")
        if stop_criteria not in _CRITERIA:
            raise ValueError(f"{stop_criteria=} must be one of {_CRITERIA}")
        self.names = sorted(source)
        self.sources = dict(source)
        self.weights = np.array([float(weights[k]) for k in self.names])
        self.seed = seed
        self.stop_criteria = stop_criteria
        self.rank, self.world_size = resolve_topology(rank, world_size)
        self._cum = np.cumsum(self.weights) / self.weights.sum()
        self._epoch = 0
        self._started = False
        self._draws = 0
        self._pulled = dict.fromkeys(self.names, 0)
        self._exhausted = dict.fromkeys(self.names, False)
        self._choices = np.empty(0, dtype=np.int64)
        self._choices_start = 0

    def __repr__(self) -> str:
        weights = dict(zip(self.names, self.weights.tolist()))
        return described(self, weights, seed=self.seed, stop_criteria=self.stop_criteria)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self.check_state(initial_state)
            self._epoch = initial_state[self.EPOCH_KEY]
            self._draws = initial_state[self.DRAWS_KEY]
            self._pulled = dict(initial_state[self.PULLED_KEY])
            self._exhausted = dict(initial_state[self.EXHAUSTED_KEY])
            for name in self.names:
                self.sources[name].reset(initial_state[self.SOURCES_KEY][name])
        else:
            if self._started:
                self._epoch += 1
            self._draws = 0
            self._pulled = dict.fromkeys(self.names, 0)
            self._exhausted = dict.fromkeys(self.names, False)
            for name in self.names:
                self.sources[name].reset()
        self._started = False
        self._choices, self._choices_start = np.empty(0, dtype=np.int64), self._draws

    def check_state(self, state: Any, path: str = "state") -> None:
        """Refuse a state that does not describe this mixer (other sources, negative counts), its sources' states
        included (where they can tell).

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        keys = (self.EPOCH_KEY, self.DRAWS_KEY, self.PULLED_KEY, self.EXHAUSTED_KEY, self.SOURCES_KEY)
        fields = StateFields(state, "WeightedMixer", path, keys)
        fields.int(self.EPOCH_KEY, high=MAX_EPOCH)
        fields.int(self.DRAWS_KEY)
        if self.RANK_KEY in fields or self.WORLD_SIZE_KEY in fields:  # saved since issue 25
            theirs = fields.int(self.RANK_KEY), fields.int(self.WORLD_SIZE_KEY, low=1)
            if theirs != (self.rank, self.world_size):
                raise ValueError(
                    f"invalid WeightedMixer {path}: it was taken on rank={theirs[0]}, world_size={theirs[1]}; this "
                    f"mixer is rank={self.rank}, world_size={self.world_size}: its streams are per rank (keyed by "
                    "rank and world size), so the state would resume on other items. Resume it on the same "
                    "topology, or mix with torch_drt.lm.MixerNode, whose one global stream resumes anywhere"
                )
        per_source = {}
        for key in (self.PULLED_KEY, self.EXHAUSTED_KEY, self.SOURCES_KEY):
            per_source[key] = child = fields.child(key)
            if sorted(map(str, child.state)) != self.names:
                raise fields.error(key, f"must have the sources {self.names}")
        sources = per_source[self.SOURCES_KEY]
        for name in self.names:
            per_source[self.PULLED_KEY].int(name)
            per_source[self.EXHAUSTED_KEY].bool(name)
            check_node_state(self.sources[name], sources.state[name], sources.where(name))

    def _choice(self) -> str:
        k = self._draws - self._choices_start
        if not 0 <= k < len(self._choices):
            key = derive_key(self.seed, self.rank, self.world_size, self._epoch)
            u = uniform(key, self._draws, self._CHUNK)
            self._choices = np.minimum(np.searchsorted(self._cum, u, side="right"), len(self.names) - 1)
            self._choices_start, k = self._draws, 0
        self._draws += 1
        return self.names[int(self._choices[k])]

    def _stop(self) -> bool:
        if self.stop_criteria == CYCLE_FOREVER:
            return False
        if all(self._exhausted.values()):
            return True
        return self.stop_criteria == FIRST_DATASET_EXHAUSTED and any(self._exhausted.values())

    def _pull(self, name: str) -> Any:
        """The next item of ``name`` that belongs to this rank (items of other ranks are skipped)."""
        node = self.sources[name]
        while True:
            item = next(node)
            index = self._pulled[name]
            self._pulled[name] = index + 1
            if owns(index, rank=self.rank, world_size=self.world_size):
                return item

    def next(self) -> Any:
        self._started = True
        while True:
            if self._stop():
                raise StopIteration
            name = self._choice()
            if self._exhausted[name] and self.stop_criteria == ALL_DATASETS_EXHAUSTED:
                continue
            try:
                return self._pull(name)
            except StopIteration:
                self._exhausted[name] = True
                if self._stop() or self.stop_criteria == ALL_DATASETS_EXHAUSTED:
                    continue
                self.sources[name].reset()  # cycle this source until the criteria says stop
                self._pulled[name] = 0
                try:
                    return self._pull(name)
                except StopIteration:  # a source with no item for this rank at all
                    continue

    def get_state(self) -> dict[str, Any]:
        return {
            self.EPOCH_KEY: self._epoch,
            self.DRAWS_KEY: self._draws,
            self.PULLED_KEY: dict(self._pulled),
            self.EXHAUSTED_KEY: dict(self._exhausted),
            self.SOURCES_KEY: {name: self.sources[name].state_dict() for name in self.names},
            self.RANK_KEY: self.rank,
            self.WORLD_SIZE_KEY: self.world_size,
        }
