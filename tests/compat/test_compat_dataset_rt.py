"""dataset-rt users' programs, written from its documentation with its names, run through
``torch_drt.compat.dataset_rt`` and compared with dataset-rt 0.4.8 itself (issue 13 items 2-5 and 7)."""

from __future__ import annotations

import gc
import json
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pydantic
import pytest
import torch
from typing_extensions import TypedDict

import torch_drt
import torch_drt.compat.dataset_rt as drt

dataset_rt = pytest.importorskip("dataset_rt")


class Numbers:
    """A source as dataset-rt's docs write them: a plain ``name`` and ``__iter__`` of ``CacheInput``."""

    def __init__(self, name: str, n: int, api=drt, fail_at: int | None = None, sleep: float = 0.0) -> None:
        self.name, self.n, self.fail_at, self.sleep = name, n, fail_at, sleep
        self.theirs = api is dataset_rt  # not the module itself: sources pickle into writer processes

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise KeyError(f"record {i} is missing")
            if self.sleep:
                time.sleep(self.sleep)
            api = dataset_rt if self.theirs else drt
            yield api.CacheInput(data=bytes([i % 256]) * (i % 7 + 1), metadata={"label": i % 3, "tag": f"t{i}"})


QUIET = drt.WriterConfig(show_progress=False)
THEIR_QUIET = dataset_rt.WriterConfig(show_progress=False)


@pytest.fixture
def caches(tmp_path) -> list[Path]:
    """Two caches written by dataset-rt, which both packages read."""
    rt = dataset_rt.DatasetRuntime(num_workers=2)
    results = rt.write_cache(
        [Numbers("a", 30, dataset_rt), Numbers("b", 20, dataset_rt)], tmp_path / "c", writer_config=THEIR_QUIET
    )
    return [r.path for r in results]


def both(paths: list[Path], **config):
    theirs = dataset_rt.DatasetRuntime(num_workers=2).cached_dataset(
        paths, reader_config=dataset_rt.ReaderConfig(**config)
    )
    ours = drt.DatasetRuntime(num_workers=2).cached_dataset(paths, reader_config=drt.ReaderConfig(**config))
    return theirs, ours


def samples(dataset) -> list[tuple]:
    return [(s.data, s.metadata, s.cache_id, s.sample_id) for s in dataset]


def test_the_public_names_are_dataset_rts():
    assert set(drt.__all__) == set(dataset_rt.__all__)
    for name in dataset_rt.__all__:
        assert hasattr(drt, name), name


# -- the PyTorch example (docs: "Use DatasetRT with a PyTorch DataLoader") ------------------------------------


class TrainingRecord(TypedDict):
    features: list[float]
    target: int


RECORD_ADAPTER = pydantic.TypeAdapter(TrainingRecord)


class TrainingSamples:
    name = "training_records_v1"

    def __iter__(self) -> Iterator[drt.CacheInput]:
        for index in range(32):
            record = TrainingRecord(features=[index / 32, 1.0], target=index % 2)
            yield drt.CacheInput(
                data=pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL), metadata={"target": record["target"]}
            )


def decode(sample: drt.CachedSample) -> tuple[torch.Tensor, torch.Tensor]:
    record = RECORD_ADAPTER.validate_python(pickle.loads(sample.data))
    return torch.tensor(record["features"]), torch.tensor(record["target"], dtype=torch.long)


def test_the_pytorch_example_program(tmp_path):
    runtime = drt.DatasetRuntime(num_workers=2)
    result = runtime.from_cache_sources(
        TrainingSamples(), tmp_path / "cache_torch", reader_config=drt.ReaderConfig(seed=42, shuffle=True)
    )
    match result:
        case drt.CacheSourcesDatasetSuccess(dataset=dataset):
            pass
        case failure:
            raise RuntimeError(failure)
    loader = dataset.to_torch_dataloader(
        sample_transform_fn=decode,
        batch_size=8,
        samples_per_epoch=32,
        num_workers=2,
        native_num_workers=1,
        shuffle=True,
        seed=42,
        multiprocessing_context="spawn",
    )
    shapes = [(tuple(features.shape), tuple(targets.shape)) for features, targets in loader]
    assert shapes == [((8, 2), (8,))] * 4  # "The loader emits four batches with feature shape [8, 2] and target [8]"


