"""``torch-drt formats info|verify``: datasets in other systems' formats (``torch_drt.formats``), local or at URLs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from torch_drt._cli_cache_inputs import add_storage_options, storage_options


def _open(args: argparse.Namespace, location: str) -> tuple[str, Any]:
    """The format and the opened dataset (a damaged one raises; ``main`` reports it in one line)."""
    from torch_drt.formats import detect_format, open_dataset

    options = storage_options(args)
    fmt = args.format or detect_format(location, options)
    pickle = {"allow_pickle": True} if args.allow_pickle else {}
    return fmt, open_dataset(location, fmt, storage_options=options, **pickle)


def _kind(value: Any) -> str:
    shape = getattr(value, "shape", None)
    name = type(value).__name__
    return f"{name}{list(shape)}" if shape is not None and name in ("ndarray", "Tensor") else name


def cmd_formats_info(args: argparse.Namespace) -> int:
    """``torch-drt formats info``: the format, samples, shards and fields of a dataset."""
    fmt, ds = _open(args, args.location)
    counts = ds.shard_counts
    first = ds[0] if len(ds) else {}
    fields = {k: _kind(v) for k, v in first.items()} if isinstance(first, dict) else {"item": _kind(first)}
    summary = {"location": args.location, "format": fmt, "samples": len(ds), "shards": ds.num_shards,
               "samples_per_shard": [int(counts.min()), int(counts.max())] if len(counts) else [0, 0],
               "fields": fields}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{summary['location']}: {fmt}, {len(ds)} samples in {ds.num_shards} shards "
          f"({summary['samples_per_shard'][0]}..{summary['samples_per_shard'][1]} per shard)")
    for name, kind in fields.items():
        print(f"  {name}: {kind}")
    return 0


def cmd_formats_verify(args: argparse.Namespace) -> int:
    """``torch-drt formats verify``: read every sample of each dataset (checking every checksum its format keeps);
    1 when any is damaged."""
    from torch_drt._progress import Progress
    from torch_drt.cache.errors import CacheCorruptError, UnsafeEncodingError

    status = 0
    for location in args.locations:
        try:
            _, ds = _open(args, location)
            with Progress("verify", location, total=len(ds), unit="samples") as bar:
                for shard in range(ds.num_shards):
                    start, stop = int(ds.shard_starts[shard]), int(ds.shard_starts[shard + 1])
                    for at in range(start, stop, 256):  # a shard's samples a few at a time
                        ds.__getitems__(list(range(at, min(at + 256, stop))))
                        bar.add(min(256, stop - at))
        except UnsafeEncodingError as e:
            print(f"refused {location}: {e}")
            status = 1
            continue
        except (CacheCorruptError, FileNotFoundError) as e:
            print(f"damaged {location}: {e}")
            status = 1
            continue
        print(f"ok      {location}: {len(ds)} samples in {ds.num_shards} shards")
    return status


def add_formats(sub: Any) -> None:
    """Declare ``torch-drt formats info|verify`` on the subparsers ``sub``."""
    from torch_drt.formats import FORMATS

    group = sub.add_parser(
        "formats", help="inspect and verify WebDataset, MDS, LitData, Parquet and Arrow datasets where they lie"
    ).add_subparsers(
        dest="formats_command", metavar="COMMAND", required=True, help="what to do with the dataset"
    )
    info = group.add_parser("info", help="print a dataset's format, samples, shards and fields")
    info.add_argument("location", help="a directory, file, brace pattern or URL")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.set_defaults(func=cmd_formats_info)
    verify = group.add_parser("verify", help="read every sample; non-zero exit when a dataset is damaged")
    verify.add_argument("locations", nargs="+", help="directories, files, brace patterns or URLs")
    verify.add_argument("--quiet", action="store_true", help="no progress bar")
    verify.set_defaults(func=cmd_formats_verify)
    for command in (info, verify):
        command.add_argument("--format", choices=FORMATS, help="the format (default: told from what lies there)")
        command.add_argument("--allow-pickle", action="store_true",
                             help="decode pickled columns (runs code from the data: trusted data only)")
        add_storage_options(command)
