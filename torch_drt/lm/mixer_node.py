"""MixerNode: a seeded weighted mix of several packed-sequence streams; this rank's share of it."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from torch_drt.lm._packed_share import PackedShareNode
from torch_drt.nodes.mixer import CYCLE_FOREVER, FIRST_DATASET_EXHAUSTED, WeightedMixer


class MixerNode(WeightedMixer, PackedShareNode):
    """``torch_drt.nodes.WeightedMixer`` over packed-sequence streams: global position p of the mix is the next
    sequence of source k, drawn with probability ``weights[k] / sum(weights)`` as a pure function of (``seed``,
    epoch, p).

    Each source is a packed-sequence node (``PackerNode``, or another ``MixerNode``) and keeps its own stream
    (its documents, shuffle and seed): the weights decide only which source the next position comes from. The
    mixer plans every position (skipped sources advance without reading tokens) and delivers this rank's, so the
    global stream does not depend on the topology; past its end the last group is padded. A checkpoint holds the
    position, each source's state and the tokens each source has contributed so far (``source_tokens``):
    O(number of sources) integers plus the packers' open bins.

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

    SOURCE_TOKENS_KEY = "source_tokens"
    STOP_CRITERIA = (CYCLE_FOREVER, FIRST_DATASET_EXHAUSTED)

    def __init__(
        self,
        sources: Mapping[str, PackedShareNode],
        weights: Mapping[str, float],
        *,
        seed: int = 0,
        stop_criteria: str = CYCLE_FOREVER,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        bad = {k: type(v).__name__ for k, v in sources.items() if not isinstance(v, PackedShareNode)}
        if bad:
            raise TypeError(f"sources must be PackerNode or MixerNode, got {bad}")
        super().__init__(sources, weights, seed=seed, stop_criteria=stop_criteria, rank=rank, world_size=world_size)
        first = self.sources[self.names[0]]
        for name in self.names:
            node = self.sources[name]
            if (node.sequence_length, node.dtype) != (first.sequence_length, first.dtype):
                raise ValueError(
                    f"source {name!r} has sequence_length={node.sequence_length}, dtype={node.dtype}; "
                    f"{self.names[0]!r} has {first.sequence_length}, {first.dtype}: they must agree"
                )
        self.sequence_length, self.pad_id, self.dtype = first.sequence_length, first.pad_id, first.dtype

    @property
    def source_tokens(self) -> dict[str, int]:
        """Tokens (not padding) each source has contributed to the global stream before the node's position."""
        return {name: self.sources[name].tokens for name in self.names}

    @property
    def tokens(self) -> int:
        """Tokens (not padding) in the global stream before the node's position."""
        return sum(self.source_tokens.values())

    def _stream_state(self) -> dict[str, Any]:
        return {**super()._stream_state(), self.SOURCE_TOKENS_KEY: self.source_tokens}


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
