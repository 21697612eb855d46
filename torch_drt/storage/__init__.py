"""Storages for ``StatefulDataLoader.from_storage``: token streams and documents, each with a writer."""

from torch_drt.storage.document import DocumentDataset, DocumentStorage, DocumentStorageWriter
from torch_drt.storage.loading import loader_kwargs_from_storage
from torch_drt.storage.token_stream import TokenStreamDataset, TokenStreamStorage, TokenStreamWriter

__all__ = [
    "DocumentDataset",
    "DocumentStorage",
    "DocumentStorageWriter",
    "TokenStreamDataset",
    "TokenStreamStorage",
    "TokenStreamWriter",
    "loader_kwargs_from_storage",
]
