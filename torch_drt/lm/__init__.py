"""Language-model pipelines: document packing, weighted mixing and elastic exact resume, as torchdata nodes.

``PackerNode`` packs one source's documents into ``PackedSequence`` items of ``L`` tokens (concatenate-and-chunk,
first fit or best fit); ``MixerNode`` mixes several such streams by weight. Both deliver a rank's share of one
global stream whose order does not depend on the number of ranks, workers or the batch size, and checkpoint in
O(sources) integers plus the open bins. See docs/language-models.md.
"""

from torch_drt.lm.array_source import ArraySource
from torch_drt.lm.document_source import DocumentSource
from torch_drt.lm.loading import loader_kwargs_from_storage
from torch_drt.lm.mixer_node import MixerNode, source_tokens
from torch_drt.lm.packed import PAD_SEGMENT, PackedSequence, collate_packed
from torch_drt.lm.packer_node import PackerNode, as_token_source
from torch_drt.lm.packing import BEST_FIT, CONCAT, FIRST_FIT, METHODS
from torch_drt.lm.planner import DROP, OVERLONG, SPLIT, TRUNCATE
from torch_drt.lm.source import TokenSource
from torch_drt.lm.token_stream_source import TokenStreamSource
from torch_drt.lm.window_batch import WindowBatch
from torch_drt.lm.window_dataset import PackedWindows

__all__ = [
    "BEST_FIT",
    "CONCAT",
    "DROP",
    "FIRST_FIT",
    "METHODS",
    "OVERLONG",
    "PAD_SEGMENT",
    "SPLIT",
    "TRUNCATE",
    "ArraySource",
    "DocumentSource",
    "MixerNode",
    "PackedSequence",
    "PackedWindows",
    "PackerNode",
    "TokenSource",
    "TokenStreamSource",
    "WindowBatch",
    "as_token_source",
    "collate_packed",
    "loader_kwargs_from_storage",
    "source_tokens",
]
