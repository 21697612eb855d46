"""to_torch_dataloader under faults and hostile arguments (issue 10).

A failing transform fails its batch only; states that do not describe the loader are refused; budgets are
arithmetic, so huge ``samples_per_epoch`` costs nothing and absurd worker counts are refused up front.
"""

from __future__ import annotations

import pytest
from conftest import ListSource
from script_runner import run_script

import torch_drt as drt

FORK = {"multiprocessing_context": "fork"}


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("f", 40)], tmp_path, reader_config=drt.ReaderConfig(seed=3),
                                      writer_config=drt.WriterConfig(show_progress=False))


def sample_id(sample) -> int:
    return sample.sample_id


def fails_on_7(sample) -> int:
    if sample.sample_id == 7:
        raise KeyError(f"no sample {sample.sample_id}")
    return sample.sample_id


def drain(loader) -> list:
    """Every batch of one pass, with a failed batch recorded as its exception's type name."""
    out, it = [], iter(loader)
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except Exception as e:
            out.append(type(e).__name__)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_transform_fails_its_batch_and_the_pass_goes_on(dataset, workers):
    loader = dataset.to_torch_dataloader(sample_transform_fn=fails_on_7, collate_fn=list, batch_size=5,
                                         shuffle=False, num_workers=workers, **FORK)
    got = drain(loader)
    assert got.count("KeyError") == 1 and len(got) == 8  # 7 good batches and the failed one
    assert sorted(x for b in got if b != "KeyError" for x in b) == [i for i in range(40) if not 5 <= i < 10]
    assert len(drain(loader)) == 8  # the next pass is whole too


def _negated(state, path=()):
    """Every copy of ``state`` with one non-negative int field (at any depth) made negative."""
    if isinstance(state, dict):
        for key, value in state.items():
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                yield (*path, key), {**state, key: -1 - value}
            for sub_path, sub in _negated(value, (*path, key)):
                yield sub_path, {**state, key: sub}


@pytest.mark.parametrize("workers", [0, 2])
def test_states_with_negative_positions_are_refused(dataset, workers):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, samples_per_epoch=32,
                  num_workers=workers, seed=1, **FORK)
    loader = dataset.to_torch_dataloader(**kwargs)
    it = iter(loader)
    next(it), next(it), next(it)
    state = loader.state_dict()
    cases = list(_negated(state))
    assert cases
    for path, bad in cases:
        resumed = dataset.to_torch_dataloader(**kwargs)
        with pytest.raises(ValueError):
            resumed.load_state_dict(bad)
            next(iter(resumed))
            pytest.fail(f"a state with {'.'.join(map(str, path))} < 0 was accepted")


@pytest.mark.parametrize("state", [None, {}, [], "state"])
def test_an_empty_state_is_refused(dataset, state):
    loader = dataset.to_torch_dataloader(collate_fn=list, batch_size=4)
    with pytest.raises(ValueError, match="state"):
        loader.load_state_dict(state)


def test_a_state_of_another_budget_is_refused_another_worker_count_resumes(dataset):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, samples_per_epoch=32, seed=1, **FORK)
    loader = dataset.to_torch_dataloader(num_workers=2, **kwargs)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    with pytest.raises(ValueError, match="samples_per_epoch"):
        dataset.to_torch_dataloader(num_workers=2, **{**kwargs, "samples_per_epoch": 40}).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size"):
        dataset.to_torch_dataloader(num_workers=2, **{**kwargs, "batch_size": 8}).load_state_dict(state)
    other = dataset.to_torch_dataloader(num_workers=2, **kwargs)
    other.load_state_dict(state)  # the same settings resume
    rest = list(other)
    assert len(rest) == 7
    inline = dataset.to_torch_dataloader(num_workers=0, **kwargs)
    inline.load_state_dict(state)  # one stream per rank: the rows do not depend on the workers
    assert list(inline) == rest


def test_budgets_are_arithmetic_and_absurd_worker_counts_are_refused(dataset):
    path = str(dataset.cache_paths[0])
    proc = run_script(f"""
    import resource
    import torch_drt as drt
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, hard))  # a per-batch list fails fast instead of swapping
    ds = drt.DatasetRuntime(1).cached_dataset([{path!r}], reader_config=drt.ReaderConfig(seed=0))
    loader = ds.to_torch_dataloader(collate_fn=len, batch_size=1, samples_per_epoch=2**53)
    print(len(loader) == 2**53, next(iter(loader)))
    loader = ds.to_torch_dataloader(collate_fn=len, batch_size=1000, samples_per_epoch=2**53 - 1, shuffle=False)
    print(len(loader) == -(-(2**53 - 1) // 1000))
    try:
        ds.to_torch_dataloader(collate_fn=len, num_workers=1 << 32)
    except ValueError as e:
        print("refused", "num_workers" in str(e))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:3] == ["True 1", "True", "refused True"]
