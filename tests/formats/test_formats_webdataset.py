"""WebDatasetShards: the samples webdataset's own reader yields from tars written by its own TarWriter, field by
field, locally (list and brace pattern) and on S3 (moto); through the loader with exact resume; damaged tars are
FormatErrors, never a crash or a silently shorter shard."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from format_fuzz import comparable, damages, outcomes
from s3_server import s3_fixture  # noqa: F401

import torch_drt as drt
from torch_drt.cache.errors import FormatError
from torch_drt.formats import WebDatasetShards
from torch_drt.formats._braces import expand_braces

wds = pytest.importorskip("webdataset")
pytestmark = pytest.mark.timeout(300)


def _write(root: Path, shards: int = 3, per: int = 7) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with wds.TarWriter(str(root / f"train-{s:06d}.tar")) as sink:
            for i in range(s * per, (s + 1) * per):
                sample = {"__key__": f"sample{i:05d}", "cls": str(i % 10).encode(), "txt": f"caption {i}".encode()}
                if i % 2:
                    sample["jpg"] = bytes(range(256)) * (i % 5 + 1)
                if i % 3 == 0:
                    sample["seg.png"] = b"\x89PNG" + bytes([i]) * 30  # a two-part extension
                sink.write(sample)
    return str(root / f"train-{{000000..{shards - 1:06d}}}.tar")


def _theirs(pattern: str) -> list[dict]:
    """webdataset's own reader, in shard order, before decoding."""
    out = []
    for sample in wds.WebDataset(pattern, shardshuffle=False, empty_check=False):
        sample.pop("__local_path__", None)
        out.append(sample)
    return out


def test_samples_equal_webdatasets_own_reader(tmp_path):
    pattern = _write(tmp_path / "wds")
    expected = _theirs(pattern)
    ds = WebDatasetShards(pattern)
    assert len(ds) == 21 and ds.num_shards == 3
    assert [ds[i] for i in range(len(ds))] == expected
    assert ds.__getitems__([20, 3, 7, 0]) == [expected[i] for i in (20, 3, 7, 0)]
    files = sorted(str(p) for p in (tmp_path / "wds").iterdir())
    assert [WebDatasetShards(files)[i] for i in (0, 20)] == [_theirs(files[0])[0], _theirs(files[2])[-1]]