# -- reuse and per-source outcomes ----------------------------------------------------------------------------


def test_per_source_outcomes_are_named_tuples_like_dataset_rts(tmp_path):
    runtime = drt.DatasetRuntime(num_workers=2)
    sources = [Numbers("good", 5), Numbers("bad", 5, fail_at=2)]
    result = runtime.from_cache_sources(sources, tmp_path, reader_config=drt.ReaderConfig(seed=0), writer_config=QUIET)
    assert isinstance(result, tuple) and result._fields == dataset_rt.CacheSourcesDatasetSuccess._fields
    dataset, results = result  # tuple unpacking, as dataset-rt's results allow
    assert len(dataset) == 5
    good, bad = results
    name, path = good
    assert (name, path) == ("good", tmp_path / "good")
    assert good._fields == dataset_rt.CacheWriteSuccess._fields and bad._fields == dataset_rt.CacheWriteError._fields
    match bad:
        case drt.CacheWriteError(source_name=source_name, message=message):
            assert source_name == "bad" and "record 2 is missing" in message
    theirs = dataset_rt.DatasetRuntime(num_workers=1).from_cache_sources(
        [Numbers("bad", 5, dataset_rt, fail_at=2)],
        tmp_path / "theirs",
        reader_config=dataset_rt.ReaderConfig(seed=0),
        writer_config=THEIR_QUIET,
    )
    ours = runtime.from_cache_sources(
        [Numbers("bad", 5, fail_at=2)], tmp_path / "ours", reader_config=drt.ReaderConfig(seed=0)
    )
    assert type(ours).__name__ == type(theirs).__name__ == "CacheSourcesDatasetError"
    assert ours._fields == theirs._fields
    assert [type(r).__name__ for r in ours.results] == [type(r).__name__ for r in theirs.results]


def test_two_sources_of_one_name_raise_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="duplicate generated cache path"):
        dataset_rt.DatasetRuntime(num_workers=1).write_cache(
            [Numbers("q", 3, dataset_rt), Numbers("q", 3, dataset_rt)], tmp_path / "theirs"
        )
    runtime = drt.DatasetRuntime(num_workers=2)
    for call in (
        lambda: runtime.write_cache([Numbers("q", 3), Numbers("z", 3), Numbers("q", 4)], tmp_path / "ours"),
        lambda: runtime.from_cache_sources(
            [Numbers("q", 3), Numbers("q", 4)], tmp_path / "ours", reader_config=drt.ReaderConfig(seed=0)
        ),
    ):
        with pytest.raises(ValueError, match=r"duplicate generated cache path: .*q"):
            call()
    assert not (tmp_path / "theirs" / "q").exists() and not (tmp_path / "ours").exists()


# -- configs --------------------------------------------------------------------------------------------------


GOOD_WRITER = [
    {},
    {"num_processes": 2, "process_timeout_seconds": 5, "prefetch_size": 8},
    {"num_processes": "3", "max_shard_bytes": 1.0, "show_progress": "yes", "validate_cache": 1},
    {"shard_compression": {"algo": "lz4", "ratio": 2}},
    {"profiler": {"enabled": True, "path": "p.json"}},
]
BAD_WRITER = [
    {"num_processes": -1},
    {"process_timeout_seconds": 0},
    {"process_timeout_seconds": float("inf")},
    {"prefetch_size": 0},
    {"max_shard_bytes": 0},
    {"max_shard_bytes": 1.5},
    {"show_progress": "maybe"},
    {"shard_compression": {"algo": "brotli"}},
    {"profiler": {"enabled": "sometimes"}},
    {"nonsense": 1},
]
GOOD_READER = [{"seed": 0}, {"seed": -1}, {"seed": "7", "shuffle": 0, "prefetch_size": 3.0}, {"seed": 2**64 - 1}]
BAD_READER = [{}, {"seed": 1.5}, {"seed": None}, {"seed": 0, "prefetch_size": 0}, {"seed": 0, "shufle": True}]


