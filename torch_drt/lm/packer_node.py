"""PackerNode: documents of one source packed into sequences of ``L`` tokens; this rank's share of them."""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_drt._state_fields import StateFields
from torch_drt.describe import described
from torch_drt.lm._packed_share import PackedShareNode
from torch_drt.lm.document_source import DocumentSource
from torch_drt.lm.packed import PackedSequence
from torch_drt.lm.packing import BEST_FIT
from torch_drt.lm.planner import SPLIT, SourcePlanner
from torch_drt.lm.source import TokenSource
from torch_drt.lm.token_stream_source import TokenStreamSource
from torch_drt.storage.document import DocumentStorage
from torch_drt.storage.token_stream import TokenStreamStorage


def as_token_source(source: Any, sequence_length: int) -> TokenSource:
    """A ``TokenSource`` for a source, a ``DocumentStorage`` or a ``TokenStreamStorage`` (windows of ``L``).

    Raises:
        TypeError: for anything else.
    """
    if isinstance(source, TokenSource):
        return source
    if isinstance(source, DocumentStorage):
        return DocumentSource(source)
    if isinstance(source, TokenStreamStorage):
        return TokenStreamSource(source, sequence_length)
    raise TypeError(f"expected a TokenSource, DocumentStorage or TokenStreamStorage, got {type(source).__name__}")


class PackerNode(PackedShareNode):
    """Packs the documents of ``source`` into ``PackedSequence`` items of ``sequence_length`` tokens.

    The global stream of sequences is a pure function of the source, the settings below and the epoch: every
    rank plans all of it from document lengths (cheap: no tokens are read) and reads only the sequences at its
    positions ``rank, rank + W, rank + 2W, ...``. A checkpoint (``state_dict()``) is the epoch, the global
    position, the planner's cursor and the packer's open bins (at most ``buffer_size``), and is the same on every
    rank; it resumes under any world size, batch size and worker setting with the identical global stream.

    Each item's arrays are its own, writable: a sequence of one whole piece is copied out of the source (a view of
    a read-only map that ``torch.as_tensor`` wraps, as torch's loader does without batching, crashes the
    interpreter on a write; the fields whole pieces share would change for every later sequence).

    Args:
        source: a ``TokenSource``, a ``DocumentStorage`` of token arrays, or a ``TokenStreamStorage`` (read as
            windows of ``sequence_length``, each one sequence: concatenate-and-chunk, the last window padded).
        sequence_length: ``L``, tokens per sequence.
        method: for documents: ``"concat"`` (concatenate and chunk), ``"first_fit"`` or ``"best_fit"``.
        buffer_size: open sequences of the fit methods.
        overlong: documents longer than ``L``: ``"split"`` (pieces of ``L``, the remainder packed), ``"drop"`` or
            ``"truncate"``.
        shuffle: shuffle the documents each epoch with a keyed permutation of (``seed``, epoch).
        seed: the shuffle seed.
        pad_id: the token id of padding.
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
    """

    TOKENS_KEY = "tokens"
    SEQUENCES_KEY = "sequences"
    PLANNER_KEY = "planner"
    SETTINGS_KEY = "settings"

    def __init__(
        self,
        source: Any,
        sequence_length: int,
        *,
        method: str = BEST_FIT,
        buffer_size: int = 128,
        overlong: str = SPLIT,
        shuffle: bool = False,
        seed: int = 0,
        pad_id: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(rank, world_size)
        self.sequence_length, self.pad_id = sequence_length, pad_id
        self.source = as_token_source(source, sequence_length)
        self.dtype = np.dtype(self.source.dtype).newbyteorder("=")  # (torch takes no other byte order)
        whole = self.source.whole_documents
        self.planner = SourcePlanner(
            self.source.lengths(), sequence_length, method, buffer_size, overlong, shuffle, seed, whole
        )
        self._settings = {"sequence_length": sequence_length, "method": method, "buffer_size": buffer_size,
                          "overlong": overlong, "shuffle": shuffle, "seed": seed, "documents": len(self.source),
                          "whole_documents": whole}
        self._tokens = 0
        self._sequences = 0

    @property
    def tokens(self) -> int:
        """Tokens (not padding) in the global stream before the node's position, all epochs together."""
        return self._tokens

    def _restart(self, epoch: int, state: dict[str, Any] | None) -> None:
        if state is None:
            self.planner.start(epoch)
            return
        self.planner.start(epoch, state[self.PLANNER_KEY])
        self._tokens, self._sequences = state[self.TOKENS_KEY], state[self.SEQUENCES_KEY]

    def _check_stream(self, fields: StateFields) -> None:
        fields.require(self.SETTINGS_KEY, self.PLANNER_KEY, self.TOKENS_KEY, self.SEQUENCES_KEY)
        settings = fields.get(self.SETTINGS_KEY)
        if not isinstance(settings, dict) or settings.keys() != self._settings.keys() or any(
            type(settings[k]) is not type(v) or settings[k] != v for k, v in self._settings.items()
        ):
            raise fields.error(self.SETTINGS_KEY, f"is not this node's: the checkpoint was packed with other "
                                                  f"settings than {self._settings}")
        fields.int(self.TOKENS_KEY)
        fields.int(self.SEQUENCES_KEY)
        self.planner.check_state(fields.child(self.PLANNER_KEY))

    def _stream_state(self) -> dict[str, Any]:
        return {
            self.SETTINGS_KEY: dict(self._settings),
            self.PLANNER_KEY: self.planner.state(),
            self.TOKENS_KEY: self._tokens,
            self.SEQUENCES_KEY: self._sequences,
        }

    def _count(self, plan: list[int]) -> int:
        n = plan[2] if len(plan) == 3 else sum(plan[2::3])
        self._tokens += n
        self._sequences += 1
        return n

    def _take(self) -> PackedSequence:
        plan = self.planner.next_plan()
        pieces = [self.source.read(*plan)] if len(plan) == 3 else self.source.read_plan(plan)
        sequence = PackedSequence.from_pieces(pieces, self.sequence_length, self.pad_id, self.dtype)
        self._count(plan)
        return sequence

    def _skip(self) -> int:
        return self._count(self.planner.next_plan())

    def __repr__(self) -> str:
        return described(
            self, self.source, sequence_length=self.sequence_length, method=self._settings["method"],
            shuffle=self._settings["shuffle"], seed=self._settings["seed"], rank=self.rank, world_size=self.world_size,
        )
