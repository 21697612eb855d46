"""``torch-drt convert SRC DST`` (a dataset in another system's format written as a torch_drt cache) and the
top-level ``torch-drt info|verify LOCATION``: a torch_drt cache or cache set as ``cache info|verify`` reads it,
any other dataset as ``formats info|verify`` does."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from torch_drt._cli_cache_inputs import add_storage_options, published, storage_options
from torch_drt._cli_common import CliError, json_object, positive_int


def cmd_convert(args: argparse.Namespace) -> int:
    """``torch-drt convert``: write the dataset at SRC as a torch_drt cache at DST (never over an existing one)."""
    from torch_drt.cache import ShardCompression, WriterConfig
    from torch_drt.cache.errors import UnsafeEncodingError
    from torch_drt.formats import convert

    options = storage_options(args)
    dst_options = json_object(args.dst_storage_options, "--dst-storage-options")
    metadata = None if args.metadata is None else [f for f in args.metadata.split(",") if f]
    config = WriterConfig(max_shard_bytes=args.max_shard_bytes, shard_compression=ShardCompression(args.compression),
                          show_progress=not (args.quiet or args.json), validate_cache=args.verify)
    try:
        done = convert(args.src, args.dst, format=args.format, metadata=metadata, payload=args.payload,
                       drop=args.drop or (), allow_pickle=args.allow_pickle, storage_options=options,
                       dst_storage_options=dst_options, writer_config=config, batch_size=args.batch_size)
    except FileExistsError as e:
        raise CliError(str(e)) from None
    except UnsafeEncodingError as e:
        raise CliError(f"UnsafeEncodingError: {e} (on the command line: --allow-pickle)") from None
    summary = {"path": str(done.path), "format": done.format, "samples": done.samples, "columns": done.columns,
               "payload": done.payload, "payload_fields": list(done.payload_fields)}
    if args.json:  # JSON only on stdout
        print(json.dumps(summary, indent=2))
        return 0
    what = f"field {done.payload!r} as it is" if done.payload else f"fields {list(done.payload_fields)}"
    print(f"wrote {done.samples} samples of {done.format} to {done.path}: metadata columns "
          f"{sorted(done.columns)}, payload {what}")
    return 0


def _is_cache(location: str, options: dict[str, Any] | None) -> bool:
    """True for a torch_drt cache or cache set (a manifest there), False for anything else."""
    from torch_drt.cache import is_cache_set
    from torch_drt.locations.location import is_url

    if "{" in location or location.endswith((".tar", ".parquet", ".pq", ".arrow", ".feather", ".ipc")):
        return False
    if is_url(location):
        return published(location, options) or is_cache_set(location, storage_options=options)
    path = Path(location)
    return path.is_dir() and ((path / "manifest.json").is_file() or is_cache_set(path))


def cmd_info(args: argparse.Namespace) -> int:
    """``torch-drt info``: ``cache info`` for a torch_drt cache or set, ``formats info`` for any other dataset."""
    from torch_drt._cli_formats import cmd_formats_info
    from torch_drt.cli import cmd_cache_info

    if args.format is None and _is_cache(args.location, storage_options(args)):
        return cmd_cache_info(argparse.Namespace(**vars(args), path=args.location))
    return cmd_formats_info(args)


def cmd_verify(args: argparse.Namespace) -> int:
    """``torch-drt verify``: each location checked as ``cache verify`` or ``formats verify`` checks it; 1 when any
    is damaged."""
    from torch_drt._cli_formats import cmd_formats_verify
    from torch_drt.cli import cmd_cache_verify

    options, status = storage_options(args), 0
    for location in args.locations:
        one = argparse.Namespace(**vars(args))
        if args.format is None and _is_cache(location, options):
            one.paths = [location]
            status |= cmd_cache_verify(one)
        else:
            one.locations = [location]
            status |= cmd_formats_verify(one)
    return status


def _common(command: Any, formats: tuple[str, ...], default: str) -> None:
    command.add_argument("--format", choices=formats, help=f"read as this foreign format (default: {default})")
    command.add_argument("--allow-pickle", action="store_true",
                         help="decode pickled columns (MDS pkl, LitData pickle): runs code from the data, trusted "
                              "data only")
    add_storage_options(command)


def add_info_verify(sub: Any) -> None:
    """Declare ``torch-drt info`` and ``torch-drt verify`` on the subparsers ``sub``."""
    from torch_drt.formats import FORMATS

    info = sub.add_parser("info", help="summarize a torch_drt cache, or a WebDataset, MDS, LitData, Parquet or "
                                       "Arrow dataset")
    info.add_argument("location", help="a cache, directory, file, brace pattern or URL")
    info.add_argument("--json", action="store_true", help="print only JSON")
    info.set_defaults(func=cmd_info)
    verify = sub.add_parser("verify", help="check every checksum of caches, or read every sample of foreign "
                                           "datasets; non-zero exit when any is damaged")
    verify.add_argument("locations", nargs="+", help="caches, directories, files, brace patterns or URLs")
    verify.set_defaults(func=cmd_verify)
    for command in (info, verify):
        _common(command, FORMATS, "a torch_drt cache, or told from what lies there")


def add_convert(sub: Any) -> None:
    """Declare ``torch-drt convert`` on the subparsers ``sub``."""
    from torch_drt.formats import FORMATS

    convert = sub.add_parser(
        "convert", help="write a WebDataset, MDS, LitData, Parquet or Arrow dataset as a torch_drt cache (streaming)"
    )
    convert.add_argument("src", help="the dataset: a directory, file, brace pattern or URL")
    convert.add_argument("dst", help="the cache to write, ROOT/NAME (a directory or URL); it must not exist")
    convert.add_argument("--metadata", metavar="FIELDS",
                         help="comma-separated fields kept as metadata columns (default: the first sample's bool, "
                              "int, float and str fields; '' for none)")
    convert.add_argument("--payload", metavar="FIELD",
                         help="write this bytes field as the payload as it is (default: every non-metadata field "
                              "in torch_drt's fields form, read back with torch_drt.formats.sample_fields)")
    convert.add_argument("--drop", metavar="FIELD", action="append", help="leave this field out (repeatable)")
    convert.add_argument("--compression", choices=["none", "lz4", "zstd"], default="none",
                         help="per-record payload compression of the cache")
    convert.add_argument("--max-shard-bytes", type=positive_int, default=64 * 1024 * 1024,
                         help="close a cache shard once it holds this many bytes")
    convert.add_argument("--batch-size", type=positive_int, default=256, help="samples read from the source at a time")
    convert.add_argument("--verify", action="store_true", help="verify the cache's checksums after writing it")
    convert.add_argument("--quiet", action="store_true", help="no progress bar")
    convert.add_argument("--json", action="store_true", help="print only JSON: where the cache is and the mapping")
    convert.add_argument("--dst-storage-options", metavar="JSON",
                         help="fsspec options of DST when they differ from --storage-options")
    _common(convert, FORMATS, "told from what lies there")
    convert.set_defaults(func=cmd_convert)
