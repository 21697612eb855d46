"""WeightedMixer: the one weighted mix of several sources, a global stream of seeded draws; this rank's share of it.

The mix's draws, position and checkpoint live here; ``torch_drt.lm.MixerNode`` is this mixer over packed-sequence
streams.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode
from torchdata.nodes.samplers.stop_criteria import StopCriteria

from torch_drt._state_fields import StateFields, check_node_state
from torch_drt.describe import described
from torch_drt.nodes._rank_share import RankShareNode
from torch_drt.sampling import WeightedDraws

CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED = StopCriteria.CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED
ALL_DATASETS_EXHAUSTED = StopCriteria.ALL_DATASETS_EXHAUSTED
FIRST_DATASET_EXHAUSTED = StopCriteria.FIRST_DATASET_EXHAUSTED
CYCLE_FOREVER = StopCriteria.CYCLE_FOREVER
_UNTIL_ALL = (CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED, ALL_DATASETS_EXHAUSTED)  # the criteria that read the flags


def _check_weights(names: list[str], weights: Mapping[str, float]) -> np.ndarray:
    if sorted(map(str, weights)) != names:
        raise ValueError(f"weight names {sorted(map(str, weights))} must be the source names {names} (they must match)")
    bad = {k: w for k, w in weights.items() if not (isinstance(w, numbers.Real) and np.isfinite(w) and w > 0)}
    if bad:
        raise ValueError(f"weights must be finite and > 0, got {bad}")
    return np.array([float(weights[k]) for k in names])


class WeightedMixer(RankShareNode[Any]):
    """Position p of the mix is the next item of source k, drawn with probability ``weights[k] / sum(weights)`` as a
    pure function of (``seed``, epoch, p): draw p of ``sampling.WeightedDraws(weights, seed, stream=epoch)``.

    torchdata's ``MultiNodeWeightedSampler`` with the same stop criteria, as one global stream that does not depend on
    the topology: rank r of W takes the positions r, r+W, r+2W, ... (``RankShareNode``'s rule). Every rank draws
    every position and pulls each source in order, passing over the items of the other ranks' positions (a
    torch_drt source with ``skip()``, such as ``PackerNode``, passes without reading), so each source item reaches
    exactly one rank. Give every rank the same sources, not sources split by rank.

    A checkpoint is the epoch, the global position, the draw count, which sources are exhausted in this epoch (read
    by the ``*_EXHAUSTED`` criteria but the first), the weights in force (for reporting: the node's own weights
    apply, see ``set_weights``) and each source's state. After the same number of items it is the same on every
    rank, and it resumes the global stream exactly under any rank and world size.

    Args:
        source: name -> node.
        weights: name -> positive weight (same names).
        seed: seed of the draws.
        stop_criteria: torchdata's names: ``CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED`` (default),
            ``ALL_DATASETS_EXHAUSTED``, ``FIRST_DATASET_EXHAUSTED`` or ``CYCLE_FOREVER`` (a source at its end
            starts its next epoch; one with no item in a whole epoch is a ``ValueError``).
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
    """

    DRAWS_KEY = "draws"
    EXHAUSTED_KEY = "exhausted"
    SOURCES_KEY = "sources"
    WEIGHTS_KEY = "weights"
    STOP_CRITERIA: tuple[str, ...] = (
        CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED, ALL_DATASETS_EXHAUSTED, FIRST_DATASET_EXHAUSTED, CYCLE_FOREVER
    )
    _PER_RANK_KEYS = ("pulled", "source_states")  # the per-rank format, written before the mixers became one
    _CHUNK = 4096

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
        if not source:
            raise ValueError("a mixer needs at least one source")
        if stop_criteria not in self.STOP_CRITERIA:
            raise ValueError(f"{stop_criteria=} must be one of {self.STOP_CRITERIA}")
        super().__init__(rank, world_size)
        self.names = sorted(source)
        self.sources = dict(source)
        self.seed, self.stop_criteria = seed, stop_criteria
        self._weights = _check_weights(self.names, weights)
        self._draws = 0
        self._exhausted = dict.fromkeys(self.names, False)
        self._choices, self._choices_start = np.empty(0, dtype=np.int64), 0

    @property
    def weights(self) -> dict[str, float]:
        """The weights in force."""
        return dict(zip(self.names, self._weights.tolist()))

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Use ``weights`` from the next position on; for a reproducible change, call it before ``reset``."""
        self._weights = _check_weights(self.names, weights)
        self._choices = np.empty(0, dtype=np.int64)

    def __repr__(self) -> str:
        return described(self, self.weights, seed=self.seed, stop_criteria=self.stop_criteria, rank=self.rank,
                         world_size=self.world_size)

    def check_state(self, state: Any, path: str = "state") -> None:
        """Refuse a state that is not this mixer's (other sources, wrong types), its sources' states included (where
        they can tell), and a per-rank state written before the mixers became one.

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        if isinstance(state, Mapping) and self.STREAM_KEY not in state:
            for key in self._PER_RANK_KEYS:
                if key in state:
                    raise StateFields(state, type(self).__name__, path).error(
                        key, "is a per-rank WeightedMixer state, written before the mixers became one global stream "
                        "(its draws were keyed by rank and world size): it cannot resume the global stream; start "
                        "the epoch anew (reset() without a state)")
        super().check_state(state, path)

    def _check_stream(self, fields: StateFields) -> None:
        fields.int(self.DRAWS_KEY)
        sources = fields.child(self.SOURCES_KEY)
        if sorted(map(str, sources.state)) != self.names:
            raise fields.error(self.SOURCES_KEY, f"is not this mixer's: the checkpoint mixes "
                                                 f"{sorted(map(str, sources.state))}, this mixer {self.names}")
        # MixerNode's states before one mixer have no flags: they load where the stop criteria never reads them
        if self.EXHAUSTED_KEY in fields or self.stop_criteria in _UNTIL_ALL:
            exhausted = fields.child(self.EXHAUSTED_KEY)
            if sorted(map(str, exhausted.state)) != self.names:
                raise fields.error(self.EXHAUSTED_KEY, f"must have the sources {self.names}")
            for name in self.names:
                exhausted.bool(name)
        for name in self.names:
            check_node_state(self.sources[name], sources.state[name], sources.where(name))

    def _restart(self, epoch: int, state: dict[str, Any] | None) -> None:
        for name in self.names:
            self.sources[name].reset(None if state is None else state[self.SOURCES_KEY][name])
        self._draws = 0 if state is None else state[self.DRAWS_KEY]
        flags = None if state is None else state.get(self.EXHAUSTED_KEY)
        self._exhausted = {name: bool(flags and flags[name]) for name in self.names}
        self._choices = np.empty(0, dtype=np.int64)

    def _stream_state(self) -> dict[str, Any]:
        return {
            self.DRAWS_KEY: self._draws,
            self.EXHAUSTED_KEY: dict(self._exhausted),
            self.WEIGHTS_KEY: self.weights,
            self.SOURCES_KEY: {name: self.sources[name].state_dict() for name in self.names},
        }

    def _choose(self) -> str:
        k = self._draws - self._choices_start
        if not 0 <= k < len(self._choices):
            draws = WeightedDraws(self._weights, self.seed, stream=self._epoch)
            self._choices, self._choices_start, k = draws.draws(self._draws, self._CHUNK), self._draws, 0
        self._draws += 1
        return self.names[int(self._choices[k])]

    def _step(self, name: str, read: bool) -> Any:
        node = self.sources[name]
        if isinstance(node, RankShareNode):  # its global stream
            return node.take() if read else node.skip()
        return next(node)

    def _pull(self, read: bool) -> Any:
        """The item at the next position (``read=False``: passed over where the source can)."""
        criteria = self.stop_criteria
        while True:
            if criteria in _UNTIL_ALL and all(self._exhausted.values()):
                raise StopIteration
            name = self._choose()
            if criteria == ALL_DATASETS_EXHAUSTED and self._exhausted[name]:
                continue
            try:
                return self._step(name, read)
            except StopIteration:
                if criteria == FIRST_DATASET_EXHAUSTED:
                    raise
                if criteria in _UNTIL_ALL:
                    self._exhausted[name] = True
                    if criteria == ALL_DATASETS_EXHAUSTED or all(self._exhausted.values()):
                        continue
            self.sources[name].reset(None)  # cycle: the source's next epoch
            try:
                return self._step(name, read)
            except StopIteration:
                if criteria == CYCLE_FOREVER:
                    raise ValueError(f"source {name!r} has no item in a whole epoch: the mix cannot cycle it") from None

    def _take(self) -> Any:
        return self._pull(read=True)

    def _skip(self) -> Any:
        return self._pull(read=False)
