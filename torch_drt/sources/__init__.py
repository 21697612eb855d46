"""I/O datasets: HTTP (aiohttp), files and object stores (fsspec), with templates, retries and size caps."""

from torch_drt.sources.files import FileDataset
from torch_drt.sources.http import HttpDataset
from torch_drt.sources.object_store import ObjectStoreDataset
from torch_drt.sources.retry import RetryPolicy
from torch_drt.sources.template import Template

__all__ = ["FileDataset", "HttpDataset", "ObjectStoreDataset", "RetryPolicy", "Template"]
