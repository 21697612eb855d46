"""Writing caches: round trips, per-source outcomes and bad writer input."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import QUIET, ListSource, payload

import torch_drt as drt
from torch_drt.cache import CacheCorruptError
from torch_drt.cache.validate import open_cache


@pytest.mark.parametrize("algo", ["none", "lz4", "zstd"])
def test_round_trip_every_compression_and_many_shards(runtime, tmp_path, algo):
    cfg = drt.WriterConfig(
        show_progress=False, max_shard_bytes=40, shard_compression=drt.ShardCompression(algo)
    )
    (res,) = runtime.write_cache(ListSource("s", 50), tmp_path, writer_config=cfg)
    assert res == drt.CacheWriteSuccess("s", tmp_path / "s")
    layout = open_cache(res.path, verify=True)
    assert len(layout.shards) > 3 and layout.compression == algo
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    samples = list(ds)
    assert [s.data for s in samples] == [payload(i) for i in range(50)]
    assert [s.sample_id for s in samples] == list(range(50))
    assert samples[7].metadata == {"label": 7, "flag": False, "score": 7 / 4, "tag": "t7"}
    assert {s.cache_id for s in samples} == {layout.cache_id}


def test_a_source_without_metadata_writes_a_cache_that_opens(runtime, tmp_path):
    class NoMetadata:
        name = "bare"

        def __iter__(self):
            return (drt.CacheInput(payload(i), {}) for i in range(5))

    (res,) = runtime.write_cache(NoMetadata(), tmp_path, writer_config=QUIET)
    assert open_cache(res.path, verify=True).sample_count == 5
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [(s.data, s.metadata) for s in ds] == [(payload(i), {}) for i in range(5)]


def test_manifest_records_version_counts_schema_and_checksums(make_cache):
    path = make_cache(n=12)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "torch_drt.cache" and manifest["format_version"] == 2
    assert manifest["record_checksum"] == "xxh3_64" and len(manifest["cache_uid"]) == 32
    assert manifest["max_record_bytes"] == max(len(payload(i)) for i in range(12))
    assert manifest["sample_count"] == 12
    assert manifest["metadata_schema"] == [
        {"name": "flag", "kind": "bool"},
        {"name": "label", "kind": "int"},
        {"name": "score", "kind": "float"},
        {"name": "tag", "kind": "string"},
    ]
    assert set(manifest["files"]) == {"index.bin", "metadata.arrow"}
    assert all(len(f["xxh3_128"]) == 32 for f in manifest["files"].values())
    assert all(len(s["sha256"]) == 64 for s in manifest["shards"])
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".staging-")]


def test_outcomes_in_input_order_and_failures_do_not_stop_others(runtime, tmp_path):
    class Raises(ListSource):
        def __iter__(self):
            yield from list(super().__iter__())[:3]
            raise KeyError("boom")

    sources = [ListSource("a", 3), Raises("b", 5), ListSource("c", 4)]
    with pytest.raises(drt.CacheSourcesError, match="1 of 3 sources have no cache \\(b: KeyError") as info:
        runtime.write_cache(sources, tmp_path, writer_config=QUIET)
    results = info.value.results
    assert [r.source_name for r in results] == ["a", "b", "c"]
    assert isinstance(results[0], drt.CacheWriteSuccess) and isinstance(results[2], drt.CacheWriteSuccess)
    assert results[1].source_name == "b" and results[1].message.startswith("KeyError: 'boom' (raised at ")
    assert "test_cache_write.py" in results[1].message  # where it was raised, not only what
    assert not (tmp_path / "b").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a", "c"]


class Items:
    def __init__(self, name, items):
        self.name = name
        self.items = items

    def __iter__(self):
        return iter(self.items)


OK = drt.CacheInput(b"x", {"k": 1})


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            [OK, drt.CacheInput("text", {"k": 1})],
            "sample 1: payload must be bytes-like (bytes, bytearray, memoryview), got str",
        ),
        (
            [OK, drt.CacheInput(b"y", {"k": "one"})],
            "sample 1: metadata key 'k' expected int, got str ('one')",
        ),
        ([OK, drt.CacheInput(b"y", {"k": True})], "sample 1: metadata key 'k' expected int, got bool (True)"),
        ([OK, drt.CacheInput(b"y", {})], "sample 1: missing key(s) ['k'] (the first sample has keys ['k'])"),
        (
            [OK, drt.CacheInput(b"y", {"k": 1, "z": 2})],
            "sample 1: unexpected key(s) ['z'] (the first sample has keys ['k'])",
        ),
        (
            [drt.CacheInput(b"y", {"k": [1]})],
            "sample 0: metadata key 'k' has unsupported type list (use bool, int, float or str)",
        ),
        ([drt.CacheInput(b"y", {"weight": 1.0})], "sample 0: metadata key 'weight' is reserved"),
        ([drt.CacheInput(b"y", {"cache_id": 1})], "sample 0: metadata key 'cache_id' is reserved"),
        ([OK, "not an input"], "sample 1: expected a CacheInput, got str"),
        ([], "cache source yielded no samples"),
    ],
)
def test_bad_writer_input_is_a_per_source_error_naming_sample_and_key(runtime, tmp_path, items, message):
    with pytest.raises(drt.CacheSourcesError, match="1 of 2 sources have no cache") as info:
        runtime.write_cache([Items("bad", items), ListSource("good", 2)], tmp_path, writer_config=QUIET)
    results = info.value.results
    assert isinstance(results[0], drt.CacheWriteError) and info.value.failures == [results[0]]
    assert results[0].message.startswith(message)
    assert isinstance(results[1], drt.CacheWriteSuccess) and info.value.paths == [tmp_path / "good"]
    assert not (tmp_path / "bad").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging-")]


def test_metadata_of_several_columns_or_none_round_trips_and_a_wrong_kind_in_any_column_is_named(runtime, tmp_path):
    # the writer's short path for the common sample (a CacheInput of bytes and a dict of the first sample's keys and
    # Python types) makes the same checks as the full one: other samples in between (numpy scalars, a Mapping that is
    # no dict, a bytearray payload) are converted, and a wrong kind in the last of several columns is still named
    import types

    import numpy as np

    def row(i: int) -> dict:
        return {"i": i, "s": f"x{i}", "f": i / 2, "b": i % 2 == 0}

    items = [drt.CacheInput(bytes([i]) * 3, row(i)) for i in range(6)]
    items[2] = drt.CacheInput(bytearray(b"\2\2\2"), {**row(2), "i": np.int64(2), "f": np.float32(1.0)})
    items[4] = drt.CacheInput(b"\4\4\4", types.MappingProxyType(row(4)))
    bare = [drt.CacheInput(b"a", {}), drt.CacheInput(b"b", {})]
    (res, none) = runtime.write_cache([Items("cols", items), Items("none", bare)], tmp_path, writer_config=QUIET)
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    got = [(s.data, s.metadata) for s in ds]
    assert got == [(bytes([i]) * 3, row(i)) for i in range(6)]
    assert {k: type(v) for k, v in got[2][1].items()} == {"i": int, "s": str, "f": float, "b": bool}
    ds = runtime.cached_dataset([none.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.data for s in ds] == [b"a", b"b"]
    for bad, message in [
        ({**row(3), "b": 1}, "sample 3: metadata key 'b' expected bool, got int (1)"),
        ({**row(3), "f": 1}, "sample 3: metadata key 'f' expected float, got int (1)"),
        ({k: v for k, v in row(3).items() if k != "s"}, "sample 3: missing key(s) ['s']"),
    ]:
        source = Items("bad", [*items[:3], drt.CacheInput(b"z", bad)])
        with pytest.raises(drt.CacheSourcesError) as info:
            runtime.write_cache([source], tmp_path, writer_config=QUIET)
        assert info.value.results[0].message.startswith(message), info.value.results[0].message
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache([Items("bad", [*bare, drt.CacheInput(b"c", {"k": 1})])], tmp_path, writer_config=QUIET)
    assert info.value.results[0].message.startswith("sample 2: unexpected key(s) ['k']")


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "x" * 201, None, 3])
def test_invalid_source_names(runtime, tmp_path, name):
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache([Items(name, [OK])], tmp_path, writer_config=QUIET)
    (res,) = info.value.results
    assert isinstance(res, drt.CacheWriteError) and "invalid source name" in res.message


def test_duplicate_names_in_one_call_are_refused_before_writing(runtime, tmp_path):
    # issue 13 item 5: a ValueError before anything is written, as dataset-rt raises
    with pytest.raises(ValueError, match=r"duplicate generated cache path: .*/d \(two sources named 'd'\)"):
        runtime.write_cache([ListSource("d", 2), ListSource("d", 3), ListSource("e", 1)], tmp_path, writer_config=QUIET)
    assert list(tmp_path.iterdir()) == []


def test_bytes_like_payloads_and_numpy_scalars_are_accepted(runtime, tmp_path):
    import numpy as np

    items = [
        drt.CacheInput(bytearray(b"ab"), {"k": np.int32(1), "f": np.float32(0.5), "b": np.bool_(True)}),
        drt.CacheInput(memoryview(b"cd"), {"k": 2, "f": 1.5, "b": False}),
    ]
    (res,) = runtime.write_cache([Items("m", items)], tmp_path, writer_config=QUIET)
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [(s.data, s.metadata) for s in ds] == [
        (b"ab", {"b": True, "f": 0.5, "k": 1}),
        (b"cd", {"b": False, "f": 1.5, "k": 2}),
    ]


def test_write_cache_refuses_an_existing_cache_and_leaves_it_alone(runtime, make_cache):
    path = make_cache("same", n=4)
    before = (path / "manifest.json").read_bytes()
    with pytest.raises(drt.CacheSourcesError, match="same: cache path already exists") as info:
        runtime.write_cache([ListSource("same", 9)], path.parent, writer_config=QUIET)
    assert info.value.results == [drt.CacheWriteError("same", f"cache path already exists: {path}")]
    assert (path / "manifest.json").read_bytes() == before


def test_config_unknown_fields_and_bad_values_are_errors():
    # pydantic models like dataset-rt's (issue 13 item 3): ValidationError, a ValueError, for both
    with pytest.raises(ValueError, match="nonsense"):
        drt.WriterConfig(max_shard_bytes=10, nonsense=1)
    with pytest.raises(ValueError, match="shufle"):
        drt.ReaderConfig(seed=0, shufle=True)
    with pytest.raises(ValueError, match=r"Input should be 'none', 'lz4' or 'zstd'"):
        drt.ShardCompression("brotli")
    with pytest.raises(ValueError, match="max_shard_bytes"):
        drt.WriterConfig(max_shard_bytes=0)
    assert drt.ReaderConfig(seed=-1).seed == -1  # accepted as dataset-rt accepts it; loading refuses it
    assert drt.WriterConfig(shard_compression="zstd").shard_compression == drt.ShardCompression("zstd")


def test_num_processes_writes_in_spawned_processes(runtime, tmp_path):
    cfg = drt.WriterConfig(show_progress=False, num_processes=2)
    results = runtime.write_cache([ListSource("p1", 5), ListSource("p2", 6)], tmp_path, writer_config=cfg)
    assert all(isinstance(r, drt.CacheWriteSuccess) for r in results), results
    ds = runtime.cached_dataset(
        [tmp_path / "p1", tmp_path / "p2"], reader_config=drt.ReaderConfig(seed=0, shuffle=False)
    )
    assert [s.data for s in ds] == [payload(i) for i in range(5)] + [payload(i) for i in range(6)]


def _refuse(name: str) -> None:
    raise ValueError(f"{name} stays here")


class StaysHere(ListSource):
    """Pickles in this process; unpickling it (in a writer process) raises."""

    def __reduce__(self):
        return _refuse, (self.name,)


def test_a_source_that_cannot_reach_its_writer_process_is_its_own_error_and_the_others_are_written(runtime, tmp_path):
    cfg = drt.WriterConfig(show_progress=False, num_processes=1)
    local = ListSource("local", 2)
    local.hook = lambda: None  # a lambda does not pickle
    sources = [local, StaysHere("away", 2), ListSource("ok", 3)]
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache(sources, tmp_path, writer_config=cfg)
    results = info.value.results
    assert [type(r).__name__ for r in results] == ["CacheWriteError", "CacheWriteError", "CacheWriteSuccess"]
    assert results[0].message.startswith("source pickling failed (sources must pickle with num_processes > 0): ")
    assert results[1].message == "source unpickling failed: ValueError('away stays here')"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["ok"]


class TorchProbe(ListSource):
    """Records in each sample's metadata whether its process had imported torch."""

    def __iter__(self):
        for i in range(self.n):
            yield drt.CacheInput(payload(i), {"torch": "torch" in sys.modules})


