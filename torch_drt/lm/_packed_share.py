"""PackedShareNode: a rank's share of a global stream of packed sequences (``PackerNode``, ``MixerNode``)."""

from __future__ import annotations

import numpy as np

from torch_drt.lm.packed import PackedSequence
from torch_drt.nodes._rank_share import RankShareNode


class PackedShareNode(RankShareNode[PackedSequence]):
    """A ``RankShareNode`` of ``PackedSequence`` items of ``sequence_length`` tokens: past the end of the stream,
    the rest of the last group is padding (``PackedSequence.padding``), so every rank gets the same number of items.

    Subclasses set ``sequence_length``, ``pad_id`` and ``dtype``; ``skip()`` returns the token count of the
    sequence passed over.
    """

    sequence_length: int
    pad_id: int
    dtype: np.dtype

    def _padding(self) -> PackedSequence:
        return PackedSequence.padding(self.sequence_length, self.pad_id, self.dtype)