def _without_level(dump: dict) -> dict:
    """``dump`` without torch_drt's two fields that dataset-rt has not: the zstd level and ``durable``."""
    dump["shard_compression"].pop("level")
    assert dump.pop("durable") is True  # every value here leaves it at its default: sync before publishing
    return dump


@pytest.mark.parametrize("values", GOOD_WRITER)
def test_writer_config_validates_and_dumps_as_dataset_rts(values):
    ours, theirs = drt.WriterConfig.model_validate(values), dataset_rt.WriterConfig.model_validate(values)
    assert _without_level(ours.model_dump(mode="json")) == theirs.model_dump(mode="json")
    assert drt.WriterConfig(**values) == ours


@pytest.mark.parametrize("values", BAD_WRITER)
def test_writer_config_refuses_what_dataset_rt_refuses(values):
    with pytest.raises(pydantic.ValidationError):
        dataset_rt.WriterConfig.model_validate(values)
    with pytest.raises(pydantic.ValidationError):
        drt.WriterConfig.model_validate(values)


@pytest.mark.parametrize("values", GOOD_READER)
def test_reader_config_validates_and_dumps_as_dataset_rts(values):
    ours = drt.ReaderConfig.model_validate(values)
    assert ours.model_dump() == dataset_rt.ReaderConfig.model_validate(values).model_dump()
    assert drt.ReaderConfig.model_validate_json(ours.model_dump_json()) == ours


@pytest.mark.parametrize("values", BAD_READER)
def test_reader_config_refuses_what_dataset_rt_refuses(values):
    with pytest.raises(pydantic.ValidationError):
        dataset_rt.ReaderConfig.model_validate(values)
    with pytest.raises(pydantic.ValidationError):
        drt.ReaderConfig.model_validate(values)


def test_configs_are_frozen_hashable_and_pickle():
    config = drt.WriterConfig(profiler=drt.WriterProfilerConfig(enabled=True))
    with pytest.raises(pydantic.ValidationError):
        config.num_processes = 2
    assert pickle.loads(pickle.dumps(config)) == config and hash(config) == hash(
        drt.WriterConfig.model_validate(config.model_dump())
    )
    assert config.model_copy(update={"num_processes": 2}).num_processes == 2
    assert drt.ShardCompression("zstd") == drt.ShardCompression(algo="zstd")  # torch_drt's shorthand still works
    with pytest.raises(pydantic.ValidationError):
        drt.ShardCompression(
            algo="none", nonsense=1
        )  # dataset-rt ignores it here; torch_drt refuses every unknown field


def test_a_seed_of_minus_one_is_accepted_and_loading_with_it_overflows_as_in_dataset_rt(caches):
    theirs_config, ours_config = dataset_rt.ReaderConfig(seed=-1), drt.ReaderConfig(seed=-1)
    assert ours_config.seed == theirs_config.seed == -1
    with pytest.raises(OverflowError):
        dataset_rt.DatasetRuntime(num_workers=1).cached_dataset(caches, reader_config=theirs_config)
    for seed in (-1, 2**64):
        with pytest.raises(OverflowError, match=r"\[0, 2\*\*64\)"):
            drt.DatasetRuntime(num_workers=1).cached_dataset(caches, reader_config=drt.ReaderConfig(seed=seed))
    theirs, ours = both(caches, seed=2**64 - 1)
    assert len(list(ours)) == len(list(theirs)) == 50


# -- the writer profile and process deadlines -----------------------------------------------------------------


def _shape(profile: dict) -> dict:
    return {
        "keys": sorted(profile),
        "sources": [sorted(s) for s in profile["sources"]],
        "stages": sorted({tuple(sorted(stage)) for s in profile["sources"] for stage in s["stages"]}),
    }


