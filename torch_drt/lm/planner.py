"""SourcePlanner: the plans of one source's packed sequences, epoch by epoch, from document lengths alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_drt._state_fields import StateFields
from torch_drt.lm.packing import CONCAT, make_packer
from torch_drt.sampling.permutation import KeyedPermutation

SPLIT = "split"
DROP = "drop"
TRUNCATE = "truncate"
OVERLONG = (SPLIT, DROP, TRUNCATE)


class SourcePlanner:
    """Feeds a source's documents, in the epoch's order, to a packer and hands out the plans it emits.

    The order of epoch e is the identity, or with ``shuffle`` a keyed permutation of (``seed``, e). A document
    longer than ``L`` is, by ``overlong``: ``"split"`` into pieces of ``L`` (each its own sequence) and a
    remainder that is packed like a document; ``"drop"``ped; or ``"truncate"``d to its first ``L`` tokens. With
    ``concat`` a split document simply runs on into the next sequences. Empty documents are skipped. At the end
    of the epoch the open bins are emitted. With ``whole_documents`` every document is one sequence (no packing;
    documents must be at most ``L``).

    The state is the epoch's cursor (documents fed so far) and the packer's state: O(buffer_size).

    Args:
        lengths: tokens per document (int64).
        sequence_length: ``L``.
        method: a packing method (``concat``, ``first_fit`` or ``best_fit``).
        buffer_size: open bins of the fit methods.
        overlong: ``"split"``, ``"drop"`` or ``"truncate"``.
        shuffle: shuffle the documents each epoch.
        seed: the shuffle seed.
        whole_documents: emit each document as its own sequence.
    """

    CURSOR_KEY = "cursor"
    PACKER_KEY = "packer"
    _BLOCK = 8192

    def __init__(
        self,
        lengths: np.ndarray,
        sequence_length: int,
        method: str,
        buffer_size: int,
        overlong: str,
        shuffle: bool,
        seed: int,
        whole_documents: bool = False,
    ) -> None:
        if overlong not in OVERLONG:
            raise ValueError(f"{overlong=} must be one of {OVERLONG}")
        self.packer = make_packer(method, sequence_length, buffer_size)  # validates method, length, buffer
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.ndim != 1 or (self.lengths.size and self.lengths.min() < 0):
            raise ValueError("lengths must be a 1-D array of non-negative integers")
        self.length, self.method, self.overlong = sequence_length, method, overlong
        self.shuffle, self.seed = shuffle, seed
        if whole_documents and self.lengths.size and self.lengths.max() > sequence_length:
            raise ValueError(f"whole documents must hold at most {sequence_length=} tokens")
        self.whole_documents = whole_documents
        self.epoch = 0
        self._cursor = 0
        self._order: KeyedPermutation | None = None
        self._block_start = 0
        self._ids: list[int] = []  # the block's documents, in the epoch's order
        self._sizes: list[int] = []  # their lengths

    def start(self, epoch: int, state: dict[str, Any] | None = None) -> None:
        """Begin ``epoch`` at its start, or at ``state`` (from ``state()`` in that epoch; see ``check_state``)."""
        self.epoch = epoch
        n = len(self.lengths)
        self._order = KeyedPermutation(n, self.seed, epoch) if self.shuffle and n else None
        self._cursor = 0 if state is None else state[self.CURSOR_KEY]
        empty: dict[str, Any] = {self.packer.BINS_KEY: [], self.packer.READY_KEY: []}
        self.packer.restore(state[self.PACKER_KEY] if state else empty)
        self._block_start, self._ids, self._sizes = self._cursor, [], []

    def check_state(self, fields: StateFields) -> None:
        """Refuse a ``state()`` that does not fit these documents: a checkpoint is user input.

        The cursor lies within the documents, and every piece of an open or queued sequence inside its document.

        Raises:
            ValueError: naming the field.
        """
        fields.int(self.CURSOR_KEY, high=len(self.lengths))
        packer = fields.child(self.PACKER_KEY)
        self.packer.check_state(packer)
        for key in (self.packer.BINS_KEY, self.packer.READY_KEY):
            plans = packer.state[key]
            pieces = [p[1:] for p in plans] if key == self.packer.BINS_KEY else plans
            flat = np.array([x for p in pieces for x in p], dtype=np.int64).reshape(-1, 3)
            doc, start, n = flat.T
            if len(flat) and (
                doc.max() >= len(self.lengths) or n.min() < 1
                or np.any(start + n > self.lengths[np.clip(doc, 0, max(len(self.lengths) - 1, 0))])
            ):
                raise packer.error(key, "names pieces outside the source's documents")

    def state(self) -> dict[str, Any]:
        """JSON-serialisable: the cursor and the packer's open bins and queued plans."""
        return {self.CURSOR_KEY: self._cursor, self.PACKER_KEY: self.packer.state()}

    def _load_block(self) -> None:
        end = min(self._cursor + self._BLOCK, len(self.lengths))
        positions = np.arange(self._cursor, end, dtype=np.int64)
        ids = positions if self._order is None else self._order(positions).astype(np.int64)
        self._block_start, self._ids, self._sizes = self._cursor, ids.tolist(), self.lengths[ids].tolist()

    def next_plan(self) -> list[int]:
        """The next sequence's plan ``[doc, start, n, ...]``.

        Raises:
            StopIteration: when the epoch has no more sequences.
        """
        packer = self.packer
        while not packer.ready:
            if self._cursor < len(self.lengths):
                self._feed()
            else:
                packer.flush()
                if not packer.ready:
                    raise StopIteration
        return packer.ready.popleft()

    def _feed(self) -> None:
        """Feed documents until the packer emits a plan or the epoch's documents run out."""
        packer, length, total = self.packer, self.length, len(self.lengths)
        split = self.method == CONCAT and self.overlong == SPLIT
        while not packer.ready and self._cursor < total:
            i = self._cursor - self._block_start
            if i >= len(self._ids):
                self._load_block()
                i = 0
            doc, n = self._ids[i], self._sizes[i]
            self._cursor += 1
            if self.whole_documents:
                if n:
                    packer.ready.append([doc, 0, n])
            elif n <= length or split:
                if n:
                    packer.add(doc, 0, n)
            elif self.overlong == TRUNCATE:
                packer.add(doc, 0, length)
            elif self.overlong == SPLIT:
                start = 0
                while n - start > length:
                    packer.add(doc, start, length)
                    start += length
                packer.add(doc, start, n - start)
