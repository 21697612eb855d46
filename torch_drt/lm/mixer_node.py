"""MixerNode: a seeded weighted mix of several packed-sequence streams; this rank's share of it."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
from torchdata.nodes.samplers.stop_criteria import StopCriteria

from torch_drt._state_fields import StateFields
from torch_drt.describe import described
from torch_drt.lm._rank_share import RankShareNode
from torch_drt.lm.packed import PackedSequence
from torch_drt.sampling import WeightedDraws

_CRITERIA = (StopCriteria.CYCLE_FOREVER, StopCriteria.FIRST_DATASET_EXHAUSTED)


def _check_weights(names: list[str], weights: Mapping[str, float]) -> np.ndarray:
    if sorted(weights) != names:
        raise ValueError(f"weight names {sorted(weights)} must be the source names {names}")
    values = np.array([weights[k] for k in names], dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"weights must be finite and > 0, got {dict(weights)}")
    return values


class MixerNode(RankShareNode):
    """Global position p of the mix is the next sequence of source k, drawn with probability
    ``weights[k] / sum(weights)`` as a pure function of (``seed``, epoch, p, the weights).

    Each source is a packed-sequence node (``PackerNode``, or another ``MixerNode``) and keeps its own stream
    (its documents, shuffle and seed): the weights decide only which source the next position comes from. The
    mixer plans every position (skipped sources advance without reading tokens) and delivers this rank's, so the
    global stream does not depend on the topology. A checkpoint holds the position, each source's state and the
    tokens each source has contributed so far (``source_tokens``): O(number of sources) integers plus the
    packers' open bins.

    Changing the weights: build the node with the new weights (or call ``set_weights``) and resume from a
    checkpoint; positions from the checkpoint on are drawn with the new weights, and resuming again from that
    checkpoint with the same weights reproduces them exactly. A checkpoint's weights are recorded for reporting
    only: the node's own weights apply.

    Args:
        sources: name -> packed-sequence node (all with one sequence length and token dtype). Their own
            rank settings are ignored: the mixer takes their global streams.
        weights: name -> positive weight.
        seed: seed of the draws.
        stop_criteria: ``"CYCLE_FOREVER"`` (default: a source at its end starts its next epoch) or
            ``"FIRST_DATASET_EXHAUSTED"`` (the mix ends at the first position whose source is at its end).
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
    """

    DRAWS_KEY = "draws"
    SOURCES_KEY = "sources"
    SOURCE_TOKENS_KEY = "source_tokens"
    WEIGHTS_KEY = "weights"
    _CHUNK = 4096

    def __init__(
        self,
        sources: Mapping[str, RankShareNode],
        weights: Mapping[str, float],
        *,
        seed: int = 0,
        stop_criteria: str = StopCriteria.CYCLE_FOREVER,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if not sources:
            raise ValueError("a mixer needs at least one source")
        bad = {k: type(v).__name__ for k, v in sources.items() if not isinstance(v, RankShareNode)}
        if bad:
            raise TypeError(f"sources must be PackerNode or MixerNode, got {bad}")
        if stop_criteria not in _CRITERIA:
            raise ValueError(f"{stop_criteria=} must be one of {_CRITERIA}")
        self.names = sorted(sources)
        first = sources[self.names[0]]
        for name in self.names:
            node = sources[name]
            if (node.sequence_length, node.dtype) != (first.sequence_length, first.dtype):
                raise ValueError(
                    f"source {name!r} has sequence_length={node.sequence_length}, dtype={node.dtype}; "
                    f"{self.names[0]!r} has {first.sequence_length}, {first.dtype}: they must agree"
                )
        super().__init__(first.sequence_length, first.pad_id, rank, world_size)
        self.sources = dict(sources)
        self.dtype = first.dtype
        self.seed, self.stop_criteria = seed, stop_criteria
        self._weights = _check_weights(self.names, weights)
        self._draws = 0
        self._choices, self._choices_start = np.empty(0, dtype=np.int64), 0

    @property
    def weights(self) -> dict[str, float]:
        """The weights in force."""
        return dict(zip(self.names, self._weights.tolist()))

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Use ``weights`` from the next position on; for a reproducible change, call it before ``reset``."""
        self._weights = _check_weights(self.names, weights)
        self._choices = np.empty(0, dtype=np.int64)

    @property
    def source_tokens(self) -> dict[str, int]:
        """Tokens (not padding) each source has contributed to the global stream before the node's position."""
        return {name: self.sources[name].tokens for name in self.names}

    @property
    def tokens(self) -> int:
        """Tokens (not padding) in the global stream before the node's position."""
        return sum(self.source_tokens.values())

    def _restart(self, epoch: int, state: dict[str, Any] | None) -> None:
        for name in self.names:
            self.sources[name].reset(None if state is None else state[self.SOURCES_KEY][name])
        self._draws = 0 if state is None else state[self.DRAWS_KEY]
        self._choices = np.empty(0, dtype=np.int64)

    def _stream_state(self) -> dict[str, Any]:
        return {
            self.DRAWS_KEY: self._draws,
            self.WEIGHTS_KEY: self.weights,
            self.SOURCE_TOKENS_KEY: self.source_tokens,
            self.SOURCES_KEY: {name: self.sources[name].state_dict() for name in self.names},
        }

    def _check_stream(self, fields: StateFields) -> None:
        fields.int(self.DRAWS_KEY)
        sources = fields.child(self.SOURCES_KEY)
        if sorted(sources.state) != self.names:
            raise fields.error(self.SOURCES_KEY, f"is not this mixer's: the checkpoint mixes "
                                                 f"{sorted(map(str, sources.state))}, this mixer {self.names}")
        for name in self.names:
            self.sources[name].check_state(sources.state[name], sources.where(name))

    def _choose(self) -> RankShareNode:
        k = self._draws - self._choices_start
        if not 0 <= k < len(self._choices):
            draws = WeightedDraws(self._weights, self.seed, stream=self._epoch)
            self._choices, self._choices_start, k = draws.draws(self._draws, self._CHUNK), self._draws, 0
        self._draws += 1
        return self.sources[self.names[int(self._choices[k])]]

    def _pull(self, read: bool) -> Any:
        node = self._choose()
        try:
            return node.take() if read else node.skip()
        except StopIteration:
            if self.stop_criteria == StopCriteria.FIRST_DATASET_EXHAUSTED:
                self._draws -= 1  # the end: the position is not consumed
                raise
        node.reset(None)  # CYCLE_FOREVER: the source's next epoch
        try:
            return node.take() if read else node.skip()
        except StopIteration:
            raise ValueError("a source of the mixer has no sequence in a whole epoch") from None

    def _take(self) -> PackedSequence:
        return self._pull(read=True)

    def _skip(self) -> int:
        return self._pull(read=False)

    def __repr__(self) -> str:
        return described(
            self, weights=self.weights, seed=self.seed, stop_criteria=self.stop_criteria, rank=self.rank,
            world_size=self.world_size,
        )


def source_tokens(state: Mapping[str, Any]) -> dict[str, int]:
    """Per-source token counts in a checkpoint: a mixer's state, or a loader's state holding one.

    Raises:
        KeyError: when the state holds no mixer.
    """
    queue: deque[Any] = deque([state])  # breadth first: the outermost mixer wins
    while queue:
        item = queue.popleft()
        if isinstance(item, Mapping):
            if MixerNode.SOURCE_TOKENS_KEY in item:
                return dict(item[MixerNode.SOURCE_TOKENS_KEY])
            queue.extend(item.values())
    raise KeyError(f"no {MixerNode.SOURCE_TOKENS_KEY!r} in this state: it holds no MixerNode")
