"""Forked loading workers (and any forked child) leave the parent's network clients alone: the parent keeps
reading the right bytes at once on its pooled connections, and no connection carries both a child's requests and
the parent's.

The hazard is real: a client's pooled sockets are registered in an epoll instance that a forked child shares with
its parent, and a child whose copy of the client is finalized unregisters them from it (the parent's next request
on such a socket waits for its time-out). A child drops its copy of the parent's fsspec client when it makes its
own (``ObjectStoreDataset`` makes one per process), and any copy of a dataset it lets go of. The parent's item
``/p/i`` and a child's ``/c/i`` are told apart by the server, which records the roles each connection served.
"""

from __future__ import annotations

import collections
import gc
import os
import weakref

import pytest
from aiohttp import web
from http_server import Server

import torch_drt as drt
from torch_drt.sources import HttpDataset, ObjectStoreDataset

N = 16
TIMEOUT_S = 20.0  # a parent's request on a socket a child unregistered waits this long, then fails (no retries)


class Roles:
    """A server whose item ``/{role}/{n}`` is ``f"{role}{n}"`` 100 times; ``roles[peer port]``: the roles of the
    requests each connection carried."""

    def __init__(self) -> None:
        self.roles: collections.defaultdict[int, set[str]] = collections.defaultdict(set)

    def app(self) -> web.Application:
        async def item(request: web.Request) -> web.Response:
            self.roles[request.transport.get_extra_info("peername")[1]].add(request.match_info["role"])
            return web.Response(body=body(request.match_info["role"], int(request.match_info["n"])))

        app = web.Application()
        app.add_routes([web.get("/{role}/{n}", item)])
        return app

    def shared(self) -> dict[int, set[str]]:
        """The connections that carried requests of both the parent and a child."""
        return {port: roles for port, roles in self.roles.items() if len(roles) > 1}


def body(role: str, n: int) -> bytes:
    return f"{role}{n}".encode() * 100


@pytest.fixture
def roles():
    r = Roles()
    server = Server(app=r.app)
    yield r, server
    server.stop()


_PARENT_PID = os.getpid()


def _collected(items: list) -> list:
    """A batch as a list; in a worker process, after a garbage collection (its inherited garbage goes)."""
    if os.getpid() != _PARENT_PID:
        gc.collect()
    return list(items)


def _loader(dataset, indices: range, **workers) -> drt.StatefulDataLoader:
    return drt.StatefulDataLoader(dataset, batch_size=4, sampler=list(indices), collate_fn=_collected, timeout=120,
                                  **workers)


def _epoch(loader: drt.StatefulDataLoader) -> list[bytes]:
    return [item for batch in loader for item in batch]


PARENT = [body("p", i) for i in range(N)]


def _parent_and_forked_workers(dataset) -> None:
    """The parent reads ``/p/*`` on its own pooled connections (one loader, one event loop across its epochs),
    forked loading workers read ``/c/*`` (twice), and the parent reads again after each: the right bytes,
    no time-out."""
    parent = _loader(dataset, range(N), num_workers=0)
    assert _epoch(parent) == PARENT
    for _ in range(2):
        children = _loader(dataset, range(N, 2 * N), num_workers=2, multiprocessing_context="fork")
        assert _epoch(children) == [body("c", i) for i in range(N)]
        assert _epoch(parent) == PARENT


def _urls(server: Server) -> list[str]:
    return [server.url(f"/p/{i}") for i in range(N)] + [server.url(f"/c/{i}") for i in range(N)]


def test_forked_workers_of_an_object_store_dataset_leave_the_parents_client_working(roles):
    """Each process makes its own fsspec client: a worker drops its copy of the parent's. Outside fsspec's
    instance cache (``skip_instance_cache``) nothing else held it, and the parent's next read timed out."""
    r, server = roles
    keys = [f"p/{i}" for i in range(N)] + [f"c/{i}" for i in range(N)]
    dataset = ObjectStoreDataset(server.url(""), keys, options={"skip_instance_cache": True}, timeout=TIMEOUT_S,
                                 retries=0)
    _parent_and_forked_workers(dataset)
    assert not r.shared(), f"connections of both the parent and a child: {r.shared()}"


def test_forked_workers_of_an_http_dataset_read_on_their_own_sessions(roles):
    r, server = roles
    dataset = HttpDataset(_urls(server), timeout=TIMEOUT_S, retries=0)
    _parent_and_forked_workers(dataset)
    assert not r.shared(), f"connections of both the parent and a child: {r.shared()}"
    assert len(r.roles) > 1


def test_a_forked_child_that_lets_go_of_an_http_dataset_leaves_the_parents_session_working(roles):
    """A forked child that drops its copy of the dataset (and collects its garbage) finalized the parent's
    session: its connector closed the parent's pooled connections, and the parent's next read timed out."""
    r, server = roles
    dataset = HttpDataset(_urls(server), timeout=TIMEOUT_S, retries=0)
    parent = _loader(dataset, range(N), num_workers=0)
    assert _epoch(parent) == PARENT
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            del dataset, parent
            gc.collect()
            os.write(ready_w, b"1")
            status = 0
        finally:
            os._exit(status)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    assert os.waitpid(pid, 0)[1] == 0
    assert _epoch(parent) == PARENT
    assert len(r.roles) >= 1


def test_the_registry_keeps_none_of_the_clients_alive_in_the_process_that_made_them():
    """The clients a process made are recorded weakly: one it lets go of is collected (only a forked child keeps
    its copies of them, for its whole life)."""
    from torch_drt.sources.object_store import _open_store

    fs, _ = _open_store("memory://bucket", {"skip_instance_cache": True})  # (outside fsspec's instance cache)
    gone = weakref.ref(fs)
    del fs
    gc.collect()
    assert gone() is None
