"""The ``torch-drt`` command: the demo, the cache tools (build, info, verify, ls), convert, the benchmarks.

Every failure is one line on stderr (``torch-drt: error: ...``) and a non-zero exit status: 2 for bad
arguments, 1 for a failed operation, 130 after Ctrl-C; ``--traceback`` shows the Python traceback instead.

Each subcommand is one ``cmd_*`` function taking the parsed arguments and returning the exit status (raising
``CliError`` for a one-line failure), declared by an ``_add_*`` function: a new subcommand is one of each plus a
line in ``build_parser`` (``bench`` lives in ``_cli_bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch_drt import _cli_cache_inputs as inputs
from torch_drt._cli_bench import add_bench
from torch_drt._cli_common import CliError, CliParser, non_negative_int, positive_int, report
from torch_drt._cli_convert import add_convert, add_info_verify
from torch_drt._cli_formats import add_formats
from torch_drt._cli_profile import add_profile
from torch_drt._progress import enabled, silenced

__all__ = ["build_parser", "main"]


def cmd_demo(args: argparse.Namespace) -> int:
    """``torch-drt demo``: generate images, build a cache, train, checkpoint mid-epoch and resume exactly."""
    from torch_drt.demo import run_demo

    figures = run_demo(
        Path(args.workdir), n=args.samples, batch_size=args.batch_size, steps=args.steps, workers=args.workers
    )
    return 0 if figures["exact_resume"] else 1


def cmd_cache_build(args: argparse.Namespace) -> int:
    """``torch-drt cache build``: write a cache (or a cache set) from a directory of files or a Python source spec."""
    from torch_drt._cli_sets import build_set, under_torchrun
    from torch_drt.cache import CacheSourcesError, DatasetRuntime, ShardCompression, WriterConfig, open_cache
    from torch_drt.locations.location import is_url

    options = inputs.storage_options(args)
    remote = is_url(args.root)
    root: Path | str = args.root.rstrip("/") if remote else Path(args.root)
    if isinstance(root, Path) and root.exists() and not root.is_dir():  # a Path exactly when not remote
        raise CliError(f"{root} is not a directory")
    config = WriterConfig(
        max_shard_bytes=args.max_shard_bytes,
        shard_compression=ShardCompression(args.compression),
        show_progress=not args.quiet and enabled(),
        validate_cache=args.verify,
    )
    if args.num_workers and not (args.parts or under_torchrun()):
        raise CliError("--num-workers writes the parts of a cache set: give --parts N too", 2)
    source = inputs.build_source(args)
    if args.parts or under_torchrun():
        return build_set(source, args.root, source.name, args.parts, config, options, args.num_workers)
    plain = Path(str(source.name)).name == str(source.name)  # else the writer refuses the name itself
    if remote:
        target: Path | str = f"{root}/{source.name}"
        exists = plain and inputs.published(str(target), options)
    else:
        target = Path(root) / str(source.name)
        exists = plain and (target.exists() or target.is_symlink())
    if exists:  # said before any sample is written
        raise CliError(f"{target} already exists: choose another --name, or remove it first")
    try:
        with DatasetRuntime(1) as runtime:
            (result,) = runtime.write_cache([source], root, writer_config=config, storage_options=options)
    except CacheSourcesError as e:
        raise CliError(e.failures[0].message) from None
    print(f"wrote {open_cache(result.path, storage_options=options).sample_count} samples to {result.path}")
    return 0


def cmd_cache_info(args: argparse.Namespace) -> int:
    """``torch-drt cache info``: a cache's format, source, counts, shard sizes and schema."""
    from torch_drt._cli_sets import set_info
    from torch_drt.cache import CacheCorruptError, is_cache_set, open_cache

    options = inputs.storage_options(args)
    location = inputs.location(args.path)
    try:
        if is_cache_set(location, storage_options=options):
            return set_info(location, args.json, options)
        layout = open_cache(location, storage_options=options)
    except CacheCorruptError as e:
        raise CliError(str(e)) from e
    sizes = sum(s for _, s in layout.shards)
    if args.json:  # JSON only on stdout, so `| jq` and json.load work
        assert layout.backend is not None  # open_cache's layouts carry the backend they were read from
        summary = {
            "path": str(layout.path),
            "format": "dataset-rt" if layout.legacy else "torch_drt",
            "format_version": layout.format_version,
            "source_name": layout.source_name,
            "cache_id": layout.cache_id,
            "sample_count": layout.sample_count,
            "shard_count": len(layout.shards),
            "bytes": sizes,
            "compression": layout.compression,
            "schema": dict(layout.schema),
            "manifest": json.loads(layout.backend.read("manifest.json", 64 << 20)),
        }
        print(json.dumps(summary, indent=2))
        return 0
    print(f"path:        {layout.path}")
    print(f"format:      {'dataset-rt' if layout.legacy else 'torch_drt'} version {layout.format_version}")
    print(f"source:      {layout.source_name} (cache_id {layout.cache_id})")
    print(f"samples:     {layout.sample_count}")
    print(f"shards:      {len(layout.shards)}, {sizes:,} bytes, compression {layout.compression}")
    print("schema:      " + ", ".join(f"{n}: {k}" for n, k in layout.schema))
    return 0


def cmd_cache_verify(args: argparse.Namespace) -> int:
    """``torch-drt cache verify``: every checksum of every cache given; 1 when any is corrupt or unreadable."""
    from torch_drt._cli_sets import verify_set
    from torch_drt.cache import CacheCorruptError, is_cache_set, open_cache

    status = 0
    options = inputs.storage_options(args)
    for path in args.paths:
        try:
            if is_cache_set(inputs.location(path), storage_options=options):
                status |= verify_set(inputs.location(path), options)
                continue
            layout = open_cache(inputs.location(path), verify=True, storage_options=options)
        except CacheCorruptError as e:
            print(f"CORRUPT {e.path}: {e.reason}")
            status = 1
        except CliError as e:
            report(str(e))
            status = 1
        except Exception as e:  # one path's failure is reported, and the others are still checked
            report(f"{path}: {e}", e)
            status = 1
        else:
            print(f"ok      {layout.path} ({len(layout.checksums)} files verified)")
    return status


