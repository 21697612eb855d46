"""LitDataset: the items LitData's own StreamingDataset reads from datasets its own optimize() wrote (committed
fixtures, made by make_fixtures.py --litdata), field by field for every serializer used, plain and zstd; on S3
(moto); through the loader with exact resume; damaged bytes are typed errors, never a crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from canon import canon
from format_fuzz import CANONICAL, canonical_expected, canonical_rows, damages, outcomes
from s3_server import s3_fixture  # noqa: F401

import torch_drt as drt
from torch_drt.cache.errors import FormatError, UnsafeEncodingError
from torch_drt.formats import LitDataset

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parent / "fixtures" / "litdata"


def _expected(name: str) -> list:
    return json.loads((FIXTURES / name / "expected.json").read_text())


@pytest.mark.parametrize("name", ["plain", "zstd"])
def test_items_equal_litdatas_own_reader(name):
    ds = LitDataset(FIXTURES / name)
    expected = _expected(name)
    assert len(ds) == len(expected) and ds.num_shards == 3
    assert [canon(ds[i]) for i in range(len(ds))] == expected
    assert [canon(s) for s in ds.__getitems__([4, 0, 2])] == [expected[i] for i in (4, 0, 2)]


def test_the_fixtures_cover_the_serializers():
    formats = json.loads((FIXTURES / "plain" / "index.json").read_text())["config"]["data_format"]
    assert {f.split(":")[0] for f in formats} == {"int", "float", "str", "bytes", "bool", "numpy", "no_header_numpy",
                                                  "tensor", "no_header_tensor", "pil"}


def test_pickled_leaves_are_refused_unless_allowed():
    with pytest.raises(UnsafeEncodingError, match="allow_pickle"):
        LitDataset(FIXTURES / "pickled")
    ds = LitDataset(FIXTURES / "pickled", allow_pickle=True)
    assert [canon(ds[i]) for i in range(len(ds))] == _expected("pickled")


@pytest.mark.parametrize(("change", "match"), [
    ({"compression": "zstd", "compression_level": "batch"}, "zstd of whole chunks only"),
    ({"encryption": "fernet"}, "encrypted"),
    ({"item_loader": "TokensLoader"}, "PyTreeLoader only"),
    ({"data_format": ["video"] * 13}, "not read by torch_drt"),
    ({"data_spec": "[1, {\"type\": \"builtins.set\", \"context\": null, \"children_spec\": []}]"}, "builtins.set"),
])
def test_what_is_not_read_here_is_refused_by_name(tmp_path, change, match):
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES / "plain", root)
    index = json.loads((root / "index.json").read_text())
    index["config"].update(change)
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=match):
        LitDataset(root)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("chunk_size", 2**31, "shorter than the header"),
    ("chunk_bytes", 10**6, "index.json records"),
    ("filename", "../x.bin", "outside"),
])
def test_hostile_chunk_entries_are_format_errors(tmp_path, field, value, match):
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES / "plain", root)
    index = json.loads((root / "index.json").read_text())
    index["chunks"][0][field] = value
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=match):
        LitDataset(root)[0]


def test_the_loader_shuffles_and_resumes_exactly():
    ds = LitDataset(FIXTURES / "plain")
    common = dict(batch_size=2, shuffle=True, seed=4, collate_fn=list)
    full = [s["i"] for b in drt.StatefulDataLoader(ds, **common) for s in b]
    assert sorted(full) == sorted(e["dict"]["i"]["int"] for e in _expected("plain"))
    loader = drt.StatefulDataLoader(ds, **common, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    head = [s["i"] for s in next(it)]
    state = loader.state_dict()
    del it
    resumed = drt.StatefulDataLoader(ds, **common, num_workers=1, worker_method="thread")
    resumed.load_state_dict(state)
    assert head + [s["i"] for b in resumed for s in b] == full


def test_remote_litdata_on_s3(tmp_path, s3):
    import s3fs

    fs = s3fs.S3FileSystem(**s3)
    for name in ("plain", "zstd"):
        for f in sorted((FIXTURES / name).iterdir()):
            fs.put_file(str(f), f"bucket/litdata/{name}/{f.name}")
    config = drt.RemoteConfig(cache_dir=str(tmp_path / "node"), cache_limit=1 << 30)
    ds = LitDataset(["s3://bucket/litdata/plain", "s3://bucket/litdata/zstd"], storage_options=s3,
                    remote_config=config)
    assert [canon(ds[i]) for i in range(len(ds))] == _expected("plain") + _expected("zstd")


@pytest.mark.parametrize(("name", "rel", "allowed"), [
    ("zstd", "chunk-0-0.zstd.bin", {"FormatError", "ok", "wrong"}),  # LitData records no checksums
    ("plain", "chunk-0-1.bin", {"FormatError", "ok", "wrong"}),
    ("plain", "index.json", {"FormatError", "MissingFile", "ok", "wrong"}),
])
def test_damaged_litdata_files_are_typed_errors_never_crashes(tmp_path, name, rel, allowed):
    size = (FIXTURES / name / rel).stat().st_size
    assert canonical_rows(LitDataset(FIXTURES / name)) == canonical_expected(_expected(name))
    found = outcomes(FIXTURES / name, rel, "_canonical(formats.LitDataset(root))", canonical_expected(_expected(name)),
                     damages(size, 30, 10), tmp_path, prelude=CANONICAL)
    assert set(found.values()) <= allowed, {k: v for k, v in found.items() if v not in allowed}
    assert "FormatError" in found.values()
