"""A save/load harness for torchdata nodes, after torchdata's own ``run_test_save_load_state``."""

from __future__ import annotations

from torchdata.nodes import Loader


def check_save_load(node, midpoint: int) -> None:
    """Resume from the start, mid-epoch (epochs 0 and 1) and at the end of epoch 0; outputs must match."""
    x = Loader(node)
    initial = x.state_dict()
    it = iter(x)
    results = [next(it) for _ in range(midpoint)]
    mid_0 = x.state_dict()
    results += list(it)
    end_0 = x.state_dict()
    it = iter(x)
    results_1 = [next(it) for _ in range(midpoint)]
    mid_1 = x.state_dict()
    results_1 += list(it)
    assert results and results_1

    x.load_state_dict(mid_0)
    assert list(x) == results[midpoint:]
    assert list(x) == results_1  # the next epoch after a resume
    x.load_state_dict(mid_1)
    assert list(x) == results_1[midpoint:]
    x.load_state_dict(initial)
    assert list(x) == results
    assert list(x) == results_1
    x.load_state_dict(end_0)
    assert list(x) == results_1
