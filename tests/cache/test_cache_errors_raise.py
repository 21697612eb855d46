"""torch_drt's own cache API raises typed exceptions; only torch_drt.compat.dataset_rt answers with values."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import QUIET, ListSource

import torch_drt as drt
import torch_drt.compat.dataset_rt as compat

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
ROOT = Path(__file__).resolve().parents[2]


class Broken(ListSource):
    def __iter__(self):
        yield from list(super().__iter__())[:2]
        raise OSError("the disk went away")


def test_a_failed_source_raises_instead_of_a_result_without_a_dataset(runtime, tmp_path):
    # the README's `result.dataset` turned this failure into "AttributeError: ... has no attribute 'dataset'"
    with pytest.raises(drt.CacheSourcesError, match=r"1 of 1 sources have no cache \(b: OSError: the disk went away"):
        runtime.from_cache_sources(Broken("b", 5), tmp_path, reader_config=SEQ, writer_config=QUIET)


def test_the_error_keeps_every_outcome_across_pickling(runtime, tmp_path):
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache([ListSource("a", 2), Broken("b", 5)], tmp_path, writer_config=QUIET)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.results == info.value.results and str(again) == str(info.value)
    assert [type(r).__name__ for r in again.results] == ["CacheWriteSuccess", "CacheWriteError"]
    assert again.paths == [tmp_path / "a"] and [f.source_name for f in again.failures] == ["b"]


def test_compat_keeps_dataset_rts_values_for_the_same_failures(tmp_path):
    runtime = compat.DatasetRuntime(num_workers=1)
    results = runtime.write_cache([ListSource("a", 2), Broken("b", 5)], tmp_path / "w", writer_config=QUIET)
    assert [type(r) for r in results] == [compat.CacheWriteSuccess, compat.CacheWriteError]
    res = runtime.from_cache_sources(Broken("b", 5), tmp_path / "f", reader_config=SEQ, writer_config=QUIET)
    assert isinstance(res, compat.CacheSourcesDatasetError) and "the disk went away" in res.message
    res = runtime.from_cache_sources([ListSource("a", 2), Broken("b", 5)], tmp_path / "p", reader_config=SEQ,
                                     writer_config=QUIET)
    assert isinstance(res, compat.CacheSourcesDatasetSuccess) and len(res.dataset) == 2
    assert isinstance(res.dataset.update_manifests(2), compat.Err)


def test_result_values_are_not_part_of_torch_drts_own_api():
    values = {"CacheSourcesDatasetError", "CacheSourcesDatasetResult", "CacheSourcesDatasetSuccess", "Err", "Ok"}
    assert not values & set(drt.__all__) and not values & set(drt.cache.__all__)
    assert values <= set(compat.__all__)
    assert not hasattr(drt.CachedDataset, "update_manifests") and hasattr(compat.CachedDataset, "update_manifests")


MISSING_S3FS = textwrap.dedent(
    """
    import sys
    sys.modules["s3fs"] = None  # as if the optional dependency were not installed
    import torch_drt as drt
    import torch_drt.compat.dataset_rt as compat
    sys.path.insert(0, {tests!r})
    from conftest import ListSource

    quiet = drt.WriterConfig(show_progress=False)
    for call in ("write_cache", "from_cache_sources"):
        kwargs = dict(reader_config=drt.ReaderConfig(seed=0)) if call == "from_cache_sources" else dict()
        try:
            getattr(drt.DatasetRuntime(1), call)(ListSource("x", 2), "s3://bucket/caches", writer_config=quiet,
                                                 **kwargs)
        except ImportError as e:
            print(call, "ImportError", e)
    (value,) = compat.DatasetRuntime(1).write_cache(ListSource("x", 2), "s3://bucket/caches", writer_config=quiet)
    print("compat", type(value).__name__)
    """
)


def test_a_missing_optional_dependency_raises_before_anything_is_written():
    code = MISSING_S3FS.format(tests=str(ROOT / "tests"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines[:2]] == [
        ["write_cache", "ImportError"], ["from_cache_sources", "ImportError"]
    ], proc.stdout
    assert all("s3://bucket/caches" in line and "s3fs" in line for line in lines[:2]), proc.stdout
    assert lines[2] == "compat CacheWriteError"  # dataset-rt's answer stays a value
