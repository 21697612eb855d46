"""The last differences between ``torch_drt.compat.dataset_rt`` and dataset-rt 0.4.8 (issue 23). Each program runs
on ``torch_drt.compat.dataset_rt`` and, when it is installed, on dataset-rt itself, with the same assertions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import torch_drt.compat.dataset_rt as drt

try:
    import dataset_rt
except ImportError:  # the side-by-side half is skipped
    dataset_rt = None

APIS = [
    pytest.param("ours", id="torch_drt"),
    pytest.param("theirs", id="dataset_rt", marks=pytest.mark.skipif(dataset_rt is None, reason="no dataset-rt")),
]


def api_of(which: str):
    return drt if which == "ours" else dataset_rt


class Numbers:
    """A source as dataset-rt's docs write them; ``raise_at`` raises ``error`` there. Pickles into writer processes."""

    def __init__(self, name: str, n: int, which: str = "ours", raise_at: int | None = None, error=None) -> None:
        self.name, self.n, self.which, self.raise_at, self.error = name, n, which, raise_at, error

    def __iter__(self):
        api = api_of(self.which)
        for i in range(self.n):
            if i == self.raise_at:
                raise self.error
            yield api.CacheInput(data=bytes([i % 256]) * (i % 5 + 1), metadata={"label": i % 3})


def write(which: str, names: list[str], root, processes: int, **sources):
    api = api_of(which)
    config = api.WriterConfig(show_progress=False, num_processes=processes)
    made = [Numbers(name, 4, which, **sources.get(name, {})) for name in names]
    return api.DatasetRuntime(num_workers=2).write_cache(made, root, writer_config=config)


def rows(results) -> list[tuple[str, str, str]]:
    return [(type(r).__name__, r.source_name, r.message if hasattr(r, "message") else "") for r in results]


@pytest.mark.parametrize("which", APIS)
@pytest.mark.parametrize(
    ("names", "reported"),
    [(["a", "b", "a"], "a"), (["Ab", "ab", "c"], "ab"), (["b", "AB", "Ab", "ab", "a", "a"], "Ab"), (["K", "k"], "k")],
)
def test_duplicate_names_in_writer_processes_fail_every_source(which, names, reported, tmp_path):
    results = write(which, names, tmp_path / "c", processes=1)
    message = f"duplicate generated cache path: {reported}"
    assert rows(results) == [("CacheWriteError", name, message) for name in names]
    assert not (tmp_path / "c").exists() or not [p for p in (tmp_path / "c").iterdir() if p.name in names]


@pytest.mark.parametrize("which", APIS)
def test_duplicate_names_without_writer_processes_raise_before_writing(which, tmp_path):
    with pytest.raises(ValueError, match="duplicate generated cache path"):
        write(which, ["a", "b", "a"], tmp_path / "c", processes=0)
    assert not (tmp_path / "c" / "b").exists()
    assert [r[0] for r in rows(write(which, ["Ab", "ab"], tmp_path / "d", processes=0))] == ["CacheWriteSuccess"] * 2


@pytest.mark.parametrize("which", APIS)
@pytest.mark.parametrize("processes", [0, pytest.param(1, marks=pytest.mark.slow), 2])  # 1: the same path as 2
@pytest.mark.parametrize("error", [KeyboardInterrupt("stop"), SystemExit(3)], ids=["KeyboardInterrupt", "SystemExit"])
def test_a_source_raising_keyboard_interrupt_or_system_exit_re_raises(which, processes, error, tmp_path):
    with pytest.raises(type(error)) as raised:
        write(which, ["ok", "k", "later"], tmp_path / "c", processes, k={"raise_at": 2, "error": error})
    assert str(error.args[0]) in str(raised.value)
    assert not (tmp_path / "c" / "k").exists()


@pytest.mark.parametrize("which", APIS)
@pytest.mark.parametrize("processes", [0, 1])
def test_a_source_raising_generator_exit_is_its_error_row(which, processes, tmp_path):
    results = write(which, ["ok", "k", "later"], tmp_path / "c", processes, k={"raise_at": 2, "error": GeneratorExit()})
    assert [(kind, name) for kind, name, _ in rows(results)] == [
        ("CacheWriteSuccess", "ok"), ("CacheWriteError", "k"), ("CacheWriteSuccess", "later")
    ]
    assert "GeneratorExit" in results[1].message


def _labels(batch) -> list[int]:
    return [int.from_bytes(sample.data, "little") for sample in batch]


class Counting:
    """``n`` samples whose payload is their number."""

    def __init__(self, name: str, n: int, which: str) -> None:
        self.name, self.n, self.which = name, n, which

    def __iter__(self):
        api = api_of(self.which)
        for i in range(self.n):
            yield api.CacheInput(data=i.to_bytes(2, "little"), metadata={"label": i % 3})


