"""One owner decides local path vs URL: ``torch_drt.locations.location.Location``; every entry point agrees with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_drt.locations.location import Location, is_url


@pytest.mark.parametrize(
    ("given", "target"),
    [
        ("data/cache", Path("data/cache")),
        (Path("/x/y"), Path("/x/y")),
        ("file:///x/y", Path("/x/y")),
        ("FILE:///x/y", Path("/x/y")),
        ("local:///x/y", Path("/x/y")),
        ("s3://bucket/caches/", "s3://bucket/caches"),
        ("https://host:8080/a/b", "https://host:8080/a/b"),
        ("weird/dir://name", Path("weird/dir://name")),  # a path whose "scheme" holds a slash is a path
    ],
)
def test_parse_decides_local_or_remote_once(given, target):
    location = Location.parse(given)
    assert location.target == target
    assert location.is_remote == isinstance(target, str) == is_url(given if isinstance(given, str) else None)


def test_options_travel_but_never_show_or_compare():
    secret = {"key": "AKIA-SECRET", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    a = Location.parse("s3://bucket/c", storage_options=secret)
    assert a.storage_options is secret and a == Location.parse("s3://bucket/c")
    assert "SECRET" not in repr(a) and "SECRET" not in str(a) and "SECRET" not in a.redacted()
    assert Location.parse(a) is a and Location.parse(a, remote_config=1).storage_options is secret
    assert Location.parse("https://u:pw@host/p?token=t").redacted() == "https://host/p"


def test_join_and_accessors():
    assert Location.parse("s3://b/sets/one").join("../parts/p0").target == "s3://b/sets/parts/p0"
    assert Location.parse("/sets/one").join("../parts/p0").target == Path("/sets/parts/p0")
    assert Location.parse("gs://b/x").scheme == "gs" and Location.parse("/x").scheme == "file"
    with pytest.raises(ValueError, match="remote location"):
        _ = Location.parse("s3://b/x").path
    with pytest.raises(ValueError, match="local path"):
        _ = Location.parse("/x").url
    with pytest.raises(TypeError, match="got int"):
        Location.parse(3)  # type: ignore[arg-type]


def test_every_entry_point_reads_file_urls_as_local_paths(tmp_path):
    """``file://`` was a URL in lightning.py and build/part.py and a path elsewhere."""
    from torch_drt.build.part import Location as PartLocation
    from torch_drt.cache.errors import CacheCorruptError
    from torch_drt.lightning import _location
    from torch_drt.locations import LocalBackend, backend_for

    assert PartLocation is Location
    assert _location(f"file://{tmp_path}") == tmp_path
    assert isinstance(backend_for(f"file://{tmp_path}"), LocalBackend)
    assert CacheCorruptError(f"file://{tmp_path}/m.json", "bad").path == tmp_path / "m.json"
    assert CacheCorruptError("s3://b/m.json", "bad").path == "s3://b/m.json"


@pytest.mark.parametrize(
    ("given", "parent", "name"),
    [
        ("s3://bucket/dir/a.parquet", "s3://bucket/dir", "a.parquet"),
        ("s3://bucket", "s3://", "bucket"),
        ("file:///data/a.parquet", Path("/data"), "a.parquet"),
        ("data/a.parquet", Path("data"), "a.parquet"),
    ],
)
def test_parent_and_name(given, parent, name):
    location = Location.parse(given, storage_options={"k": 1})
    assert (location.parent.target, location.name) == (parent, name)
    assert location.parent.storage_options == {"k": 1}


def test_split_protocol_is_the_one_scheme_test():
    from torch_drt.locations.location import split_protocol

    assert split_protocol("S3://b/k") == ("s3", "b/k")
    assert split_protocol("file:///x") == ("file", "/x")
    assert split_protocol("weird/dir://name") == ("", "weird/dir://name")
    assert split_protocol("mod:function") == ("", "mod:function")


def test_no_module_but_the_owner_looks_for_a_scheme_separator():
    """Whether a string is a URL is decided by ``torch_drt._protocol.split_protocol`` only; ``sources/_urls.py``
    parses and redacts HTTP URLs (after the decision, never making it)."""
    import ast

    import torch_drt

    root = Path(torch_drt.__file__).parent
    owners = {"_protocol.py", "sources/_urls.py"}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        if rel in owners:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):  # "://" in x, x == "://"
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # x.split("://") ...
                operands = list(node.args)
            else:
                continue
            if any(isinstance(o, ast.Constant) and o.value == "://" for o in operands):
                found.append(f"{rel}:{node.lineno}")
    assert found == []