def test_grouping_follows_webdataset_for_odd_members(tmp_path):
    """Directories, metadata members, a key that comes back later, upper-case extensions and names without one."""
    path = tmp_path / "odd.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in [("__meta__", b"m"), ("dir/a.txt", b"1"), ("dir/a.JSON", b"{}"), ("b.txt", b"2"),
                           ("noext", b"x"), ("__skip__/c.txt", b"s"), ("dir/a.cls", b"3"), ("c.tar.gz", b"z")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(_dir_info("subdir"))
    expected = _theirs(str(path))
    ds = WebDatasetShards(path)
    assert [ds[i] for i in range(len(ds))] == expected
    assert [s["__key__"] for s in expected] == ["dir/a", "b", "dir/a", "c"]


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def test_a_repeated_extension_in_one_sample_is_a_format_error(tmp_path):
    path = tmp_path / "dup.tar"
    with tarfile.open(path, "w") as tar:
        for name in ("a.txt", "a.txt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(FormatError, match="twice"):
        WebDatasetShards(path)


def test_compressed_and_non_tar_files_are_refused(tmp_path):
    _write(tmp_path / "wds", shards=1)
    import gzip

    (tmp_path / "x.tar.gz").write_bytes(gzip.compress((tmp_path / "wds" / "train-000000.tar").read_bytes()))
    (tmp_path / "y.tar").write_bytes(b"not a tar at all" * 100)
    for name in ("x.tar.gz", "y.tar"):
        with pytest.raises(FormatError, match="tar"):
            WebDatasetShards(tmp_path / name)


def test_brace_patterns_expand_as_webdataset_expands_them():
    braceexpand = pytest.importorskip("braceexpand")
    for p in ["s-{000..012}.tar", "{a,b}-{1..3}.tar", "s3://b/{train,val}/s-{08..11}.tar", "a{b{c,d},e}f", "{a}",
              "{3..1}x"]:
        assert expand_braces(p) == list(braceexpand.braceexpand(p))
    with pytest.raises(ValueError, match="unbalanced"):
        expand_braces("a{b")
    with pytest.raises(ValueError, match="more than"):
        expand_braces("{0..99999999999}")


def test_loader_resumes_exactly_under_other_workers(tmp_path):
    ds = WebDatasetShards(_write(tmp_path / "wds"))
    common = dict(batch_size=4, shuffle=True, seed=1, collate_fn=list)
    full = [s["__key__"] for b in drt.StatefulDataLoader(ds, **common) for s in b]
    assert sorted(full) == sorted(s["__key__"] for s in _theirs(_write(tmp_path / "wds")))
    loader = drt.StatefulDataLoader(ds, **common, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    head = [s["__key__"] for _ in range(2) for s in next(it)]
    state = loader.state_dict()
    del it
    resumed = drt.StatefulDataLoader(ds, **common, num_workers=3, worker_method="thread")
    resumed.load_state_dict(state)
    assert head + [s["__key__"] for b in resumed for s in b] == full


def test_remote_tars_on_s3(tmp_path, s3):
    import s3fs

    _write(tmp_path / "wds")
    fs = s3fs.S3FileSystem(**s3)
    for f in sorted((tmp_path / "wds").iterdir()):
        fs.put_file(str(f), f"bucket/wds/{f.name}")
    expected = _theirs(str(tmp_path / "wds" / "train-{000000..000002}.tar"))
    ds = WebDatasetShards("s3://bucket/wds/train-{000000..000002}.tar", storage_options=s3, block=4096,
                          remote_config=drt.RemoteConfig(cache_dir=str(tmp_path / "node"), cache_limit=1 << 30))
    got = [ds[i] for i in range(len(ds))]
    assert [{k: v for k, v in s.items() if k != "__url__"} for s in got] == [
        {k: v for k, v in s.items() if k != "__url__"} for s in expected]
    assert got[0]["__url__"] == "s3://bucket/wds/train-000000.tar"
    loader = drt.StatefulDataLoader(ds, batch_size=5, shuffle=True, num_workers=2, multiprocessing_context="fork",
                                    collate_fn=list)
    assert sorted(s["__key__"] for b in loader for s in b) == sorted(s["__key__"] for s in expected)


def test_damaged_tars_are_format_errors_never_crashes(tmp_path):
    """Tar has no checksum over the data (a header has one): a flipped body byte reads as other bytes ("wrong");
    a damaged header or a cut file is a FormatError, never a crash, another error or a silently shorter shard."""
    _write(tmp_path / "clean", shards=1, per=12)
    rel = "train-000000.tar"
    clean = WebDatasetShards(tmp_path / "clean" / rel)
    expected = [comparable(clean[i]) for i in range(len(clean))]
    size = (tmp_path / "clean" / rel).stat().st_size
    opener = f"formats.WebDatasetShards(root + '/{rel}')"
    found = outcomes(tmp_path / "clean", rel, opener, expected, damages(size, 40, 16), tmp_path)
    assert set(found.values()) <= {"FormatError", "ok", "wrong"}, found
    with tarfile.open(tmp_path / "clean" / rel) as tar:
        last = tar.getmembers()[-1]
    end = -(-(last.offset_data + last.size) // 512) * 512 + 512  # the data, then one end-of-archive block
    cut = {k: v for k, v in found.items() if k.startswith("truncate") and int(k.split("@")[1]) < end}
    assert cut and set(cut.values()) == {"FormatError"}, cut


def test_a_tar_cut_at_a_header_is_refused_not_read_short(tmp_path):
    """tarfile ends quietly where a header is missing: the shard must not silently lose its last samples."""
    _write(tmp_path / "wds", shards=1, per=4)
    path = tmp_path / "wds" / "train-000000.tar"
    with tarfile.open(path) as tar:
        third = [m for m in tar.getmembers()][4].offset  # a header boundary inside the archive
    path.write_bytes(path.read_bytes()[:third])
    with pytest.raises(FormatError, match="end-of-archive"):
        WebDatasetShards(path)
