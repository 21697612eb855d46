"""The ``torch-drt`` command: the demo and cache tools (build, info, verify, ls)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from torch_drt.demo import run_demo

    figures = run_demo(
        Path(args.workdir), n=args.samples, batch_size=args.batch_size, steps=args.steps, workers=args.workers
    )
    return 0 if figures["exact_resume"] else 1


class _DirectorySource:
    """Every file under a directory, in sorted order; metadata: relative path and size."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.name = name
        self.files = sorted(p for p in root.rglob("*") if p.is_file())

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from torch_drt.cache import CacheInput

        path = self.files[i]
        return CacheInput(path.read_bytes(), {"path": str(path.relative_to(self.root)), "size": path.stat().st_size})

    def __iter__(self):
        for i in range(len(self.files)):
            yield self[i]


def _load_spec(spec: str, name: str | None) -> Any:
    """``package.module:object``: a cache source, or a callable returning one."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--source-spec {spec!r} must look like package.module:object")
    sys.path.insert(0, str(Path.cwd()))
    obj = getattr(importlib.import_module(module_name), attr)
    source = obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "__iter__")) else obj
    if name is not None:
        source.name = name
    if not hasattr(source, "name") or not hasattr(source, "__iter__"):
        raise ValueError(f"{spec} is not a cache source (an object with name and __iter__)")
    return source


def _cmd_build(args: argparse.Namespace) -> int:
    from torch_drt.cache import CacheWriteSuccess, DatasetRuntime, ShardCompression, WriterConfig

    if args.source_spec:
        try:
            source = _load_spec(args.source_spec, args.name)
        except (ImportError, AttributeError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        source_dir = Path(args.source or "")
        if not args.source or not source_dir.is_dir():
            print(f"error: {args.source!r} is not a directory (or give --source-spec)", file=sys.stderr)
            return 2
        source = _DirectorySource(source_dir, args.name or source_dir.name)
    config = WriterConfig(
        max_shard_bytes=args.max_shard_bytes,
        shard_compression=ShardCompression(args.compression),
        show_progress=not args.quiet,
        validate_cache=args.verify,
    )
    from torch_drt._cli_sets import build_set, under_torchrun

    if args.parts or under_torchrun():
        return build_set(source, args.root, source.name, args.parts, config)
    with DatasetRuntime(1) as runtime:
        (result,) = runtime.write_cache([source], Path(args.root), writer_config=config)
    if isinstance(result, CacheWriteSuccess):
        from torch_drt.cache import open_cache

        print(f"wrote {open_cache(result.path).sample_count} samples to {result.path}")
        return 0
    print(f"error: {result.message}", file=sys.stderr)
    return 1


def _cmd_info(args: argparse.Namespace) -> int:
    from torch_drt._cli_sets import set_info
    from torch_drt.cache import CacheCorruptError, is_cache_set, open_cache

    if is_cache_set(args.path):
        return set_info(args.path, args.json)
    try:
        layout = open_cache(args.path)
    except CacheCorruptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    manifest = json.loads((layout.path / "manifest.json").read_text())
    sizes = sum(s for _, s in layout.shards)
    print(f"path:        {layout.path}")
    print(f"format:      {'dataset-rt' if layout.legacy else 'torch_drt'} version {layout.format_version}")
    print(f"source:      {layout.source_name} (cache_id {layout.cache_id})")
    print(f"samples:     {layout.sample_count}")
    print(f"shards:      {len(layout.shards)}, {sizes:,} bytes, compression {layout.compression}")
    print("schema:      " + ", ".join(f"{n}: {k}" for n, k in layout.schema))
    if args.json:
        print(json.dumps(manifest, indent=2))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from torch_drt._cli_sets import verify_set
    from torch_drt.cache import CacheCorruptError, is_cache_set, open_cache

    status = 0
    for path in args.paths:
        if is_cache_set(path):
            status |= verify_set(path)
            continue
        try:
            layout = open_cache(path, verify=True)
        except CacheCorruptError as e:
            print(f"CORRUPT {e.path}: {e.reason}")
            status = 1
        else:
            print(f"ok      {layout.path} ({len(layout.checksums)} files verified)")
    return status


def _cmd_ls(args: argparse.Namespace) -> int:
    from torch_drt._cli_sets import ls_line
    from torch_drt.cache import CacheCorruptError, open_cache

    root = Path(args.root)
    for entry in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (line := ls_line(entry)) is not None:
            print(line)
            continue
        try:
            layout = open_cache(entry)
            print(f"{entry.name:<30} {layout.sample_count:>10} samples  {sum(s for _, s in layout.shards):>14,} bytes")
        except CacheCorruptError as e:
            print(f"{entry.name:<30} invalid: {e.reason}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    import subprocess

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "run_all.py"
    if not script.exists():
        print(f"error: {script} not found (the benchmarks ship with the source tree)", file=sys.stderr)
        return 2
    command = [sys.executable, str(script), "--report", args.report] + (["--quick"] if args.quick else [])
    return subprocess.call(command)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``torch-drt``."""
    parser = argparse.ArgumentParser(prog="torch-drt", description="torch_drt: fast, resumable data loading.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", help="generate images, build a cache, train a small CNN, checkpoint mid-epoch and resume exactly"
    )
    demo.add_argument("--workdir", default="demo_data", help="cache root (reused across runs)")
    demo.add_argument("--samples", type=int, default=4000)
    demo.add_argument("--batch-size", type=int, default=64)
    demo.add_argument("--steps", type=int, default=300, help="training steps")
    demo.add_argument("--workers", type=int, default=2, help="loader worker threads")
    demo.set_defaults(func=_cmd_demo)

    cache = sub.add_parser("cache", help="build and inspect caches").add_subparsers(dest="cache_command", required=True)
    build = cache.add_parser(
        "build", help="build a cache (or a cache set, also under torchrun) from a directory or a Python source spec"
    )
    build.add_argument("root", help="cache root; the cache (or set) is written to ROOT/NAME")
    build.add_argument("source", nargs="?", help="directory of files (each becomes one sample)")
    build.add_argument("--source-spec", help="package.module:object naming a cache source (or a factory of one)")
    build.add_argument("--name", help="cache name (default: the source directory's name)")
    build.add_argument("--compression", choices=["none", "lz4", "zstd"], default="none")
    build.add_argument("--max-shard-bytes", type=int, default=64 * 1024 * 1024)
    build.add_argument("--verify", action="store_true", help="verify checksums after writing")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.add_argument(
        "--parts", type=int, help="build a cache set of this many parts (under torchrun: default one per rank)"
    )
    build.set_defaults(func=_cmd_build)
    info = cache.add_parser("info", help="print a cache's manifest summary, counts, schema and sizes")
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="also print the whole manifest")
    info.set_defaults(func=_cmd_info)
    verify = cache.add_parser("verify", help="verify every checksum; non-zero exit on corruption")
    verify.add_argument("paths", nargs="+")
    verify.set_defaults(func=_cmd_verify)
    ls = cache.add_parser("ls", help="list the caches under a root")
    ls.add_argument("root")
    ls.set_defaults(func=_cmd_ls)
    bench = sub.add_parser("bench", help="run the benchmark suite and write a Markdown report")
    bench.add_argument("--report", default="benchmark-report.md", help="where to write the report")
    bench.add_argument("--quick", action="store_true", help="fewer repeats and smaller workloads")
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torch-drt`` with ``argv`` (default: the process arguments) and return its exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
