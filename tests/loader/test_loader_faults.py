"""StatefulDataLoader under faults (issue 10): interrupts, stuck and dying workers, forks, cycles, endless samplers.

Whatever happens to a batch, the loader makes progress, the interpreter can exit, and the state says exactly
which batch comes next. Cases that could hang or kill the test process run in a subprocess that must exit.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from concurrent.futures.process import BrokenProcessPool

import pytest
from script_runner import run_script, script_env

from torch_drt import StatefulDataLoader

PROCESS = {"worker_method": "process", "multiprocessing_context": "fork"}


class Hangs:
    """Item ``stuck`` does not return while the file ``flag`` exists; the others are their index."""

    def __init__(self, n: int, stuck: int, flag) -> None:
        self.n, self.stuck, self.flag = n, stuck, str(flag)
        open(self.flag, "w").close()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        while i == self.stuck and os.path.exists(self.flag):
            time.sleep(0.05)
        return i


@pytest.mark.parametrize("kwargs", [{}, PROCESS], ids=["threads", "processes"])
def test_a_stuck_batch_times_out_once_and_the_epoch_goes_on(kwargs, tmp_path):
    ds = Hangs(10, stuck=2, flag=tmp_path / "stuck")
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=1, timeout=0.5, collate_fn=list, **kwargs)
    it = iter(loader)
    assert next(it) == [0, 1]
    with pytest.raises(TimeoutError, match=r"timeout=0\.5"):
        next(it)
    assert loader.state_dict()["observation_offset"] == 4  # the stuck batch was abandoned, like a failed one
    assert [next(it) for _ in range(3)] == [[4, 5], [6, 7], [8, 9]]
    assert loader.state_dict()["epoch"] == 1
    os.unlink(ds.flag)
    loader.close()


HANGS = """
    import threading, time
    class Hangs:
        def __len__(self):
            return 10
        def __getitem__(self, i):
            if i == 2:
                threading.Event().wait()  # forever
            return i
"""


@pytest.mark.parametrize("method", ["thread", "process"])
def test_after_a_timeout_and_close_the_interpreter_exits(method):
    proc = run_script(HANGS + f"""
    from torch_drt import StatefulDataLoader
    if __name__ == "__main__":
        loader = StatefulDataLoader(Hangs(), batch_size=2, num_workers=2, timeout=0.5, collate_fn=list,
                                    worker_method={method!r}, multiprocessing_context="fork")
        it = iter(loader)
        print(next(it))
        try:
            next(it)
        except TimeoutError:
            print("timed out")
        print(next(it))
        loader.close()
        print("closed", flush=True)
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:4] == ["[0, 1]", "timed out", "[4, 5]", "closed"]


@pytest.mark.parametrize("method", ["thread", "process"])
def test_ctrl_c_exits_while_a_worker_is_inside_a_slow_getitem(method):
    script = textwrap.dedent(HANGS + f"""
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever the test run inherited
    from torch_drt import StatefulDataLoader
    if __name__ == "__main__":
        loader = StatefulDataLoader(Hangs(), batch_size=2, num_workers=2, collate_fn=list,
                                    worker_method={method!r}, multiprocessing_context="fork")
        for batch in loader:
            print(batch, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=script_env(), start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "[0, 1]"
        time.sleep(0.5)  # the main thread now waits on the stuck batch
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole process group
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the interpreter did not exit after Ctrl-C")
        assert "KeyboardInterrupt" in err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_an_endless_sampler_is_read_lazily():
    proc = run_script("""
    import itertools, resource
    from torch_drt import StatefulDataLoader
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, hard))  # reading it whole fails fast instead of swapping
    loader = StatefulDataLoader(list(range(10)), batch_size=2, sampler=itertools.repeat(7), collate_fn=list)
    it = iter(loader)
    print([next(it) for _ in range(3)])
    print(loader.state_dict()["observation_offset"])
    """, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:2] == ["[[7, 7], [7, 7], [7, 7]]", "6"]


class Dies:
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> int:
        if i == 2:
            os._exit(3)
        return i


def test_a_killed_process_worker_fails_its_batch_once_and_the_pool_is_rebuilt():
    loader = StatefulDataLoader(Dies(), batch_size=2, num_workers=2, collate_fn=list, **PROCESS)
    it = iter(loader)
    assert next(it) == [0, 1]
    with pytest.raises(BrokenProcessPool, match="terminated abruptly"):
        next(it)
    assert loader.state_dict() == {**loader.state_dict(), "epoch": 0, "observation_offset": 4}
    assert list(it) == [[i, i + 1] for i in range(4, 40, 2)]  # the rest of the epoch, on a rebuilt pool
    assert loader.state_dict()["epoch"] == 1
    got, it = [], iter(loader)
    while True:
        try:
            got.append(next(it))
        except BrokenProcessPool:
            got.append("died")
        except StopIteration:
            break
    assert got == [[0, 1], "died", *[[i, i + 1] for i in range(4, 40, 2)]]  # epoch 1: [2, 3] kills a worker again
    loader.close()


class Owner:
    """Holds a loader whose collate_fn is one of its own bound methods (a reference cycle)."""

    def __init__(self, **kwargs) -> None:
        self.loader = StatefulDataLoader(list(range(8)), batch_size=2, collate_fn=self.collate, **kwargs)

    def collate(self, items):
        return list(items)


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2}, {"num_workers": 2, "item_concurrency": 2}])
def test_a_loader_in_a_cycle_with_its_owner_is_collected(kwargs):
    owner = Owner(**kwargs)
    assert list(owner.loader) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None


def _iterate_in_child(loader, queue) -> None:
    queue.put([b for b in loader])


@pytest.mark.parametrize("kwargs", [{"num_workers": 2}, {"num_workers": 1, "item_concurrency": 2}])
def test_a_forked_child_iterates_a_loader_its_parent_used(kwargs):
    loader = StatefulDataLoader(list(range(8)), batch_size=2, collate_fn=list, **kwargs)
    assert len(list(loader)) == 4  # the parent's workers exist now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    child = ctx.Process(target=_iterate_in_child, args=(loader, queue))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("the forked child hung on the parent's worker pool")
    assert child.exitcode == 0
    assert queue.get() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert len(list(loader)) == 4  # the parent's loader still works


class AsyncBatches:
    """A dataset whose batch fetch is ``async def __getitems__`` (its ``__getitem__`` is plain)."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        return i

    async def __getitems__(self, indices: list[int]) -> list[int]:
        return [10 * i for i in indices]


class AllAsync(AsyncBatches):
    async def __getitem__(self, i: int) -> int:
        return i


@pytest.mark.parametrize("cls", [AsyncBatches, AllAsync])
@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2}])
def test_an_async_getitems_is_awaited(cls, kwargs):
    loader = StatefulDataLoader(cls(), batch_size=4, collate_fn=list, **kwargs)
    assert list(loader) == [[0, 10, 20, 30], [40, 50]]