def _stages(profile: dict) -> dict:
    return {s["source_name"]: {st["name"]: st for st in s["stages"]} for s in profile["sources"]}


def test_the_profiler_writes_dataset_rts_json_profile(tmp_path):
    def run(runtime, api, root):
        config = api.WriterConfig(
            show_progress=False,
            num_processes=2,  # a profile is taken in this process: both write serially then
            shard_compression=api.ShardCompression(algo="lz4", ratio=2.0),
            profiler=api.WriterProfilerConfig(enabled=True, path=root / "p" / "profile.json"),
        )
        runtime.write_cache(
            [Numbers("a", 40, api), Numbers("bad", 10, api, fail_at=4)], root / "c", writer_config=config
        )
        first = json.loads((root / "p" / "profile.json").read_text())
        runtime.from_cache_sources(
            [Numbers("a", 40, api)], root / "c", reader_config=api.ReaderConfig(seed=0), writer_config=config
        )
        return first, json.loads((root / "p" / "profile.json").read_text())

    theirs, theirs_reused = run(dataset_rt.DatasetRuntime(num_workers=2), dataset_rt, tmp_path / "theirs")
    ours, ours_reused = run(drt.DatasetRuntime(num_workers=2), drt, tmp_path / "ours")
    assert _shape(ours) == _shape(theirs)
    assert ours["format_version"] == theirs["format_version"] == 1 and ours["elapsed_ns"] > 0
    assert [s["source_name"] for s in ours["sources"]] == [s["source_name"] for s in theirs["sources"]] == ["a", "bad"]
    ours_by, theirs_by = _stages(ours), _stages(theirs)
    for stage, calls in (("python_next", 41), ("python_extract", 40), ("compression", 40), ("disk_write", 40)):
        assert ours_by["a"][stage]["calls"] == theirs_by["a"][stage]["calls"] == calls, stage
    assert ours_by["a"]["python_extract"]["bytes"] == theirs_by["a"]["python_extract"]["bytes"]
    assert "publish" in ours_by["a"] and "publish" not in ours_by["bad"]  # a failed source lists what it ran
    assert ours_reused["sources"] == theirs_reused["sources"] == []  # reused caches are not profiled


class Sleepy(Numbers):
    """A source that does not finish in time (module level: it is pickled into the writer processes)."""


class Dying(Numbers):
    """A source whose writer process dies mid-write."""

    def __iter__(self):
        yield from list(super().__iter__())[:3]
        os._exit(3)


def test_a_writer_process_that_dies_fails_its_sources_and_leaves_no_staging(tmp_path):
    config = drt.WriterConfig(show_progress=False, num_processes=1)
    results = drt.DatasetRuntime(num_workers=1).write_cache(
        [Dying("dies", 9), Numbers("next", 2)], tmp_path, writer_config=config
    )
    message = "writer process exited with code 3"  # the pool stops: the next source is not tried either
    assert [(r.source_name, r.message) for r in results] == [("dies", message), ("next", message)]
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []  # its staging was removed


def test_process_timeout_stops_the_writers_and_reports_the_unfinished_sources(tmp_path):
    config = drt.WriterConfig(show_progress=False, num_processes=1, process_timeout_seconds=1)
    runtime = drt.DatasetRuntime(num_workers=1)
    results = runtime.write_cache(
        [Sleepy("slow", 1000, sleep=1.0), Numbers("after", 3)], tmp_path, writer_config=config
    )
    assert [type(r).__name__ for r in results] == ["CacheWriteError", "CacheWriteError"]
    assert all("writer process timeout exceeded" in r.message for r in results), results
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == []  # no staging left
    quick = drt.WriterConfig(show_progress=False, num_processes=2, process_timeout_seconds=600, prefetch_size=4)
    results = runtime.write_cache([Numbers("x", 3), Numbers("y", 4)], tmp_path, writer_config=quick)
    assert [type(r).__name__ for r in results] == ["CacheWriteSuccess", "CacheWriteSuccess"]


