"""open_dataset: a dataset in another system's format opened by what lies at its location."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_drt.cache.errors import FormatError
from torch_drt.formats._files import Files, many
from torch_drt.formats.shard_set import ShardSet
from torch_drt.locations.remote_config import RemoteConfig

FORMATS = ("arrow", "litdata", "mds", "parquet", "webdataset")
_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
             ".tar": "webdataset"}


def detect_format(
    location: str | Path | Sequence[str | Path], storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> str:
    """The format of what lies at ``location`` (one of ``FORMATS``): a brace pattern or ``.tar`` files are
    WebDataset; ``.parquet``/``.pq`` Parquet; ``.arrow``/``.feather``/``.ipc`` Arrow; a directory by its
    ``index.json`` (``shards``: MDS, ``chunks``: LitData), its ``state.json`` (a ``datasets`` directory: Arrow), or
    else the suffix of its files.

    Raises:
        FormatError: when nothing there says which format it is.
    """
    first = many(location)[0]
    if "{" in first:
        return "webdataset"
    for suffix, fmt in _SUFFIXES.items():
        if first.endswith(suffix):
            return fmt
    files = Files(storage_options, remote_config)
    directory = first.rstrip("/")
    names = files.names(directory)
    if "index.json" in names:
        try:
            index = json.loads(files.read(directory, "index.json", 256 << 20))
        except ValueError as e:
            raise FormatError(files.where(directory, "index.json"), f"not JSON: {e}") from None
        if isinstance(index, dict) and "shards" in index:
            return "mds"
        if isinstance(index, dict) and "chunks" in index:
            return "litdata"
    if "state.json" in names:
        return "arrow"
    for suffix, fmt in _SUFFIXES.items():
        if any(n.endswith(suffix) for n in names):
            return fmt
    raise FormatError(files.where(directory, ""), "no index.json, state.json, .parquet, .arrow or .tar file here")


def open_dataset(
    location: str | Path | Sequence[str | Path], format: str | None = None, **kwargs: Any
) -> ShardSet:
    """The dataset at ``location`` in ``format`` (default: ``detect_format``), opened with the reader's
    keyword arguments (``storage_options``, ``remote_config``, ``allow_pickle``, ...).

    Raises:
        ValueError: for an unknown ``format``.
        FormatError: when the format cannot be told, or the data is damaged.
    """
    from torch_drt import formats

    options, config = kwargs.get("storage_options"), kwargs.get("remote_config")
    fmt = format or detect_format(location, options, config)
    if fmt not in FORMATS:
        raise ValueError(f"{format=} must be one of {FORMATS}")
    if fmt == "webdataset":
        first = many(location)[0]
        if len(many(location)) == 1 and "{" not in first and not first.endswith(".tar"):
            directory = first.rstrip("/")
            names = [n for n in Files(options, config).names(directory) if n.endswith(".tar")]
            location = [f"{directory}/{n}" for n in names]
        return formats.WebDatasetShards(location, **kwargs)
    cls = {"arrow": formats.ArrowDataset, "litdata": formats.LitDataset, "mds": formats.MDSDataset,
           "parquet": formats.ParquetDataset}[fmt]
    return cls(location, **kwargs)
