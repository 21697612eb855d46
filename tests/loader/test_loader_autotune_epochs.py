"""num_workers="auto" / prefetch_depth="auto" (issue 28) over epochs shorter than a trial.

A cost model reads the setting the loader's pipeline really runs (as in ``test_loader_autotune.py``), so the
choices are deterministic.
"""

from __future__ import annotations

from autotune_rows import Rows

from torch_drt import StatefulDataLoader
from torch_drt.loader._memory import batch_bytes
from torch_drt.loader._tuner import Setting, Trial, trial_batches

BATCH = 4


def test_a_trial_longer_than_an_epoch_goes_on_in_the_next_one():
    # each epoch's new iterator started the trial running again: a trial longer than an epoch never ended, and the
    # search settled after its budget at the setting it started with, having measured nothing
    epoch = 12  # batches
    loader = StatefulDataLoader(Rows(epoch * BATCH), batch_size=BATCH, shuffle=True, seed=7, worker_method="thread",
                                num_workers="auto", prefetch_depth="auto")
    tune = loader._autotune
    tune.climb.max_workers = 8
    first = sum(trial_batches(tune.setting, tune.budget, threads=True, started=True))
    assert epoch < first  # (4 threads, one batch ahead: a round of warm-up, 8 measured)

    def measure(_loader, batch, setting, batches, elapsed_ns):
        workers = loader._mode.mapper.num_workers  # what the pipeline runs: 50 batches/s per worker
        return Trial(50.0 * workers, 0.9, batch_bytes(batch), 0)

    tune.measure = measure
    for _ in range(10):  # epochs
        assert len(list(loader)) == epoch
        if tune.done:
            break
    tried = [s for s, _ in tune.climb.history]
    assert tried[:2] == [Setting(4, 1), Setting(8, 1)], tried
    assert tune.done and loader.num_workers == 8, tried
