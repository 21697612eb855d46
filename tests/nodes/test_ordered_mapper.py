"""OrderedMapper: order, state, the adaptive inline path, interrupts, time-outs and dying process workers."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import pytest
from nodes_harness import check_save_load
from torchdata.nodes import IterableWrapper, Loader

from torch_drt.nodes import OrderedMapper


class Recorder:
    """Squares items and records which thread mapped each one; items >= ``slow_from`` take ``delay`` seconds."""

    def __init__(self, slow_from: int = 10**9, delay: float = 0.0) -> None:
        self.slow_from, self.delay = slow_from, delay
        self.threads: list[threading.Thread] = []

    def __call__(self, x: int) -> int:
        self.threads.append(threading.current_thread())
        if x >= self.slow_from:
            time.sleep(self.delay)
        return x * x


def test_cheap_items_move_inline_and_slow_ones_back_to_the_workers():
    fn = Recorder(slow_from=60, delay=0.005)
    mapper = OrderedMapper(IterableWrapper(range(100)), fn, num_workers=2, in_flight=4)
    assert list(Loader(mapper)) == [x * x for x in range(100)]
    main = threading.main_thread()
    on_main = [t is main for t in fn.threads]
    assert not any(on_main[:8])  # the warm-up runs on the workers ...
    assert any(on_main[8:60])  # ... then cheap items are mapped in the calling thread ...
    assert not any(on_main[80:])  # ... and once they grow slow, the workers take over again


def test_adaptive_off_keeps_every_item_on_the_workers():
    fn = Recorder()
    mapper = OrderedMapper(IterableWrapper(range(50)), fn, num_workers=2, adaptive=False)
    assert list(Loader(mapper)) == [x * x for x in range(50)]
    assert threading.main_thread() not in fn.threads


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("midpoint", [0, 7, 20])
def test_save_load_counts_delivered_items_only(workers, midpoint):
    check_save_load(OrderedMapper(IterableWrapper(range(25)), Recorder(), num_workers=workers, in_flight=6), midpoint)


class FailsOn:
    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __call__(self, x: int) -> int:
        if x == self.bad:
            raise KeyError(f"no {x}")
        return x


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2}, {"num_workers": 2, "method": "process"}])
def test_an_error_fails_its_item_only(kwargs):
    mapper = OrderedMapper(IterableWrapper(range(6)), FailsOn(2), multiprocessing_context="fork", **kwargs)
    mapper.reset()
    got = []
    for _ in range(6):
        try:
            got.append(mapper.next())
        except KeyError as e:
            got.append(str(e))
    assert got == [0, 1, "'no 2'", 3, 4, 5]
    mapper.close()


class Stuck:
    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __call__(self, x: int) -> int:
        while x == 1 and os.path.exists(self.flag):
            time.sleep(0.02)
        return x


@pytest.mark.parametrize("method", ["thread", "process"])
def test_a_time_out_abandons_the_item_and_the_workers_go_on(tmp_path, method):
    flag = tmp_path / "stuck"
    flag.touch()
    mapper = OrderedMapper(IterableWrapper(range(5)), Stuck(str(flag)), num_workers=1, timeout=0.3, method=method,
                           multiprocessing_context="fork", adaptive=False)
    mapper.reset()
    assert mapper.next() == 0
    with pytest.raises(TimeoutError):
        mapper.next()
    assert [mapper.next() for _ in range(3)] == [2, 3, 4]
    flag.unlink()
    mapper.close()


def dies_on_3(x: int) -> int:
    if x == 3:
        os._exit(9)
    return x


def test_a_dead_worker_fails_its_item_once_and_is_replaced():
    mapper = OrderedMapper(IterableWrapper(range(8)), dies_on_3, num_workers=2, method="process",
                           multiprocessing_context="fork")
    mapper.reset()
    before = set(mapper.worker_pids())
    got = []
    for _ in range(8):
        try:
            got.append(mapper.next())
        except BrokenProcessPool:
            got.append("died")
    assert got == [0, 1, 2, "died", 4, 5, 6, 7]
    assert len(mapper.worker_pids()) == 2 and set(mapper.worker_pids()) != before
    mapper.close()


def record_worker(index: int) -> None:
    os.environ["TORCH_DRT_TEST_WORKER"] = str(index)


def worker_and_item(x: int) -> tuple[str, int]:
    return os.environ.get("TORCH_DRT_TEST_WORKER", "?"), x


class Item(int):
    """An item that names the worker it wants (OrderedMapper honours an int ``worker`` attribute)."""

    @property
    def worker(self) -> int:
        return int(self) % 2


def test_worker_init_runs_in_each_process_and_items_keep_their_worker():
    mapper = OrderedMapper(IterableWrapper([Item(i) for i in range(10)]), worker_and_item, num_workers=2,
                           method="process", multiprocessing_context="spawn", worker_init=record_worker)
    out = list(Loader(mapper))
    assert [x for _, x in out] == list(range(10))
    assert all(w == str(x % 2) for w, x in out)
    mapper.close()


def torch_op(x: int) -> int:
    import torch

    return int(torch.full((200_000,), x, dtype=torch.int64).sum())  # large enough for torch's parallel_for


def test_forked_process_workers_run_torch_ops_after_the_parent_ran_them_on_threads():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch_op(1)  # the parent's OpenMP pool is now running: a forked child using it would hang
        mapper = OrderedMapper(IterableWrapper(range(4)), torch_op, num_workers=2, method="process",
                               multiprocessing_context="fork", timeout=60)
        assert list(Loader(mapper)) == [200_000 * x for x in range(4)]
        mapper.close()
    finally:
        torch.set_num_threads(threads)


def test_big_tasks_and_big_results_do_not_deadlock():
    from script_runner import run_script

    proc = run_script("""
    from torchdata.nodes import IterableWrapper, Loader
    from torch_drt.nodes import OrderedMapper

    def echo(item):
        return item + b"!"  # a large result that is no tensor: it travels through the pipe itself

    if __name__ == "__main__":
        items = [bytes([i]) * 300_000 for i in range(24)]  # each task and each result fills a pipe four times
        mapper = OrderedMapper(IterableWrapper(items), echo, num_workers=1, in_flight=8, method="process",
                               multiprocessing_context="fork")
        out = list(Loader(mapper))
        print(len(out), all(o == i + b"!" for o, i in zip(out, items)))
    """, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "24 True"


def test_workers_that_cannot_start_are_reported_once_clearly():
    from script_runner import run_script

    proc = run_script("""
    from torchdata.nodes import IterableWrapper
    from torch_drt.nodes import OrderedMapper

    def double(x):
        return 2 * x

    mapper = OrderedMapper(IterableWrapper(range(8)), double, num_workers=2, method="process",
                           multiprocessing_context="spawn")  # no __main__ guard: every worker dies at start
    mapper.reset()
    try:
        mapper.next()
    except RuntimeError as e:
        print("refused:", "exit as they start" in str(e))
    """, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: True" in proc.stdout


def twice(x: int) -> int:
    return 2 * x


def test_a_resize_keeps_the_processes_unless_their_number_or_transport_changes():
    mapper = OrderedMapper(IterableWrapper(range(60)), twice, num_workers=2, in_flight=3, method="process",
                           multiprocessing_context="fork")
    mapper.reset()
    got = [mapper.next() for _ in range(10)]
    pids = mapper.worker_pids()
    assert mapper.transport.slots == 4  # a worker's share of 3 in flight, 2, plus two
    mapper.resize(2, 4)  # more in flight, the same ring slots per worker (the autotuner's deeper trial)
    mapper.reset({OrderedMapper.SOURCE_KEY: mapper.get_state()[OrderedMapper.SOURCE_KEY]})
    got += [mapper.next() for _ in range(10)]
    assert mapper.worker_pids() == pids and mapper.in_flight == 4 and mapper.transport.slots == 4
    mapper.resize(2, 8)  # 6 slots per worker: new rings, so new processes
    mapper.reset({OrderedMapper.SOURCE_KEY: mapper.get_state()[OrderedMapper.SOURCE_KEY]})
    got += [mapper.next() for _ in range(40)]
    assert not set(mapper.worker_pids()) & set(pids) and mapper.transport.slots == 6
    assert got == [2 * x for x in range(60)]
    mapper.close()
