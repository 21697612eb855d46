"""A remote cache set's credentials never follow its document (issue 22): a part at another origin is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from conftest import ListSource
from remote_fixtures import remote_config
from remote_servers import ThreadedApp

import torch_drt as drt
from torch_drt.cache import CacheCorruptError, publish_cache_set

QUIET = drt.WriterConfig(show_progress=False)
SECRET = {"headers": {"Authorization": "Bearer s3cr3t-token"}}


class RecordingSite:
    """Static files under ``root`` on 127.0.0.1, recording the Authorization header of every request."""

    def __init__(self, root: Path) -> None:
        self.authorizations: list[str | None] = []

        @web.middleware
        async def record(request, handler):
            self.authorizations.append(request.headers.get("Authorization"))
            return await handler(request)

        app = web.Application(middlewares=[record])
        app.router.add_static("/", str(root), show_index=False)
        self.server = ThreadedApp(app)
        self.url = self.server.url


@pytest.fixture
def two_sites(tmp_path):
    """Site A holds a set whose manifest points at a part on site B (another host:port)."""
    runtime = drt.DatasetRuntime(1)
    runtime.write_cache(ListSource("part", 12), tmp_path / "b", writer_config=QUIET)
    (tmp_path / "a").mkdir()
    a, b = RecordingSite(tmp_path / "a"), RecordingSite(tmp_path / "b")
    foreign = publish_cache_set(tmp_path / "a" / "set", [f"{b.url}/part"])
    assert json.loads((tmp_path / "a" / "set" / "cacheset.json").read_text())["parts"][0]["path"] == f"{b.url}/part"
    b.authorizations.clear()
    yield a, b, foreign
    a.server.stop()
    b.server.stop()


def test_a_part_at_another_host_is_refused_and_gets_no_credentials(tmp_path, two_sites):
    a, b, _ = two_sites
    with pytest.raises(CacheCorruptError, match=r"lies outside the set's origin.*allow_foreign_parts"):
        drt.DatasetRuntime(1).cached_dataset(f"{a.url}/set", reader_config=drt.ReaderConfig(seed=0),
                                             storage_options=SECRET, remote_config=remote_config(tmp_path))
    assert "Bearer s3cr3t-token" in a.authorizations  # the set's own host got its credentials
    assert b.authorizations == []  # the other host got no request at all


def test_foreign_parts_are_read_on_explicit_request(tmp_path, two_sites):
    a, b, _ = two_sites
    config = remote_config(tmp_path, allow_foreign_parts=True)
    ds = drt.DatasetRuntime(1).cached_dataset(f"{a.url}/set", reader_config=drt.ReaderConfig(seed=0, shuffle=False),
                                              remote_config=config)
    assert len(list(ds)) == 12
    assert b.authorizations and set(b.authorizations) == {None}