# -- the active table -----------------------------------------------------------------------------------------


def edit(table: pl.DataFrame) -> pl.DataFrame:
    """A typical edit: drop a label, weight the rest, add a column, duplicate a row."""
    kept = table.filter(pl.col("label") != 1).with_columns(
        (pl.col("weight") * (pl.col("label") + 1)).alias("weight"), pl.lit("train").alias("split")
    )
    return pl.concat([kept, kept.head(1)])


def test_metadata_is_a_polars_table_and_edits_read_as_in_dataset_rt(caches):
    theirs, ours = both(caches, seed=3, shuffle=False)
    assert isinstance(ours.get_metadata(), pl.DataFrame)
    assert ours.get_metadata().equals(theirs.get_metadata())
    assert isinstance(ours.get_metadata(backend="arrow"), pa.Table)
    plain = torch_drt.DatasetRuntime(1).cached_dataset(caches, reader_config=torch_drt.ReaderConfig(seed=3))
    assert isinstance(plain.get_metadata(), pa.Table) and plain.get_metadata("polars").equals(theirs.get_metadata())
    theirs.update_metadata(edit(theirs.get_metadata()))
    ours.update_metadata(edit(ours.get_metadata()))
    assert ours.get_metadata().equals(theirs.get_metadata()) and len(ours) == len(theirs)
    stored = lambda rows: [(d, {"label": m["label"], "tag": m["tag"]}, c, s) for d, m, c, s in rows]  # noqa: E731
    assert stored(samples(ours)) == stored(samples(theirs))
    assert all(m["split"] == "train" for _, m, _, _ in samples(ours))  # torch_drt: extra columns reach samples too
    ours.set_epoch_len(7)
    theirs.set_epoch_len(7)
    assert stored(samples(ours)) == stored(samples(theirs))


def test_samples_metadata_aliases(caches):
    theirs, ours = both(caches, seed=0, shuffle=False)
    assert ours.samples_metadata().equals(theirs.samples_metadata())
    ours.set_samples_metadata(ours.samples_metadata().head(4))
    theirs.set_samples_metadata(theirs.samples_metadata().head(4))
    assert samples(ours) == samples(theirs)
    with pytest.raises(ValueError, match="weight"):
        ours.set_samples_metadata(ours.samples_metadata().drop("weight"))


def test_shuffled_reading_draws_the_active_rows_by_weight(caches):
    _, ours = both(caches, seed=5, shuffle=True)
    table = ours.get_metadata().with_columns(pl.when(pl.col("label") == 0).then(1.0).otherwise(1e-12).alias("weight"))
    ours.update_metadata(table)
    ours.set_epoch_len(200)
    assert {m["label"] for _, m, _, _ in samples(ours)} == {0}


def test_to_torch_iterable_dataset_in_a_torch_dataloader(caches, monkeypatch):
    theirs, ours = both(caches, seed=0, shuffle=False)
    view = ours.to_torch_iterable_dataset()
    assert isinstance(view, torch.utils.data.IterableDataset) and isinstance(view, drt.SizedTorchIterableDataset)
    assert len(view) == len(theirs.to_torch_iterable_dataset()) == 50
    collate = lambda batch: [(s.data, s.cache_id, s.sample_id) for s in batch]  # noqa: E731
    ours_batches = list(torch.utils.data.DataLoader(view, batch_size=16, collate_fn=collate))
    theirs_batches = list(
        torch.utils.data.DataLoader(theirs.to_torch_iterable_dataset(), batch_size=16, collate_fn=collate)
    )
    assert ours_batches == theirs_batches
    # torch's DataLoader sends the worker whose iterable raised no stop, and waits MP_STATUS_CHECK_INTERVAL (5 s)
    # for it to exit before terminating it, when the iterator is collected (the error's traceback holds it): wait
    # 0.1 s instead, and collect it here
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.1)
    for dataset in (theirs, ours):
        loader = torch.utils.data.DataLoader(
            dataset.to_torch_iterable_dataset(),
            batch_size=4,
            num_workers=1,
            collate_fn=collate,
            multiprocessing_context="fork",
        )
        with pytest.raises(RuntimeError, match="Use Dataloader with num workers = 0"):
            list(loader)
        gc.collect()