def cmd_cache_ls(args: argparse.Namespace) -> int:
    """``torch-drt cache ls``: the caches under a root, with counts and sizes; invalid ones say why."""
    from torch_drt._cli_sets import ls_line
    from torch_drt.cache import CacheCorruptError, open_cache

    options = inputs.storage_options(args)
    root = inputs.location(args.root)
    if isinstance(root, str):
        from torch_drt.locations.remote_store import RemoteStore

        try:
            names = [n for n in RemoteStore(root, options).list_dirs() if not n.startswith(".")]
        except ValueError as e:
            raise CliError(str(e), 2) from None
        entries: list[Any] = [(n, f"{root.rstrip('/')}/{n}") for n in names]
    else:
        entries = [(p.name, p) for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    for name, entry in entries:
        if (line := ls_line(entry, options)) is not None:
            print(line)
            continue
        try:
            layout = open_cache(entry, storage_options=options)
        except CacheCorruptError as e:
            print(f"{name:<30} invalid: {e.reason}")
        except Exception as e:  # a damaged entry is listed as such; the listing goes on
            print(f"{name:<30} invalid: {type(e).__name__}: {e}")
        else:
            print(f"{name:<30} {layout.sample_count:>10} samples  {sum(s for _, s in layout.shards):>14,} bytes")
    return 0


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="generate images, build a cache, train a small CNN, checkpoint mid-epoch and resume exactly"
    )
    demo.add_argument("--workdir", default="demo_data", help="cache root (reused across runs)")
    demo.add_argument("--samples", type=positive_int, default=4000, help="generated images in the cache")
    demo.add_argument("--batch-size", type=positive_int, default=64, help="samples per training batch")
    demo.add_argument("--steps", type=positive_int, default=300, help="training steps")
    demo.add_argument("--workers", type=non_negative_int, default=2, help="loader worker threads")
    demo.set_defaults(func=cmd_demo)


def _add_cache(sub: Any) -> None:
    cache = sub.add_parser("cache", help="build and inspect caches").add_subparsers(
        dest="cache_command", metavar="COMMAND", required=True, help="what to do with caches"
    )
    build = cache.add_parser(
        "build", help="build a cache (or a cache set, also under torchrun) from a directory or a Python source spec"
    )
    build.add_argument("root", help="cache root (a directory or a URL); the cache (or set) is written to ROOT/NAME")
    build.add_argument("source", nargs="?", help="directory of files (each becomes one sample)")
    build.add_argument("--source-spec", help="package.module:object naming a cache source (or a factory of one)")
    build.add_argument("--name", help="cache name (default: the source directory's name)")
    build.add_argument(
        "--compression", choices=["none", "lz4", "zstd"], default="none", help="per-record payload compression"
    )
    build.add_argument(
        "--max-shard-bytes", type=positive_int, default=64 * 1024 * 1024,
        help="close a shard once it holds this many bytes",
    )
    build.add_argument("--verify", action="store_true", help="verify checksums after writing")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.add_argument(
        "--parts", type=positive_int, help="build a cache set of this many parts (under torchrun: default one per rank)"
    )
    build.add_argument(
        "--num-workers", type=non_negative_int, default=0,
        help="write a set's parts in this many local worker processes (under torchrun: per rank; 0: in the process)",
    )
    build.set_defaults(func=cmd_cache_build)
    info = cache.add_parser("info", help="print a cache's manifest summary, counts, schema and sizes")
    info.add_argument("path", help="a cache (or set) directory or URL")
    info.add_argument(
        "--json", action="store_true", help="print only JSON: the summary's fields and the whole manifest"
    )
    info.set_defaults(func=cmd_cache_info)
    verify = cache.add_parser("verify", help="verify every checksum; non-zero exit on corruption")
    verify.add_argument("--quiet", action="store_true", help="no progress bar")
    verify.add_argument("paths", nargs="+", help="cache (or set) directories or URLs")
    verify.set_defaults(func=cmd_cache_verify)
    ls = cache.add_parser("ls", help="list the caches under a root")
    ls.add_argument("root", help="a directory or URL holding caches")
    ls.set_defaults(func=cmd_cache_ls)
    for command in (build, info, verify, ls):
        inputs.add_storage_options(command)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``torch-drt``."""
    from torch_drt import __version__

    parser = CliParser(prog="torch-drt", description="torch_drt: fast, resumable data loading.")
    parser.add_argument(
        "--version", action="version", version=f"torch-drt {__version__}", help="print torch-drt's version and exit"
    )
    parser.add_argument("--traceback", action="store_true", help="on an error, show the Python traceback")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, help="the command to run")
    _add_demo(sub)
    _add_cache(sub)
    add_bench(sub)
    add_formats(sub)
    add_convert(sub)
    add_info_verify(sub)
    add_profile(sub)
    return parser


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        with silenced():
            return int(args.func(args))
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torch-drt`` with ``argv`` (default: the process arguments) and return its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(argv)
    except CliError as e:
        report(str(e))
        return e.status
    except SystemExit as e:  # --help and --version (a status), or a command that exits with a message
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        report(str(e.code))
        return 1
    except KeyboardInterrupt:
        report("interrupted")
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`torch-drt cache ls ROOT | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        if "--traceback" in argv:
            raise
        report(str(e), e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
