"""A dataset's construction settings and active table on disk: ``dataset.json`` + ``metadata.arrow``.

The files are dataset-rt 0.4's (``dataset.json`` version 2), so an export written by either package loads in
the other as far as the caches themselves do: ``{"version": 2, "cache_paths": [absolute paths], "reader_config":
{...}, "num_workers": n, "epoch_len": n, "row_count": n, "metadata_file": "metadata.arrow"}`` and the active
table (``cache_id``, ``sample_id``, stored columns, ``weight``, extra columns) as an Arrow IPC file. Reader
progress is not saved. The configuration is published last, and an export never overwrites another.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.ipc as ipc
from pydantic import BaseModel, ConfigDict, DirectoryPath, Field, FilePath, PositiveInt, TypeAdapter

from torch_drt.cache.config import ReaderConfig
from torch_drt.publish import fsync_path

if TYPE_CHECKING:
    from torch_drt.compat.dataset_rt.dataset import CachedDataset

__all__ = ["CONFIG_NAME", "METADATA_NAME", "DatasetConfiguration", "dump_config", "load_config"]

CONFIG_NAME = "dataset.json"
METADATA_NAME: Literal["metadata.arrow"] = "metadata.arrow"
_DIRECTORY: TypeAdapter[Path] = TypeAdapter(DirectoryPath)
_FILE: TypeAdapter[Path] = TypeAdapter(FilePath)


class DatasetConfiguration(BaseModel):
    """The contents of ``dataset.json`` (strict: unknown fields and coerced values are refused)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    version: Literal[2] = 2
    cache_paths: tuple[DirectoryPath, ...] = Field(min_length=1)
    reader_config: ReaderConfig
    num_workers: PositiveInt
    epoch_len: PositiveInt
    row_count: PositiveInt
    metadata_file: Literal["metadata.arrow"] = METADATA_NAME


def dump_config(dataset: CachedDataset, directory: str | Path) -> Path:
    """Write ``dataset``'s settings and active table into the existing ``directory``; return ``dataset.json``.

    Raises:
        pydantic.ValidationError: when ``directory`` is not an existing directory (a ``ValueError``).
        ValueError: when a cache is read from a URL (``dataset.json`` holds local paths, as dataset-rt's).
        FileExistsError: when it already holds an export (or a partial one).
    """
    if dataset.reader.remote:
        raise ValueError("dump_config exports datasets of local caches only: dataset.json holds cache directories")
    directory = _DIRECTORY.validate_python(directory).resolve()
    config_path, metadata_path = directory / CONFIG_NAME, directory / METADATA_NAME
    pending_config, pending_metadata = directory / f"{CONFIG_NAME}.partial", directory / f"{METADATA_NAME}.partial"
    targets = (config_path, metadata_path, pending_config, pending_metadata)
    if any(t.exists() or t.is_symlink() for t in targets):
        raise FileExistsError(f"a dataset export already exists in {directory}; choose an unused directory")
    table = dataset.active.table
    try:
        with ipc.new_file(str(pending_metadata), table.schema) as writer:
            writer.write_table(table)
        config = DatasetConfiguration(
            cache_paths=tuple(Path(p).resolve() for p in dataset.cache_paths),
            reader_config=dataset.reader_config,
            num_workers=dataset.runtime_num_workers,
            epoch_len=len(dataset),
            row_count=table.num_rows,
        )
        fsync_path(pending_metadata)
        pending_config.write_text(config.model_dump_json(indent=2), encoding="utf-8")
        fsync_path(pending_config)
        pending_metadata.replace(metadata_path)
        pending_config.replace(config_path)
    except BaseException:
        for target in targets:
            target.unlink(missing_ok=True)
        raise
    return config_path


def load_config(path: str | Path) -> tuple[DatasetConfiguration, pa.Table]:
    """Read and validate ``dataset.json`` and its active table (checked against ``row_count``).

    Raises:
        pydantic.ValidationError: when the file is missing, not JSON, or any field is invalid.
        ValueError: when the table is not a valid Arrow file or does not have ``row_count`` rows.
    """
    config_path = _FILE.validate_python(path)
    config = DatasetConfiguration.model_validate_json(config_path.read_bytes())
    metadata_path = _FILE.validate_python(config_path.parent / config.metadata_file)
    try:  # read, not mapped: a file truncated later cannot fault; validated whole before any column is used
        table = ipc.open_file(pa.BufferReader(metadata_path.read_bytes())).read_all()
        table.validate(full=True)
    except pa.ArrowException as e:
        raise ValueError(f"{metadata_path} is not a valid Arrow IPC file: {e}") from None
    if table.num_rows != config.row_count:
        raise ValueError(
            f"{metadata_path} has {table.num_rows} rows but {config_path} says row_count={config.row_count}"
        )
    return config, table
