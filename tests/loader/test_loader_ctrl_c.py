"""Ctrl-C at a terminal (SIGINT to the process group) ends a program whose ``torch_drt.StatefulDataLoader`` is busy
or reads an endless sampler (issue 23): the workers' current items do not hold the exit up."""

from __future__ import annotations

import signal

import pytest
from script_runner import interrupt_script

BODY = """
import itertools
from torch_drt import StatefulDataLoader

class Busy:
    def __len__(self):
        return 100

    def __getitem__(self, index):
        if index >= 2:
            print("READY", flush=True)
            time.sleep(120)  # a worker busy in user code, as a slow decode or a network read
        return index

loader = StatefulDataLoader(Busy(), batch_size=2, {options})
try:
    for batch in loader:
        pass
except KeyboardInterrupt:
    _interrupted.append(time.monotonic())
    raise
"""


@pytest.mark.parametrize(
    "options",
    [
        "num_workers=2, worker_method='thread'",
        "num_workers=2, multiprocessing_context='fork'",
        "sampler=itertools.cycle(range(100)), num_workers=2, worker_method='thread'",
        "sampler=itertools.cycle(range(100))",
    ],
)
def test_ctrl_c_ends_a_busy_loader_without_waiting_for_its_workers(options):
    outcome = interrupt_script(BODY.format(options=options))
    print(f"{options}: Ctrl-C to exit {outcome['exit_s']:.2f} s (torch's own interpreter exit included), "
          f"torch_drt's exit hooks {outcome['hooks_s']} s, join time-outs granted {outcome['granted']}")
    assert outcome["returncode"] == -signal.SIGINT and "KeyboardInterrupt" in outcome["stderr"]
    assert outcome["hooks_s"] is not None
    # the exit hook gave the busy threads a short grace, not the 2 s of a normal exit
    assert all(timeout is not None and timeout <= 0.2 for timeout in outcome["granted"]), outcome["granted"]