def test_a_writer_process_does_not_import_torch(runtime, tmp_path):
    """Importing torch takes a spawned writer seconds (counted against its start deadline); writing needs none of it."""
    cfg = drt.WriterConfig(show_progress=False, num_processes=1)
    (result,) = runtime.write_cache([TorchProbe("probe", 2)], tmp_path, writer_config=cfg)
    ds = runtime.cached_dataset([result.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.metadata["torch"] for s in ds] == [False, False]


def test_progress_bar_is_shown(runtime, tmp_path, capsys):
    runtime.write_cache([ListSource("bar", 5)], tmp_path, writer_config=drt.WriterConfig(show_progress=True))
    assert "bar" in capsys.readouterr().err


def test_layout_helper_reports_paths(make_cache):
    path = make_cache("x", n=3)
    assert open_cache(path).sample_count == 3
    assert isinstance(path, Path)


def test_records_larger_than_a_shard_get_a_shard_each(runtime, tmp_path):
    items = [drt.CacheInput(bytes([i]) * (25 + i), {"k": i}) for i in range(4)]
    cfg = drt.WriterConfig(show_progress=False, max_shard_bytes=10)
    (res,) = runtime.write_cache([Items("big", items)], tmp_path, writer_config=cfg)
    layout = open_cache(res.path, verify=True)
    assert [size for _, size in layout.shards] == [25, 26, 27, 28]
    ds = runtime.cached_dataset([res.path], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    assert [s.data for s in ds] == [bytes([i]) * (25 + i) for i in range(4)]


def test_a_cache_written_with_a_random_uid_still_opens_and_a_foreign_metadata_file_is_refused(make_cache, tmp_path):
    import uuid

    import pyarrow.ipc as ipc
    from conftest import rehash_manifest

    def set_uid(path, uid: str) -> None:  # as earlier releases wrote it: a random uid in manifest and metadata
        table = ipc.open_file(str(path / "metadata.arrow")).read_all()
        table = table.replace_schema_metadata({b"torch_drt.cache_uid": uid.encode()})
        with ipc.new_file(str(path / "metadata.arrow"), table.schema) as w:
            w.write_table(table)
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, "cache_uid": uid}))
        rehash_manifest(path)

    path = make_cache(n=12)
    set_uid(path, uuid.uuid4().hex)
    assert open_cache(path, verify=True).sample_count == 12  # a uid is compared, never recomputed
    other = tmp_path / "other"
    shutil.copytree(path, other)
    set_uid(other, uuid.uuid4().hex)
    shutil.copy(other / "metadata.arrow", path / "metadata.arrow")  # the same columns, another cache's uid
    rehash_manifest(path)
    with pytest.raises(CacheCorruptError, match="metadata is of cache"):
        open_cache(path)


def test_a_quiet_cache_write_imports_neither_pandas_nor_tqdm(tmp_path):
    """pyarrow's ``pa.array`` imports pandas (0.3 s of CPU) to ask whether a list is a pandas object, and a bar that
    is never shown needs no tqdm (0.03-0.06 s): a process's first write without a bar pays neither (a set build's
    driver paid both before forking its workers, which waited for it)."""
    import subprocess

    code = (
        "import sys\n"
        "from torch_drt.cache import CacheInput, WriterConfig\n"
        "from torch_drt.cache.writer import write_source\n"
        "class S:\n"
        "    name = 's'\n"
        "    def __iter__(self):\n"
        "        return iter([CacheInput(b'x', {'b': True, 'f': 0.5, 'i': 1, 's': 'a'})] * 3)\n"
        f"r = write_source(S(), {str(tmp_path)!r}, WriterConfig(show_progress=False))\n"
        "assert type(r).__name__ == 'CacheWriteSuccess', r\n"
        "print(sorted({'pandas', 'tqdm'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
