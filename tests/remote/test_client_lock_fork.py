"""A fork waits for a client being made: a child forked while a thread of its parent imports a client's modules
(the process's first store client) would find the module's import lock held by a thread it does not have, and wait
for ever when it makes its own client (``torch_drt._inherited_clients``; the hang was a loading worker of
``test_node_cache_limit``'s 4 processes x 2 workers, in ``from aiobotocore.session import AioSession``)."""

from __future__ import annotations

import os
import threading

from torch_drt import _inherited_clients


def test_a_fork_waits_for_the_client_a_thread_is_making():
    lock, forked, made = _inherited_clients.client_lock(), threading.Event(), []
    holding = threading.Event()

    def make_a_client() -> None:
        with lock:
            holding.set()
            forked.wait(2.0)  # the old fork went on at once, the client half made; now the fork waits for this
            made.append(True)

    maker = threading.Thread(target=make_a_client)
    maker.start()
    assert holding.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: the client was made before the fork, and its own lock is free
        ok = bool(made) and _inherited_clients.client_lock().acquire(timeout=10)
        os._exit(0 if ok else 3)
    forked.set()
    maker.join(30)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child was forked while a client was being made"
    assert lock.acquire(timeout=10)  # the parent's lock is released after the fork
    lock.release()

