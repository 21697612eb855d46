"""OrderedMapper(adaptive=True): where items are mapped (issue 26). A CPU-bound stage whose worker threads wait for
the GIL goes inline; an I/O-bound one (a sleep, a real socket) stays on the workers. Decisions are asserted (which
thread mapped each item), never timings."""

from __future__ import annotations

import socket
import threading
import time
import zlib

import pytest
from torchdata.nodes import IterableWrapper, Loader

from torch_drt.nodes import OrderedMapper
from torch_drt.nodes._inline_cost import InlineCost, own_seconds

BLOCK = bytes(64 << 10)  # zlib releases the GIL for 5 KiB or more


class CpuBound:
    """``cpu_s`` of Python per item in eight pieces, each followed by a ``zlib.crc32`` that releases the GIL (as
    numpy's copies and decoders do): on several workers, each piece waits for the others' Python to get it back."""

    def __init__(self, cpu_s: float) -> None:
        self.cpu_s = cpu_s
        self.threads: list[threading.Thread] = []

    def __call__(self, x: int) -> int:
        self.threads.append(threading.current_thread())
        for _ in range(8):
            end = time.thread_time() + self.cpu_s / 8
            while time.thread_time() < end:
                pass
            zlib.crc32(BLOCK)
        return x


class Sleeps:
    """Waits ``seconds`` per item, using almost no CPU."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.threads: list[threading.Thread] = []

    def __call__(self, x: int) -> int:
        self.threads.append(threading.current_thread())
        time.sleep(self.seconds)
        return x


def on_main(fn) -> list[bool]:
    main = threading.main_thread()
    return [t is main for t in fn.threads]


def test_a_cpu_bound_stage_whose_workers_wait_for_the_gil_goes_inline():
    # a few hundred us of CPU per item (the spins and the checksums), 8 workers: on a worker an item's wall time is
    # mostly waits for the others' Python (a mean of several ms), which the calling thread would not have
    fn = CpuBound(100e-6)
    mapper = OrderedMapper(IterableWrapper(range(150)), fn, num_workers=8, inline_below_s=700e-6)
    assert list(Loader(mapper)) == list(range(150))
    mapped_inline = on_main(fn)
    assert not any(mapped_inline[:8])  # measured on the workers first ...
    assert any(mapped_inline[8:])  # ... then mapped in the calling thread (on wall times: never, at any load)
    mapper.close()


def test_a_stage_sleeping_stays_on_the_workers():
    fn = Sleeps(0.005)
    mapper = OrderedMapper(IterableWrapper(range(40)), fn, num_workers=2, in_flight=4)
    assert list(Loader(mapper)) == list(range(40))
    assert not any(on_main(fn))
    mapper.close()


@pytest.fixture
def slow_echo():
    """A real TCP server on 127.0.0.1 that answers each 1-byte request after 5 ms."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while (data := conn.recv(1)) and not stop.is_set():
                time.sleep(0.005)
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    stop.set()
    server.close()


class Fetches:
    """One request and its answer per item, on the connection its worker opened when it started."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.local = threading.local()
        self.threads: list[threading.Thread] = []
        self.conns: list[socket.socket] = []

    def connect(self, worker: int) -> None:
        self.local.conn = socket.create_connection(self.address, timeout=20)
        self.conns.append(self.local.conn)

    def __call__(self, x: int) -> int:
        self.threads.append(threading.current_thread())
        self.local.conn.sendall(b"x")
        assert self.local.conn.recv(1) == b"x"
        return x


def test_a_stage_waiting_on_a_socket_stays_on_the_workers(slow_echo):
    fn = Fetches(slow_echo)
    mapper = OrderedMapper(IterableWrapper(range(40)), fn, num_workers=2, in_flight=4, worker_init=fn.connect)
    assert list(Loader(mapper)) == list(range(40))
    assert not any(on_main(fn))
    mapper.close()
    for conn in fn.conns:
        conn.close()


def test_a_workers_wait_counts_unless_other_threads_ran_meanwhile():
    assert own_seconds(5_000_000, 20_000, 0) == 5e-3  # I/O: the process was idle, inline would wait too
    assert own_seconds(1_000_000, 100_000, 900_000) == 1e-4  # the others ran: a wait for the GIL
    assert own_seconds(5_000_000, 0, 100_000) == 4.2e-3  # the others' CPU bounds the GIL's share (x PREEMPTED)


def test_a_stage_back_from_inline_at_once_waits_twice_as_long_before_the_next_try():
    cost = InlineCost(1e-3)
    decisions = [cost.inline(1e-4, False, False) for _ in range(8)]
    assert decisions == [False] * 7 + [True]  # 8 items on the workers, then inline
    assert cost.inline(1.0, True, False)  # a worker's item delivered after the switch: not the calling thread's
    assert not cost.inline(50e-3, True, True)  # the calling thread's clock: slow at once, back to the workers
    decisions = [cost.inline(1e-4, False, False) for _ in range(40)]
    assert decisions.index(True) + 1 >= 16  # and 16 items there at least before the next try
    assert cost.hold == 16


def test_a_stage_that_stayed_inline_a_while_may_come_back_after_the_warm_up():
    cost = InlineCost(1e-3)
    assert [cost.inline(1e-4, False, False) for _ in range(8)][-1]
    assert all(cost.inline(1e-4, True, True) for _ in range(20))  # cheap in the calling thread too: stays
    assert not cost.inline(50e-3, True, True)  # then it grew slow
    assert cost.hold == 8
