"""torch_drt.formats.convert and ``torch-drt convert``: each format written as a torch_drt cache, read back field by
field against each system's own reader (MDS and LitData: the committed fixtures' ``expected.json``, which their own
readers wrote; WebDataset: webdataset's own loader; Parquet and Arrow: pyarrow); a source on S3 (moto) written to
S3; damaged or pickled input is a typed error and nothing is published; an existing cache is never touched."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arrow_tables import write_ipc, write_parquet
from canon import canon
from s3_server import s3_fixture  # noqa: F401

import torch_drt as drt
from torch_drt.cache import open_cache
from torch_drt.cache.errors import FormatError, UnsafeEncodingError
from torch_drt.cli import main
from torch_drt.formats import ConvertError, convert, sample_fields

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parent / "fixtures"
QUIET = drt.WriterConfig(show_progress=False)


def _cache_samples(path, **where) -> list[dict]:
    """Every sample of the cache at ``path``, in order, as its fields (metadata and decoded payload)."""
    ds = drt.DatasetRuntime(1).cached_dataset([path], reader_config=drt.ReaderConfig(seed=0), **where)
    cache_id = ds.get_metadata()["cache_id"][0].as_py()
    return [sample_fields(ds.get_item(cache_id, i)) for i in range(len(ds))]


def _canon(sample: dict, name: str) -> object:
    """As the fixture's expected.json has it (MDS: a dict of canonical fields; LitData: the canonical item)."""
    return {k: canon(v) for k, v in sample.items()} if name.startswith("mds") else canon(sample)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["mds/plain", "mds/hashed_zstd", "mds/gz", "litdata/plain", "litdata/zstd"])
def test_mds_and_litdata_read_back_as_their_own_readers_read_them(tmp_path, name):
    done = convert(FIXTURES / name, tmp_path / "cache", writer_config=QUIET)
    expected = json.loads((FIXTURES / name / "expected.json").read_text())
    assert done.samples == len(expected) and done.path == tmp_path / "cache"
    assert [_canon(s, name) for s in _cache_samples(done.path)] == expected
    assert set(done.columns) == ({"i", "s", "sf", "si"} if name.startswith("mds") else {"i", "f", "s", "flag"})
    assert open_cache(done.path, verify=True).sample_count == len(expected)


def test_webdataset_reads_back_as_webdatasets_own_loader(tmp_path):
    wds = pytest.importorskip("webdataset")
    (tmp_path / "shards").mkdir()
    for s in range(3):
        with wds.TarWriter(str(tmp_path / "shards" / f"train-{s:06d}.tar")) as sink:
            for i in range(s * 5, s * 5 + 5):
                sink.write({"__key__": f"k{i:04d}", "cls": str(i % 3).encode(), "jpg": bytes([i]) * (i + 1)})
    pattern = str(tmp_path / "shards" / "train-{000000..000002}.tar")
    done = convert(pattern, tmp_path / "cache", payload="jpg", metadata=["__key__"], drop=["__url__", "cls"],
                   writer_config=QUIET)
    assert done.columns == {"key": "__key__"} and done.payload == "jpg"
    own = list(wds.WebDataset(pattern, shardshuffle=False))
    got = _cache_samples(done.path)
    assert [(s["key"], s["data"]) for s in got] == [(o["__key__"], o["jpg"]) for o in own]
    every = convert(pattern, tmp_path / "every", writer_config=QUIET)  # default: every field kept
    got = _cache_samples(every.path)
    assert [{k: s[k] for k in ("key", "cls", "jpg")} for s in got] == [
        {"key": o["__key__"], "cls": o["cls"], "jpg": o["jpg"]} for o in own]


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_parquet_and_arrow_read_back_as_pyarrow_reads_them(tmp_path, kind):
    (tmp_path / "src").mkdir()
    if kind == "parquet":
        table = write_parquet(tmp_path / "src" / "a.parquet", 17)
    else:
        table = write_ipc(tmp_path / "src" / "a.arrow", 17)
    rows = (pq.read_table if kind == "parquet" else lambda p: pa.ipc.open_file(p).read_all())(
        str(next((tmp_path / "src").iterdir()))).to_pylist()
    assert rows == table.to_pylist()
    done = convert(tmp_path / "src", tmp_path / "cache", writer_config=QUIET)
    assert "maybe" not in done.columns  # None in the first row: the payload keeps it
    assert [canon(s) for s in _cache_samples(done.path)] == [canon(r) for r in rows]


