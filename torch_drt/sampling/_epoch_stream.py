"""EpochStream: an exact order of ``n`` rows read as one stream that runs on from epoch to epoch, position ``P``
being position ``P % n`` of epoch ``P // n``: the one owner of that arithmetic and of the per-epoch plans kept,
for ``EpochPermutations`` (``torch_drt.sampling.shard_order``) and ``ShardWindowShuffle``
(``torch_drt.sampling.locality``)."""

from __future__ import annotations

from typing import Generic, TypeVar

import numpy as np

from torch_drt._distinct import distinct

P = TypeVar("P")
_KEPT = 3  # the plans of this many epochs are kept: a stream read across an epoch's end needs two


class EpochStream(Generic[P]):
    """Rows at stream positions (``at``, ``draws``) from a subclass's ``indices(epoch, positions)``.

    A subclass sets ``n`` (rows, >= 1) and implements ``_plan(epoch)``: what an epoch's positions are computed
    from, made once per epoch (``_epoch``) and kept while the stream reads it.
    """

    n: int

    def __init__(self) -> None:
        self._epochs: dict[int, P] = {}

    def __len__(self) -> int:
        return self.n

    def _plan(self, epoch: int) -> P:
        raise NotImplementedError

    def _epoch(self, epoch: int) -> P:
        """``_plan(epoch)``, made when first needed."""
        plan = self._epochs.get(epoch)
        if plan is None:
            if len(self._epochs) >= _KEPT:
                self._epochs.clear()
            plan = self._epochs[epoch] = self._plan(epoch)
        return plan

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (each in ``[0, n)``) of ``epoch``."""
        raise NotImplementedError

    def at(self, stream: np.ndarray) -> np.ndarray:
        """Rows at stream positions ``stream``: stream position ``P`` is position ``P % n`` of epoch ``P // n``."""
        epochs, positions = np.divmod(np.asarray(stream, dtype=np.int64), self.n)
        if len(epochs) and epochs[0] == epochs[-1] and (epochs == epochs[0]).all():  # a batch inside one epoch
            return self.indices(int(epochs[0]), positions)
        out = np.empty(len(positions), dtype=np.int64)
        for e in distinct(epochs).tolist():
            sel = epochs == e
            out[sel] = self.indices(e, positions[sel])
        return out

    def draws(self, start: int, count: int) -> np.ndarray:
        """Rows at stream positions ``start .. start+count-1``."""
        if start < 0 or count < 0:
            raise ValueError(f"{start=} and {count=} must be >= 0")
        return self.at(np.arange(start, start + count, dtype=np.int64))
