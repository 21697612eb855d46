"""A cache loader built with seed="random" adopts a checkpoint's seed, even after it has loaded batches with its own
(the streams it already built are rebuilt with the adopted seed, inline and in loading processes)."""

from __future__ import annotations

import pytest
import torch

import torch_drt as drt


def ids(samples) -> torch.Tensor:
    return torch.tensor([s.sample_id for s in samples])


@pytest.mark.parametrize("workers", [0, 1])
def test_a_used_loader_resumes_a_checkpoint_with_its_seed(make_cache, workers):
    dataset = drt.DatasetRuntime(1).cached_dataset(make_cache("seeds", n=100), reader_config=drt.ReaderConfig(seed=1))
    kwargs = dict(collate_fn=ids, batch_size=10, num_workers=workers, seed="random", multiprocessing_context="fork")
    if workers == 0:
        del kwargs["multiprocessing_context"]
    saved = dataset.to_torch_dataloader(**kwargs)
    it = iter(saved)
    next(it)
    state = saved.state_dict()
    tail = [b.tolist() for b in it]
    used = dataset.to_torch_dataloader(**kwargs)
    assert [b.tolist() for b in used] != [None]  # a whole epoch read with its own seed first
    used.load_state_dict(state)
    assert [b.tolist() for b in used] == tail
    assert used.seed == saved.seed == used.state_dict()["seed"]
