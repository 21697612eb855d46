"""MDSDataset: the samples MosaicML Streaming's own reader decodes from datasets its own MDSWriter wrote (committed
fixtures, made by make_fixtures.py), field by field for every encoding, raw and compressed, with and without
hashes; locally and on S3 (moto); through the loader with exact resume; damaged bytes are typed errors."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from canon import canon
from format_fuzz import CANONICAL, canonical_expected, canonical_rows, damages, outcomes
from s3_server import s3_fixture  # noqa: F401

import torch_drt as drt
from torch_drt.cache.errors import FormatError, UnsafeEncodingError
from torch_drt.formats import MDSDataset

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parent / "fixtures" / "mds"
DATASETS = ["plain", "hashed_zstd", "gz", "bz2"]


def _expected(name: str) -> list[dict]:
    return json.loads((FIXTURES / name / "expected.json").read_text())


def _canon(sample: dict) -> dict:
    return {k: canon(v) for k, v in sample.items()}


@pytest.mark.parametrize("name", DATASETS)
def test_samples_equal_streamings_own_reader(name):
    ds = MDSDataset(FIXTURES / name)
    expected = _expected(name)
    assert len(ds) == len(expected)
    assert [_canon(ds[i]) for i in range(len(ds))] == expected
    order = list(reversed(range(len(ds))))
    assert [_canon(s) for s in ds.__getitems__(order)] == [expected[i] for i in order]


def test_every_safe_encoding_is_covered_by_the_fixtures():
    index = json.loads((FIXTURES / "plain" / "index.json").read_text())
    encodings = {e.split(":")[0] for e in index["shards"][0]["column_encodings"]}
    assert encodings >= {"bytes", "str", "int", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                         "int64", "float16", "float32", "float64", "str_int", "str_float", "str_decimal", "ndarray",
                         "json", "pil", "jpeg", "png", "list[png]", "jpeg_array"}


def test_images_stay_bytes_when_asked():
    ds = MDSDataset(FIXTURES / "plain", decode_images=False)
    sample = ds[0]
    assert isinstance(sample["jpg"], bytes) and sample["jpg"][:2] == b"\xff\xd8"
    assert isinstance(sample["png"], bytes) and sample["png"][:4] == b"\x89PNG"


def test_pickled_columns_are_refused_unless_allowed():
    with pytest.raises(UnsafeEncodingError, match=r"'obj'.*allow_pickle"):
        MDSDataset(FIXTURES / "pickled")
    ds = MDSDataset(FIXTURES / "pickled", allow_pickle=True)
    assert [ds[i] for i in range(3)] == [{"s": str(i), "obj": {"set": {i, i + 1}}} for i in range(3)]


def test_a_hash_mismatch_is_a_format_error(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES / "gz", root)
    index = json.loads((root / "index.json").read_text())
    index["shards"][0]["zip_data"]["hashes"]["md5"] = hashlib.md5(b"other").hexdigest()
    (root / "index.json").write_text(json.dumps(index))
    ds = MDSDataset(root)
    with pytest.raises(FormatError, match="md5"):
        ds[0]


@pytest.mark.parametrize(("field", "value", "match"), [
    ("samples", 2**31, "shorter than the header"),
    ("samples", -1, "not a count"),
    ("raw_data.bytes", 10**15, "not a count"),
    ("raw_data.basename", "../../etc/passwd", "outside"),
    ("column_sizes", [None] * 26, "column_sizes"),
])
def test_hostile_index_values_are_format_errors(tmp_path, field, value, match):
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES / "plain", root)
    index = json.loads((root / "index.json").read_text())
    target, *rest = field.split(".")
    if rest:
        index["shards"][0][target][rest[0]] = value
    else:
        index["shards"][0][target] = value
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=match):
        ds = MDSDataset(root)
        ds[0]


def test_the_loader_shuffles_and_resumes_exactly():
    ds = MDSDataset(FIXTURES / "plain")
    ids = [e["i"]["int"] for e in _expected("plain")]
    common = dict(batch_size=2, shuffle=True, seed=9, collate_fn=list)
    full = [s["i"] for b in drt.StatefulDataLoader(ds, **common) for s in b]
    assert sorted(full) == sorted(ids)
    loader = drt.StatefulDataLoader(ds, **common, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    head = [s["i"] for _ in range(2) for s in next(it)]
    state = loader.state_dict()
    del it
    resumed = drt.StatefulDataLoader(ds, batch_size=3, shuffle=True, seed=9, collate_fn=list, num_workers=2,
                                     worker_method="thread")
    resumed.load_state_dict(state)
    assert head + [s["i"] for b in resumed for s in b] == full


def test_remote_mds_on_s3(tmp_path, s3):
    import s3fs

    fs = s3fs.S3FileSystem(**s3)
    for name in ("plain", "hashed_zstd"):
        for f in sorted((FIXTURES / name).iterdir()):
            fs.put_file(str(f), f"bucket/mds/{name}/{f.name}")
    node = tmp_path / "node"
    config = drt.RemoteConfig(cache_dir=str(node), cache_limit=1 << 30)
    for name in ("plain", "hashed_zstd"):
        ds = MDSDataset(f"s3://bucket/mds/{name}", storage_options=s3, remote_config=config)
        assert [_canon(ds[i]) for i in range(len(ds))] == _expected(name)
    # the hashed shards (sha256 in the index) came through the node cache, verified
    assert len([p for p in node.rglob("sha256-*") if p.is_file()]) >= 2
    two = MDSDataset(["s3://bucket/mds/plain", "s3://bucket/mds/hashed_zstd/"], storage_options=s3,
                     remote_config=config)
    loader = drt.StatefulDataLoader(two, batch_size=4, shuffle=True, num_workers=2, multiprocessing_context="fork",
                                    collate_fn=list)
    assert sorted(s["i"] for b in loader for s in b) == sorted(2 * [e["i"]["int"] for e in _expected("plain")])


@pytest.mark.parametrize(("name", "rel", "allowed"), [
    ("hashed_zstd", "shard.00000.mds.zstd", {"FormatError"}),
    ("plain", "shard.00001.mds", {"FormatError", "ok", "wrong"}),  # no hashes: a flipped value byte is read
    ("plain", "index.json", {"FormatError", "MissingFile", "ok", "wrong"}),
])
def test_damaged_mds_files_are_typed_errors_never_crashes(tmp_path, name, rel, allowed):
    size = (FIXTURES / name / rel).stat().st_size
    expected = canonical_expected([{"dict": row} for row in _expected(name)])
    assert canonical_rows(MDSDataset(FIXTURES / name)) == expected
    found = outcomes(FIXTURES / name, rel, "_canonical(formats.MDSDataset(root))", expected, damages(size, 30, 10),
                     tmp_path, prelude=CANONICAL)
    assert set(found.values()) <= allowed, {k: v for k, v in found.items() if v not in allowed}
    assert "FormatError" in found.values()