def test_a_metadata_field_that_changes_kind_is_a_convert_error_naming_the_sample(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"x": [1, 2, None, 4], "b": [b"a"] * 4}), tmp_path / "src" / "a.parquet")
    with pytest.raises(ConvertError, match=r"sample 2: field 'x' is NoneType"):
        convert(tmp_path / "src", tmp_path / "cache", writer_config=QUIET)
    assert not (tmp_path / "cache").exists() and not list(tmp_path.glob(".staging*"))
    done = convert(tmp_path / "src", tmp_path / "cache", metadata=[], writer_config=QUIET)
    assert [s["x"] for s in _cache_samples(done.path)] == [1, 2, None, 4]


def test_unusable_mappings_are_convert_errors(tmp_path):
    src = FIXTURES / "mds" / "plain"
    with pytest.raises(ConvertError, match="not a field"):
        convert(src, tmp_path / "a", payload="nope", writer_config=QUIET)
    with pytest.raises(ConvertError, match=r"payload field 'arr' is ndarray, not bytes"):
        convert(src, tmp_path / "b", payload="arr", writer_config=QUIET)
    with pytest.raises(ConvertError, match="neither metadata nor the payload"):
        convert(src, tmp_path / "c", payload="b", writer_config=QUIET)
    (tmp_path / "w").mkdir()
    pq.write_table(pa.table({"weight": [1.0], "b": [b"x"]}), tmp_path / "w" / "a.parquet")
    with pytest.raises(ConvertError, match="'weight' cannot be a metadata column"):
        convert(tmp_path / "w", tmp_path / "d", writer_config=QUIET)
    assert not any(p.name in "abcd" for p in tmp_path.iterdir())


def test_pickled_sources_are_refused_unless_allowed(tmp_path):
    with pytest.raises(UnsafeEncodingError, match="allow_pickle"):
        convert(FIXTURES / "litdata" / "pickled", tmp_path / "cache", writer_config=QUIET)
    assert not (tmp_path / "cache").exists()
    done = convert(FIXTURES / "litdata" / "pickled", tmp_path / "cache", allow_pickle=True, writer_config=QUIET)
    expected = json.loads((FIXTURES / "litdata" / "pickled" / "expected.json").read_text())
    assert [canon(s) for s in _cache_samples(done.path)] == expected