def test_dump_config_and_from_config_cross_load_with_dataset_rt(caches, tmp_path):
    theirs, ours = both(caches, seed=5, shuffle=False, prefetch_size=7)
    for dataset in (theirs, ours):
        dataset.update_metadata(edit(dataset.get_metadata()))
        dataset.set_epoch_len(9)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    their_config, our_config = theirs.dump_config(tmp_path / "theirs"), ours.dump_config(tmp_path / "ours")
    assert our_config == tmp_path / "ours" / "dataset.json"
    assert json.loads(our_config.read_text()) == json.loads(their_config.read_text())
    restored_ours = drt.CachedDataset.from_config(their_config)  # dataset-rt's export, read by torch_drt
    restored_theirs = dataset_rt.CachedDataset.from_config(our_config)  # and the other way
    assert len(restored_ours) == len(restored_theirs) == 9
    assert restored_ours.reader_config == drt.ReaderConfig(seed=5, shuffle=False, prefetch_size=7)
    assert restored_ours.get_metadata().equals(restored_theirs.get_metadata())
    stored = lambda d: [(s.data, s.cache_id, s.sample_id) for s in d]  # noqa: E731
    assert stored(restored_ours) == stored(restored_theirs) == stored(theirs)
    with pytest.raises(FileExistsError):
        ours.dump_config(tmp_path / "ours")
    with pytest.raises(pydantic.ValidationError):
        ours.dump_config(tmp_path / "missing")


def test_from_config_refuses_a_tampered_export(caches, tmp_path):
    _, ours = both(caches, seed=5)
    config = ours.dump_config(tmp_path)
    body = json.loads(config.read_text())
    config.write_text(json.dumps(body | {"row_count": 7}))
    with pytest.raises(ValueError, match="row_count=7"):
        drt.CachedDataset.from_config(config)
    config.write_text(json.dumps(body | {"num_workers": "2"}))  # strict: no coercion, as in dataset-rt
    with pytest.raises(pydantic.ValidationError):
        drt.CachedDataset.from_config(config)
    config.write_text(json.dumps(body))
    metadata = tmp_path / "metadata.arrow"
    metadata.write_bytes(metadata.read_bytes()[:-100])
    with pytest.raises(ValueError, match="not a valid Arrow IPC file"):
        drt.CachedDataset.from_config(config)


def test_update_manifests_answers_as_dataset_rt(caches):
    theirs, ours = both(caches, seed=0)
    mine, reference = ours.update_manifests(3), theirs.update_manifests(3)
    assert type(mine).__name__ == type(reference).__name__ == "Ok"
    assert [(e.path, e.cache_id, e.status) for e in mine.value.entries] == [
        (e.path, e.cache_id, e.status) for e in reference.value.entries
    ]
    for version in (2, True, "3"):
        mine, reference = ours.update_manifests(version), theirs.update_manifests(version)
        assert type(mine).__name__ == type(reference).__name__ == "Err"
        assert (mine.error.message, mine.error.path.reason) == (reference.error.message, reference.error.path.reason)


def test_metadata_without_polars_installed_still_works_with_pyarrow(caches):
    code = (
        "import sys; sys.modules['polars'] = None\n"
        "import torch_drt as drt\n"
        f"paths = {[str(p) for p in caches]!r}\n"
        "ds = drt.DatasetRuntime(1).cached_dataset(paths, reader_config=drt.ReaderConfig(seed=0))\n"
        "print(ds.get_metadata().num_rows)\n"
        "try:\n    ds.get_metadata('polars')\nexcept ImportError:\n    print('ImportError')\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=120)
    assert out.stdout.split() == ["50", "ImportError"], out.stderr