@pytest.mark.parametrize("which", APIS)
def test_a_pass_left_early_then_a_new_iterator(which, tmp_path):
    """Different, because a checkpoint is (pass, batches done): torch_drt's new iterator reads the next pass as an
    uninterrupted run does; dataset-rt's continues its stream where the last iterator stopped."""
    api = api_of(which)
    runtime = api.DatasetRuntime(num_workers=2)
    runtime.write_cache([Counting("a", 20, which)], tmp_path, writer_config=api.WriterConfig(show_progress=False))

    def loader():
        dataset = runtime.cached_dataset([tmp_path / "a"], reader_config=api.ReaderConfig(seed=5))
        return dataset.to_torch_dataloader(batch_size=2, seed=7, num_workers=0, collate_fn=_labels, verbose=False)

    uninterrupted = loader()
    first, second = ([x for batch in uninterrupted for x in batch] for _ in range(2))
    interrupted = loader()
    iterator = iter(interrupted)
    left = next(iterator) + next(iterator)
    del iterator
    after = [x for batch in interrupted for x in batch]
    assert left == first[:4] and len(after) == 20 and first != second
    if which == "ours":
        assert after == second
    else:
        assert after == first[4:] + second[:4]


def _two_caches(which: str, root):
    api = api_of(which)
    runtime = api.DatasetRuntime(num_workers=2)
    runtime.write_cache([Counting("a", 5, which), Counting("b", 4, which)], root,
                        writer_config=api.WriterConfig(show_progress=False))
    return runtime, runtime.cached_dataset([root / "a", root / "b"], reader_config=api.ReaderConfig(seed=1))


def _rewrite_manifest(path, change) -> None:
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2))


@pytest.mark.parametrize("which", APIS)
@pytest.mark.parametrize(
    "damage",
    ["sample_count", "new_key", "rewritten", "removed", "not_json"],
)
def test_update_manifests_reports_a_loaded_caches_manifest_changed_on_disk(which, damage, tmp_path):
    api = api_of(which)
    runtime, dataset = _two_caches(which, tmp_path)
    manifest = tmp_path / "b" / "manifest.json"
    _rewrite_manifest(tmp_path / "a" / "manifest.json", lambda m: None)  # reformatted, same content: unchanged
    assert isinstance(dataset.update_manifests(3), api.Ok)
    if damage == "sample_count":
        _rewrite_manifest(manifest, lambda m: m.update(sample_count=3))
    elif damage == "new_key":
        _rewrite_manifest(manifest, lambda m: m.update(note="edited"))
    elif damage == "rewritten":  # the same source name written again, with other samples
        shutil.rmtree(tmp_path / "b")
        runtime.write_cache([Counting("b", 6, which)], tmp_path, writer_config=api.WriterConfig(show_progress=False))
    elif damage == "removed":
        manifest.unlink()
    else:
        manifest.write_text("garbage")
    result = dataset.update_manifests(3)
    assert isinstance(result, api.Err), result
    error = result.error
    assert isinstance(error, api.ManifestUpdateError) and Path(error.path).resolve() == manifest.resolve()
    if damage in ("sample_count", "new_key", "rewritten"):
        assert error.message == "manifest changed since dataset construction"


METADATA_CALLS = {
    "get_metadata": lambda dataset: dataset.get_metadata(),
    "samples_metadata": lambda dataset: dataset.samples_metadata(),
    "update_metadata": lambda dataset: dataset.update_metadata(dataset.active.table if hasattr(dataset, "active")
                                                               else dataset.get_metadata()),
    "to_torch_dataloader": lambda dataset: dataset.to_torch_dataloader(batch_size=2, num_workers=0, verbose=False,
                                                                       collate_fn=len),
}


@pytest.mark.parametrize("which", APIS)
@pytest.mark.parametrize(("damage", "error"), [("truncated", RuntimeError), ("removed", RuntimeError),
                                               ("another_caches", ValueError)])
@pytest.mark.parametrize("call", sorted(METADATA_CALLS))
def test_metadata_damaged_after_opening_is_noticed_where_dataset_rt_notices_it(which, damage, error, call, tmp_path):
    _, dataset = _two_caches(which, tmp_path)
    metadata = tmp_path / "a" / "metadata.arrow"
    if damage == "truncated":
        metadata.write_bytes(metadata.read_bytes()[: metadata.stat().st_size // 2])
    elif damage == "removed":
        metadata.unlink()
    else:
        shutil.copy(tmp_path / "b" / "metadata.arrow", metadata)
    with pytest.raises(error) as raised:
        METADATA_CALLS[call](dataset)
    if which == "ours":
        assert "metadata.arrow" in str(raised.value) and str(tmp_path / "a") in str(raised.value)
    # reading samples does not need the file, in either package
    assert len(dataset) == 9 and sum(1 for _ in dataset) == 9
    cache_id = next(iter(dataset)).cache_id
    assert dataset.get_item(cache_id, 0).cache_id == cache_id


@pytest.mark.parametrize("which", APIS)
def test_metadata_rewritten_with_the_same_bytes_is_not_damage(which, tmp_path):
    _, dataset = _two_caches(which, tmp_path)
    metadata = tmp_path / "a" / "metadata.arrow"
    data = metadata.read_bytes()
    metadata.unlink()
    metadata.write_bytes(data)  # another file (inode, time), the same content
    for call in sorted(METADATA_CALLS):
        METADATA_CALLS[call](dataset)
