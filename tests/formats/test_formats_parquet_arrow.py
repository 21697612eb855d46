"""ParquetDataset and ArrowDataset: the rows pyarrow's own readers read, field by field, locally and on S3 (moto),
through torch_drt's loader with shuffle, workers and exact resume; damaged files are FormatErrors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arrow_tables import write_ipc, write_parquet
from format_fuzz import comparable, damages, outcomes
from s3_server import s3_fixture  # noqa: F401

import torch_drt as drt
from torch_drt.cache.errors import FormatError
from torch_drt.formats import ArrowDataset, ParquetDataset

pytestmark = pytest.mark.timeout(300)


def _parquet_dir(root: Path) -> list[dict]:
    root.mkdir(parents=True, exist_ok=True)
    write_parquet(root / "a.parquet", 30)
    write_parquet(root / "b.parquet", 12, start=30, row_group=5)
    return pq.read_table(root).to_pylist()  # pyarrow's own reader of the directory


def _ipc_dir(root: Path) -> list[dict]:
    root.mkdir(parents=True, exist_ok=True)
    write_ipc(root / "a.arrow", 20)
    write_ipc(root / "b.arrow", 9, start=20, stream=True)
    rows = []
    for name in ("a.arrow", "b.arrow"):
        with pa.memory_map(str(root / name)) as src:
            try:
                rows += pa.ipc.open_file(src).read_all().to_pylist()
            except pa.ArrowInvalid:
                src.seek(0)
                rows += pa.ipc.open_stream(src).read_all().to_pylist()
    return rows


def test_parquet_rows_equal_pyarrows_reader(tmp_path):
    expected = _parquet_dir(tmp_path / "pq")
    ds = ParquetDataset(tmp_path / "pq", cache_shards=2)
    assert len(ds) == 42 and ds.num_shards == 5 + 3
    assert [ds[i] for i in range(len(ds))] == expected
    order = list(np.random.default_rng(0).permutation(len(ds)))
    assert ds.__getitems__(order) == [expected[i] for i in order]
    assert ds[-1] == expected[-1]
    with pytest.raises(IndexError):
        ds[42]
    assert ds.shard_groups().tolist() == [g for g, c in enumerate(ds.shard_counts) for _ in range(c)]


def test_parquet_columns_and_single_file(tmp_path):
    expected = _parquet_dir(tmp_path / "pq")
    ds = ParquetDataset(str(tmp_path / "pq" / "b.parquet"), columns=["s", "l"])
    assert [ds[i] for i in range(len(ds))] == [{"s": r["s"], "l": r["l"]} for r in expected[30:]]
    with pytest.raises(ValueError, match="nope"):
        ParquetDataset(tmp_path / "pq", columns=["nope"])


def test_a_file_url_names_the_local_file(tmp_path):
    """``file:///dir/b.parquet`` is the local file (its directory is ``/dir``, not ``file:/dir``)."""
    expected = _parquet_dir(tmp_path / "pq")
    ds = ParquetDataset(f"file://{tmp_path / 'pq' / 'b.parquet'}")
    assert [ds[i] for i in range(len(ds))] == expected[30:]


def test_schemas_must_agree(tmp_path):
    write_parquet(tmp_path / "a.parquet", 5)
    pq.write_table(pa.table({"other": [1, 2]}), tmp_path / "b.parquet")
    with pytest.raises(FormatError, match="schema"):
        ParquetDataset(tmp_path)


def test_arrow_file_and_stream_rows_equal_pyarrows_reader(tmp_path):
    expected = _ipc_dir(tmp_path / "ipc")
    ds = ArrowDataset(tmp_path / "ipc")
    assert len(ds) == 29 and ds.num_shards == 4 + 2
    assert [ds[i] for i in range(len(ds))] == expected
    assert ds.__getitems__([28, 0, 5, 27]) == [expected[i] for i in (28, 0, 5, 27)]
    assert ArrowDataset(tmp_path / "ipc" / "b.arrow", columns=["i"])[0] == {"i": 20}


