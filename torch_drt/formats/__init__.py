"""Datasets in other systems' formats, read where they lie (locally or at any fsspec URL) as map-style datasets
that every torch_drt loader takes: ``len``, ``__getitem__`` (a dict of fields), ``shard_groups()``."""

from torch_drt.formats.arrow import ArrowDataset
from torch_drt.formats.convert import Converted, ConvertError, convert
from torch_drt.formats.detect import FORMATS, detect_format, open_dataset
from torch_drt.formats.fields import decode_fields, encode_fields, sample_fields
from torch_drt.formats.litdata import LitDataset
from torch_drt.formats.mds import MDSDataset
from torch_drt.formats.parquet import ParquetDataset
from torch_drt.formats.shard_set import ShardSet
from torch_drt.formats.webdataset import WebDatasetShards

__all__ = [
    "FORMATS",
    "ArrowDataset",
    "ConvertError",
    "Converted",
    "LitDataset",
    "MDSDataset",
    "ParquetDataset",
    "ShardSet",
    "WebDatasetShards",
    "convert",
    "decode_fields",
    "detect_format",
    "encode_fields",
    "open_dataset",
    "sample_fields",
]
