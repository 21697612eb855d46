"""The last differences between ``torch_drt.compat.dataloader_rs`` and dataloader-rs 0.2 (issue 23), each confirmed
side by side against the real package: fork after an epoch started, Ctrl-C, out-of-range ``num_workers``."""

from __future__ import annotations

import os
import signal

import pytest
from script_runner import interrupt_script

from torch_drt.compat.dataloader_rs import PyDataloader, PyDataset


class Numbers(PyDataset):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize("num_workers", [1025, 2**32, 2**63, 2**64])
def test_num_workers_beyond_the_thread_limit_is_refused_by_the_constructor(num_workers):
    with pytest.raises(ValueError, match="num_workers"):
        PyDataloader(Numbers(4), num_workers=num_workers)
    assert len(PyDataloader(Numbers(4), num_workers=1024)) == 4


def _child_status(body) -> tuple[int, str]:
    """Fork; the child runs ``body()`` and reports what it raised (exit 0: nothing) within 20 s."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code, text = 0, ""
        try:
            body()
        except BaseException as e:  # reported to the parent
            code, text = 1, f"{type(e).__name__}: {e}"
        os.write(write, text.encode())
        os._exit(code)
    os.close(write)
    import select
    import signal

    ready, _, _ = select.select([read], [], [], 20)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        return -1, "the child hung (killed after 20 s)"
    text = b"".join(iter(lambda: os.read(read, 4096), b"")).decode()
    os.close(read)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), text


@pytest.mark.parametrize(
    "options", [{"num_workers": 2}, {"item_concurrency": 2}, {"num_workers": 2, "item_concurrency": 2}]
)
def test_an_epoch_started_in_the_parent_raises_runtime_error_in_a_forked_child(options):
    loader = PyDataloader(Numbers(40), batch_size=2, **options)
    iterator = iter(loader)
    assert next(iterator) == [0, 1]
    code, text = _child_status(lambda: list(iterator))
    assert code == 1 and text.startswith("RuntimeError") and "fork" in text, (code, text)
    assert [i for batch in iterator for i in batch] == list(range(2, 40))  # the parent's epoch goes on
    # a new epoch in the child is fine (dataloader-rs too)
    assert _child_status(lambda: [i for batch in loader for i in batch] == list(range(40)) or 1 / 0) == (0, "")


def test_an_epoch_without_threads_continues_in_a_forked_child():
    iterator = iter(PyDataloader(Numbers(6), batch_size=2))
    assert next(iterator) == [0, 1]
    assert _child_status(lambda: [i for b in iterator for i in b] == [2, 3, 4, 5] or 1 / 0) == (0, "")
    assert next(iterator) == [2, 3]


BUSY = """
import itertools, os, signal
from torch_drt.compat.dataloader_rs import PyDataloader

class Busy:
    def __len__(self):
        return 100

    def __getitem__(self, index):
        if index >= 2:
            print("READY", flush=True)
            time.sleep(120)  # a worker busy in user code, as a slow decode or a network read
        return index

loader = PyDataloader(Busy(), batch_size=2, {options})
try:
    for batch in loader:
        pass
except KeyboardInterrupt:
    _interrupted.append(time.monotonic())
    raise
"""


def report(case: str, outcome: dict) -> None:
    """The measurement the 1 s goal is checked on (shown with ``pytest -rP``)."""
    print(f"{case}: Ctrl-C to exit {outcome['exit_s']:.2f} s (torch's own interpreter exit included), "
          f"torch_drt's exit hooks {outcome['hooks_s']} s, join time-outs granted {outcome['granted']}")


@pytest.mark.parametrize("options", ["num_workers=2", "item_concurrency=2"])
def test_ctrl_c_ends_a_busy_loader_without_waiting_for_its_workers(options):
    outcome = interrupt_script(BUSY.format(options=options))
    report(options, outcome)
    assert outcome["returncode"] == -signal.SIGINT and "KeyboardInterrupt" in outcome["stderr"]
    assert outcome["hooks_s"] is not None
    # the exit hook gave the busy threads a short grace, not the 2 s of a normal exit
    assert all(timeout is not None and timeout <= 0.2 for timeout in outcome["granted"]), outcome["granted"]


@pytest.mark.parametrize("sampler", ["itertools.count()", "(i % 100 for i in itertools.count())"])
def test_ctrl_c_interrupts_reading_an_endless_sampler(sampler):
    body = BUSY.format(options=f"sampler=itertools.chain(ready(), {sampler})").replace(
        "loader = PyDataloader", "def ready():\n    print('READY', flush=True)\n    yield 0\n\nloader = PyDataloader"
    )
    outcome = interrupt_script(body)
    report(sampler, outcome)
    assert outcome["returncode"] == -signal.SIGINT and "KeyboardInterrupt" in outcome["stderr"]
