"""The index of a WebDataset tar: kept in the node cache for a remote tar (a warm open reads no tar and sends no
request per tar), a kept copy treated as hostile input (checked before use, read within a bound, rebuilt when
unsound), and every field's tar header checked against the index as it is read (a forged or stale index is a
FormatError, never other bytes returned as the field)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, remote_config, unique  # noqa: F401
from remote_servers import upload_tree

from torch_drt.cache.errors import FormatError
from torch_drt.formats import WebDatasetShards
from torch_drt.formats._files import Files
from torch_drt.formats._tar_index import index_tar
from torch_drt.formats._tar_kept import decode, encode, kept_limit

wds = pytest.importorskip("webdataset")
pytestmark = pytest.mark.timeout(300)


def _write(root: Path, shards: int = 2, per: int = 5) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with wds.TarWriter(str(root / f"train-{s:06d}.tar")) as sink:
            for i in range(s * per, (s + 1) * per):
                sink.write({"__key__": f"sample{i:05d}", "cls": str(i % 10).encode(), "txt": f"caption {i}".encode()})
    return root


def _theirs(pattern: str) -> list[dict]:
    out = []
    for sample in wds.WebDataset(pattern, shardshuffle=False, empty_check=False):
        sample.pop("__local_path__", None)
        sample.pop("__url__", None)
        out.append(sample)
    return out


def _all(ds) -> list[dict]:
    return [{k: v for k, v in ds[i].items() if k != "__url__"} for i in range(len(ds))]


def _index_of(path: Path):
    file = Files(None, None).open(str(path.parent), path.name)
    try:
        return index_tar(file, 1 << 20), file.size
    finally:
        file.close()


def test_a_kept_index_round_trips_and_unsound_copies_are_refused(tmp_path):
    index, size = _index_of(_write(tmp_path) / "train-000000.tar")
    good = json.loads(encode(index))
    keys, first, exts, starts, ends = decode(encode(index), size)
    assert (keys, exts, first.tolist(), starts.tolist(), ends.tolist()) == (
        good["keys"], good["exts"], good["first"], good["starts"], good["ends"])

    def variant(**change) -> bytes:
        return json.dumps({**good, **change}).encode()

    s, e = good["starts"], good["ends"]
    bad = {
        "not json": b"{",
        "a list": b"[]",
        "a key more": variant(extra=1),
        "an int key": variant(keys=[1, *good["keys"][1:]]),
        "a float start": variant(starts=[float(s[0]), *s[1:]]),
        "a bool end": variant(ends=[True, *e[1:]]),
        "past int64": variant(ends=[*e[:-1], 1 << 70]),
        "nested deep": b"[" * 100_000 + b"]" * 100_000,
        "a sample without fields": variant(first=[0, 0, *good["first"][2:]]),
        "lists of other lengths": variant(keys=good["keys"][:-1]),
        "a start off a block": variant(starts=[s[0] + 1, *s[1:]]),
        "fields overlapping": variant(starts=[s[0], s[0], *s[2:]], ends=[e[0], e[0], *e[2:]]),
        "past the tar": variant(ends=[*e[:-1], size + 1]),
        "no room for the end block": variant(starts=[*s[:-1], size - 512], ends=[*e[:-1], size - 1]),
        "neighbours under one key": variant(keys=[good["keys"][0]] * len(good["keys"])),
        "an extension twice": variant(exts=[good["exts"][0]] * len(good["exts"])),
        "an extension with a slash": variant(exts=["a/b", *good["exts"][1:]]),
        "an empty key": variant(keys=["", *good["keys"][1:]]),
        "more than the bound": encode(index) + b" " * kept_limit(size),
    }
    for what, data in bad.items():
        with pytest.raises(ValueError):
            decode(data, size)
            pytest.fail(f"{what}: accepted")


def test_a_warm_node_opens_remote_tars_without_reading_them(tmp_path, moto_endpoint, proxy):
    """The cold open reads each tar (to index it); a later open on the node, another process say, sends the one
    listing and no request for any tar (no GET, no HEAD)."""
    root = _write(tmp_path / "wds", shards=3)
    name = unique("wds-warm")
    upload_tree(root, moto_endpoint, f"{BUCKET}/{name}")
    url = f"s3://{BUCKET}/{name}/train-{{000000..000002}}.tar"
    config = remote_config(tmp_path)
    expected = _theirs(str(root / "train-{000000..000002}.tar"))
    proxy.reset()
    assert _all(WebDatasetShards(url, storage_options=options(proxy), remote_config=config)) == expected
    assert all(proxy.gets[f"/{BUCKET}/{name}/train-{s:06d}.tar"] for s in range(3))
    proxy.reset()
    ds = WebDatasetShards(url, storage_options=options(proxy), remote_config=config)
    assert len(ds) == 15
    tars = {p: n for p, n in proxy.gets.items() if p.endswith(".tar")}
    assert tars == {} and proxy.requests.get("HEAD", 0) == 0, (tars, dict(proxy.requests))
    assert sum(proxy.requests.values()) == 1  # the listing


def _kept(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "node-cache").rglob("*") if p.is_file() and p.parent.name == "small")


def test_a_kept_index_that_does_not_fit_its_tar_is_an_error_then_rebuilt(tmp_path, moto_endpoint, proxy):
    """A kept index that is sound but names other members (forged keys, a field moved a block on) is found by the
    headers as the samples are read: a FormatError, the copy dropped, the next open right again. One that is
    unsound, too large or no file at all is rebuilt at open; a tar replaced at the store is indexed again."""
    root = _write(tmp_path / "wds", shards=1)
    name = unique("wds-kept")
    upload_tree(root, moto_endpoint, f"{BUCKET}/{name}")
    url = f"s3://{BUCKET}/{name}/train-000000.tar"
    config = remote_config(tmp_path)
    expected = _theirs(str(root / "train-000000.tar"))

    def dataset() -> WebDatasetShards:
        return WebDatasetShards(url, storage_options=options(proxy), remote_config=config)

    assert _all(dataset()) == expected
    (kept,) = _kept(tmp_path)
    good = json.loads(kept.read_text())
    forgeries = [{"keys": [f"forged{i}" for i in range(5)]},
                 {"starts": [*good["starts"][:-1], good["starts"][-1] + 512],
                  "ends": [*good["ends"][:-1], good["ends"][-1] + 512]}]
    for forged in forgeries:
        kept.write_text(json.dumps({**good, **forged}))
        ds = dataset()
        with pytest.raises(FormatError, match="kept in the node cache"):
            _all(ds)
        assert not kept.exists()
        assert _all(dataset()) == expected
    for unsound in (json.dumps({**good, "ends": [10**12] * len(good["ends"])}), "[" * 10_000,
                    json.dumps(good) + " " * kept_limit(tmp_path.joinpath("wds/train-000000.tar").stat().st_size)):
        kept.write_text(unsound)
        assert _all(dataset()) == expected
        assert json.loads(kept.read_text()) == good  # rebuilt, and kept again
    kept.unlink()
    os.mkfifo(kept)  # no file: reading it would wait for a writer forever
    opened: list = []
    opening = threading.Thread(target=lambda: opened.append(_all(dataset())), daemon=True)
    opening.start()
    opening.join(60)
    if opening.is_alive():
        with open(kept, "wb"):  # let the reader go
            pass
        pytest.fail("opening waited on a FIFO in place of the kept index")
    assert opened == [expected]
    with wds.TarWriter(str(tmp_path / "other.tar")) as sink:
        for i in range(3):
            sink.write({"__key__": f"other{i}", "txt": b"x"})
    upload_tree_file = tmp_path / "replaced"
    upload_tree_file.mkdir()
    (tmp_path / "other.tar").rename(upload_tree_file / "train-000000.tar")
    upload_tree(upload_tree_file, moto_endpoint, f"{BUCKET}/{name}")
    assert [s["__key__"] for s in _all(dataset())] == ["other0", "other1", "other2"]


def test_a_local_tar_changed_after_opening_is_a_format_error_not_other_bytes(tmp_path):
    """The index made at open names members; the same-sized tar written over it later holds others."""
    def tar(path: Path, prefix: str) -> None:
        with wds.TarWriter(str(path)) as sink:
            for i in range(4):
                sink.write({"__key__": f"{prefix}{i:03d}", "txt": f"{prefix} {i}".encode()})

    tar(tmp_path / "a.tar", "aaaa")
    tar(tmp_path / "b.tar", "bbbb")
    assert (tmp_path / "a.tar").stat().st_size == (tmp_path / "b.tar").stat().st_size
    ds = WebDatasetShards(tmp_path / "a.tar")
    (tmp_path / "a.tar").write_bytes((tmp_path / "b.tar").read_bytes())
    with pytest.raises(FormatError, match="does not fit the index"):
        ds[1]


def test_long_and_non_ascii_names_read_as_webdataset_reads_them(tmp_path):
    """Names held in extended headers (pax, GNU long names) pass the header check: no false alarm."""
    long_key = "d" * 70 + "/" + "k" * 90
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        path = tmp_path / f"names-{fmt}.tar"
        with tarfile.open(path, "w", format=fmt) as out:
            for name, data in [(f"{long_key}.txt", b"1"), (f"{long_key}.JPG", b"22"), ("café.txt", b"3"),
                               ("plain.seg.png", b"4")]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))
        expected = _theirs(str(path))
        assert [s["__key__"] for s in expected] == [long_key, "café", "plain"]
        assert _all(WebDatasetShards(path)) == expected


def test_the_fast_header_walk_finds_what_tarfile_finds(tmp_path):
    """The walk over plain ustar and pax headers (what TarWriter writes) lists the members tarfile lists, or leaves
    the tar to tarfile; webdataset's own tars take the walk."""
    from torch_drt.formats._file_reads import RangeReader
    from torch_drt.formats._tar_index import _plain_members, _tarfile_members

    _write(tmp_path / "wds", shards=1)
    tars = {"webdataset": tmp_path / "wds" / "train-000000.tar"}
    for fmt, label in ((tarfile.PAX_FORMAT, "pax"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.USTAR_FORMAT, "ustar")):
        tars[label] = path = tmp_path / f"{label}.tar"
        with tarfile.open(path, "w", format=fmt) as out:
            names = ["__meta__", "dir/a.txt", "b" * 120 + ".txt" if fmt != tarfile.USTAR_FORMAT else "p/" * 60 + "c.t",
                     "café.JPG", "big.bin"]
            for name in names:
                info = tarfile.TarInfo(name)
                data = b"x" * (700 if name == "big.bin" else 3)
                info.size = len(data)
                info.mtime = 1.5 if fmt == tarfile.PAX_FORMAT else 1
                out.addfile(info, io.BytesIO(data))
            for kind, name in ((tarfile.DIRTYPE, "sub"), (tarfile.SYMTYPE, "link.txt")):
                info = tarfile.TarInfo(name)
                info.type = kind
                out.addfile(info)
    walked = {}
    for label, path in tars.items():
        file = Files(None, None).open(str(path.parent), path.name)
        try:
            found = _plain_members(RangeReader(file), file.size)
            if found is not None:
                assert found == _tarfile_members(RangeReader(file)), label
            walked[label] = found is not None
        finally:
            file.close()
    assert walked["webdataset"] and walked["pax"] and walked["ustar"] and not walked["gnu"], walked
