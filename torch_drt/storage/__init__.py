"""Storages for ``StatefulDataLoader.from_storage``: token streams and documents, each with a writer.

The keywords that turn a storage into a loader live above them, in ``torch_drt.lm.loading``.
"""

from torch_drt.storage.document import DocumentDataset, DocumentStorage, DocumentStorageWriter
from torch_drt.storage.token_stream import TokenStreamStorage, TokenStreamWriter
from torch_drt.storage.token_stream_dataset import TokenStreamDataset

__all__ = [
    "DocumentDataset",
    "DocumentStorage",
    "DocumentStorageWriter",
    "TokenStreamDataset",
    "TokenStreamStorage",
    "TokenStreamWriter",
]