def test_a_damaged_shard_is_a_format_error_and_nothing_is_published(tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "mds" / "hashed_zstd", src)
    shard = sorted(p for p in src.iterdir() if p.name.endswith(".zstd"))[-1]
    body = bytearray(shard.read_bytes())
    body[len(body) // 2] ^= 0x40
    shard.write_bytes(bytes(body))
    with pytest.raises(FormatError, match=shard.name.split(".")[0]):
        convert(src, tmp_path / "caches" / "out", writer_config=QUIET)
    assert not (tmp_path / "caches" / "out").exists()
    assert not list((tmp_path / "caches").glob(".staging*"))


def test_an_existing_cache_is_never_touched(tmp_path):
    done = convert(FIXTURES / "litdata" / "plain", tmp_path / "cache", writer_config=QUIET)
    before = _tree(done.path)
    with pytest.raises(FileExistsError, match="already exists"):
        convert(FIXTURES / "mds" / "plain", tmp_path / "cache", writer_config=QUIET)
    assert main(["convert", str(FIXTURES / "mds" / "plain"), str(tmp_path / "cache"), "--quiet"]) == 1
    assert _tree(done.path) == before


def test_remote_source_to_remote_cache_on_s3(tmp_path, s3):
    import s3fs

    fs = s3fs.S3FileSystem(**s3)
    for f in sorted((FIXTURES / "mds" / "hashed_zstd").iterdir()):
        fs.put_file(str(f), f"bucket/conv/mds/{f.name}")
    config = drt.RemoteConfig(cache_dir=str(tmp_path / "node"), staging_dir=str(tmp_path))
    done = convert("s3://bucket/conv/mds", "s3://bucket/conv/caches/mds", storage_options=s3, remote_config=config,
                   writer_config=QUIET)
    assert done.path == "s3://bucket/conv/caches/mds"
    expected = json.loads((FIXTURES / "mds" / "hashed_zstd" / "expected.json").read_text())
    got = _cache_samples(done.path, storage_options=s3, remote_config=config)
    assert [_canon(s, "mds") for s in got] == expected
    manifest = fs.cat_file("bucket/conv/caches/mds/manifest.json")
    with pytest.raises(FileExistsError):
        convert("s3://bucket/conv/mds", "s3://bucket/conv/caches/mds", storage_options=s3, writer_config=QUIET)
    assert fs.cat_file("bucket/conv/caches/mds/manifest.json") == manifest
    # and through the command line, JSON only on stdout, local destination
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        status = main(["convert", "s3://bucket/conv/mds", str(tmp_path / "local"), "--json",
                       "--storage-options", json.dumps(s3)])
    assert status == 0
    summary = json.loads(out.getvalue())
    assert summary["samples"] == len(expected) and summary["format"] == "mds"
    # top-level info tells a cache URL (cache info) from a foreign dataset's URL (formats info)
    for url, key, value in (("s3://bucket/conv/caches/mds", "sample_count", len(expected)),
                            ("s3://bucket/conv/mds", "format", "mds")):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["info", url, "--json", "--storage-options", json.dumps(s3)]) == 0
        assert json.loads(out.getvalue())[key] == value


def test_cli_convert_and_top_level_info_verify(tmp_path, capsys):
    src = FIXTURES / "litdata" / "plain"
    assert main(["convert", str(src), str(tmp_path / "c"), "--json", "--metadata", "i,s"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["columns"] == {"i": "i", "s": "s"} and "f" in summary["payload_fields"]
    assert main(["info", str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sample_count"] == 7
    assert main(["info", str(src), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "litdata"
    assert main(["verify", str(tmp_path / "c"), str(src)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok") == 2
    assert main(["convert", str(FIXTURES / "litdata" / "pickled"), str(tmp_path / "p")]) == 1
    assert "UnsafeEncodingError" in capsys.readouterr().err and not (tmp_path / "p").exists()


def test_the_source_streams_shard_by_shard_a_batch_at_a_time():
    from torch_drt.formats.convert import _Source
    from torch_drt.formats.shard_set import ShardSet

    class Counting(ShardSet):
        def __init__(self):
            super().__init__([100] * 50, [f"s{k}" for k in range(50)], cache_shards=1)
            self.loads: list[int] = []

        def _load(self, shard):
            self.loads.append(shard)
            return shard

        def _sample(self, decoded, shard, index):
            return {"shard": decoded, "index": index, "blob": b"x"}

    ds = Counting()
    source = _Source(ds, "c", ["shard", "index"], None, (), batch=8)
    it = iter(source)
    first = [next(it) for _ in range(250)]
    assert ds.loads == [0, 1, 2]  # shards in order, each decoded once; nothing read ahead of the writer
    assert first[249].metadata == {"shard": 2, "index": 49}
    assert len(list(it)) == 5000 - 250 and ds.loads == list(range(50))