def test_a_name_pattern_picks_the_files_of_one_split(tmp_path):
    """A ``datasets`` cache directory holds every split's files side by side: a pattern reads one split."""
    for split, n in (("train", 7), ("test", 3)):
        for k in range(2):
            write_ipc(tmp_path / f"wikitext-{split}-{k:05d}-of-00002.arrow", n, start=100 * k, stream=True)
    ds = ArrowDataset(str(tmp_path / "wikitext-train-*.arrow"))
    assert len(ds) == 14 and ds[7]["i"] == 100
    assert len(ArrowDataset(tmp_path)) == 20
    with pytest.raises(FileNotFoundError, match="no file matches"):
        ArrowDataset(str(tmp_path / "wikitext-val-*.arrow"))


def test_a_save_to_disk_directory_reads_its_state_files(tmp_path):
    """``datasets.Dataset.save_to_disk`` writes stream-format ``data-*.arrow`` files listed in state.json."""
    root = tmp_path / "saved"
    root.mkdir()
    write_ipc(root / "data-00000-of-00002.arrow", 8, stream=True)
    write_ipc(root / "data-00001-of-00002.arrow", 4, start=8, stream=True)
    write_ipc(root / "stray.arrow", 3, start=100, stream=True)  # not listed: not read
    state = {"_data_files": [{"filename": "data-00000-of-00002.arrow"}, {"filename": "data-00001-of-00002.arrow"}]}
    (root / "state.json").write_text(json.dumps(state))
    ds = ArrowDataset(root)
    assert [ds[i]["i"] for i in range(len(ds))] == list(range(12))
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../x.arrow"}]}))
    with pytest.raises(FormatError, match="outside"):
        ArrowDataset(root)


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_the_loader_shuffles_splits_and_resumes_exactly(tmp_path, kind):
    make, cls = (_parquet_dir, ParquetDataset) if kind == "parquet" else (_ipc_dir, ArrowDataset)
    expected = make(tmp_path / kind)
    ds = cls(tmp_path / kind)
    common = dict(batch_size=4, shuffle=True, seed=3, collate_fn=list)
    full = list(drt.StatefulDataLoader(ds, **common))
    assert sorted(r["i"] for b in full for r in b) == [r["i"] for r in expected]
    loader = drt.StatefulDataLoader(ds, **common, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = loader.state_dict()
    del it
    resumed = drt.StatefulDataLoader(ds, batch_size=2, shuffle=True, seed=3, collate_fn=list, num_workers=1,
                                     worker_method="thread")
    resumed.load_state_dict(state)
    rest = [r for b in resumed for r in b]
    assert [r for b in head for r in b] + rest == [r for b in full for r in b]
    ranks = [list(drt.StatefulDataLoader(ds, **common, world_size=2, rank=r, drop_last=True)) for r in (0, 1)]
    seen = [r["i"] for rank in ranks for b in rank for r in b]
    assert len(seen) == len(set(seen)) == len(expected) // 8 * 8


def test_remote_parquet_and_arrow_on_s3(tmp_path, s3):
    import s3fs

    pq_rows, ipc_rows = _parquet_dir(tmp_path / "pq"), _ipc_dir(tmp_path / "ipc")
    fs = s3fs.S3FileSystem(**s3)
    for sub in ("pq", "ipc"):
        for f in sorted((tmp_path / sub).iterdir()):
            fs.put_file(str(f), f"bucket/formats/{sub}/{f.name}")
    config = drt.RemoteConfig(cache_dir=str(tmp_path / "node"), cache_limit=1 << 30)
    ds = ParquetDataset("s3://bucket/formats/pq/", storage_options=s3, remote_config=config)
    assert [ds[i] for i in range(len(ds))] == pq_rows
    one = ParquetDataset("s3://bucket/formats/pq/b.parquet", storage_options=s3, remote_config=config)
    assert one[0] == pq_rows[30]
    assert ParquetDataset("s3://bucket/formats/pq/b*", storage_options=s3)[0] == pq_rows[30]
    few = ParquetDataset("s3://bucket/formats/pq", storage_options=s3, remote_config=config, cache_shards=1)
    threads = drt.StatefulDataLoader(few, batch_size=3, shuffle=True, num_workers=4, worker_method="thread",
                                     collate_fn=list)  # threads share one footer reader per file
    got = sorted((r for b in threads for r in b), key=lambda r: r["i"])
    assert got == pq_rows
    ds = ArrowDataset("s3://bucket/formats/ipc", storage_options=s3, remote_config=config)
    assert [ds[i] for i in range(len(ds))] == ipc_rows
    loader = drt.StatefulDataLoader(ds, batch_size=5, shuffle=True, num_workers=2, multiprocessing_context="fork",
                                    collate_fn=list)
    assert sorted(r["i"] for b in loader for r in b) == list(range(29))
    with pytest.raises(FileNotFoundError):
        ParquetDataset("s3://bucket/formats/none/", storage_options=s3)


@pytest.mark.parametrize(("kind", "rel"), [("parquet", "a.parquet"), ("arrow", "a.arrow"), ("arrow", "b.arrow")])
def test_damaged_files_are_format_errors_never_crashes(tmp_path, kind, rel):
    """Parquet written with page checksums: every damage is a FormatError or (a flip in unused bytes) the clean
    rows. Arrow IPC has no checksums: a damaged file is refused or read, never a crash or another error."""
    make = _parquet_dir if kind == "parquet" else _ipc_dir
    make(tmp_path / "clean")
    opener = f"formats.{'ParquetDataset' if kind == 'parquet' else 'ArrowDataset'}(root)"
    cls = ParquetDataset if kind == "parquet" else ArrowDataset
    clean = cls(tmp_path / "clean")
    expected = [comparable(clean[i]) for i in range(len(clean))]
    size = (tmp_path / "clean" / rel).stat().st_size
    found = outcomes(tmp_path / "clean", rel, opener, expected, damages(size, 40, 12), tmp_path)
    allowed = {"FormatError", "ok"} if kind == "parquet" else {"FormatError", "ok", "wrong"}
    assert set(found.values()) <= allowed, {k: v for k, v in found.items() if v not in allowed}
    assert "FormatError" in found.values()


def test_a_parquet_file_truncated_under_a_reader_is_an_error_not_sigbus(tmp_path):
    """The file is mapped: reading a row group past a truncation would kill the process (SIGBUS)."""
    from forked_runner import run_forked

    write_parquet(tmp_path / "a.parquet", 2000, row_group=500)
    proc = run_forked(f"""
        import os
        from torch_drt.cache.errors import CacheCorruptError
        from torch_drt.formats import ParquetDataset
        ds = ParquetDataset({str(tmp_path / "a.parquet")!r}, cache_shards=1)
        ds[0]
        os.truncate({str(tmp_path / "a.parquet")!r}, 100)
        try:
            ds[1999]
        except CacheCorruptError as e:
            print("refused:", e)
    """)
    assert proc.returncode == 0 and "refused:" in proc.stdout and "truncated" in proc.stdout, proc


def test_a_parquet_row_group_is_converted_to_python_once_and_samples_stay_private(tmp_path):
    """Flat columns: a row group's rows are converted once per process (a later read hands out the same values, in a
    fresh dict); a sample changed by its reader changes no later read. Nested columns are converted per read (their
    lists would be shared)."""
    flat_path, nested_path = tmp_path / "flat.parquet", tmp_path / "nested.parquet"
    pq.write_table(pa.table({"data": [bytes([i]) * 50 for i in range(40)], "label": list(range(40)),
                             "text": [f"t{i}" for i in range(40)]}), flat_path, row_group_size=8)
    pq.write_table(pa.table({"ids": [[i, i + 1] for i in range(40)]}), nested_path, row_group_size=8)
    ds = ParquetDataset(flat_path)
    expected = pq.read_table(flat_path).to_pylist()
    assert [ds[i] for i in range(40)] == expected and ds.__getitems__([9, 3, 30]) == [expected[i] for i in (9, 3, 30)]
    first, again = ds[5], ds.__getitems__([5])[0]
    assert first == again and first is not again and first["data"] is again["data"]  # converted once
    first["data"], first["label"] = b"changed", -1
    assert ds[5] == expected[5]
    nested = ParquetDataset(nested_path)
    row = nested[3]
    row["ids"].append(99)
    assert nested[3] == {"ids": [3, 4]} and nested.__getitems__([3, 4]) == [{"ids": [3, 4]}, {"ids": [4, 5]}]
