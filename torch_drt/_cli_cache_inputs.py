"""What the ``cache`` subcommands take: a source (a directory or ``--source-spec``), locations (paths or URLs) and
``--storage-options``; every bad value is a one-line ``CliError`` (status 2)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torch_drt._cli_common import CliError, existing_dir, json_object

_OPTIONS_HELP = 'fsspec options for URLs, e.g. \'{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}\''


class DirectorySource:
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


def load_spec(spec: str, name: str | None) -> Any:
    """``package.module:object``: a cache source, or a callable returning one."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"--source-spec {spec!r} must look like package.module:object", 2)
    sys.path.insert(0, str(Path.cwd()))
    try:
        obj = getattr(importlib.import_module(module_name), attr)
        source = obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "__iter__")) else obj
    except (ImportError, AttributeError) as e:
        raise CliError(f"--source-spec {spec}: {type(e).__name__}: {e}", 2) from e
    if name is not None:
        source.name = name
    if not hasattr(source, "name") or not hasattr(source, "__iter__"):
        raise CliError(f"--source-spec {spec} is not a cache source (an object with name and __iter__)", 2)
    return source


def build_source(args: argparse.Namespace) -> Any:
    if args.source_spec and args.source:
        raise CliError("give a SOURCE directory or --source-spec, not both", 2)
    if args.source_spec:
        return load_spec(args.source_spec, args.name)
    if not args.source:
        raise CliError("cache build: no source given: name a SOURCE directory of files after ROOT, or give "
                       "--source-spec MODULE:OBJECT (see torch-drt cache build --help)", 2)
    source_dir = Path(args.source)
    if not source_dir.is_dir():
        raise CliError(f"{args.source!r} is not a directory (or give --source-spec)", 2)
    return DirectorySource(source_dir, args.name or source_dir.name)


def add_storage_options(command: argparse.ArgumentParser, help: str = _OPTIONS_HELP) -> None:
    """Declare ``--storage-options JSON`` on ``command`` (read back with ``storage_options``)."""
    command.add_argument("--storage-options", metavar="JSON", help=help)


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--storage-options``: fsspec options for URLs, as a JSON object."""
    return json_object(getattr(args, "storage_options", None), "--storage-options")


def location(path: str) -> Path | str:
    """A cache URL as it is; a local path must be an existing directory."""
    from torch_drt.locations.location import is_url

    return path if is_url(path) else existing_dir(path)


def published(url: str, options: dict[str, Any] | None) -> bool:
    """True when a cache manifest is at ``url``."""
    from torch_drt.locations.remote_store import RemoteStore

    try:
        return RemoteStore(url, options).read_or_none("manifest.json", 1) is not None
    except ValueError as e:
        raise CliError(str(e), 2) from None
