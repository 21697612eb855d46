"""HttpDataset against a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import logging
import pickle

import pytest
from http_server import Server

from torch_drt import HttpDataset, StatefulDataLoader


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def fast(**kw):
    return dict(backoff=0.01, max_backoff=0.05, **kw)


def test_items_through_the_loader_with_many_in_flight(server):
    ds = HttpDataset([server.url(f"/item/{i}?size=32") for i in range(40)])
    loader = StatefulDataLoader(ds, batch_size=8, num_workers=2, item_concurrency=4, collate_fn=list,
                                return_indices=True, transform=lambda i, body: (i, body[0], len(body)))
    for batch, indices in loader:
        assert [(i, i % 256, 32) for i in indices] == batch
    loader.close()


def test_blocking_getitem_and_len(server):
    ds = HttpDataset([server.url("/item/7")])
    assert len(ds) == 1 and ds[0] == bytes([7]) * 16
    with pytest.raises(IndexError, match="index 1 is out of range for 1 items"):
        ds[1]


def test_503_twice_then_success_is_retried(server):
    ds = HttpDataset([server.url("/flaky/a")], **fast())
    assert ds[0] == b"finally" and server.hits["/flaky/a"] == 3


def test_retries_run_out(server):
    ds = HttpDataset([server.url("/flaky/b")], **fast(retries=1))
    with pytest.raises(OSError, match=r"GET http://127\.0\.0\.1:\d+/flaky/b failed after 2 attempt\(s\): HTTP 503"):
        ds[0]
    assert server.hits["/flaky/b"] == 2


@pytest.mark.parametrize("status", [404, 401, 403, 400])
def test_other_statuses_fail_at_once(server, status):
    ds = HttpDataset([server.url(f"/status/{status}?token=SECRET")], **fast())
    with pytest.raises(OSError, match=f"HTTP {status}") as info:
        ds[0]
    assert "failed after 1 attempt(s)" in str(info.value) and "SECRET" not in str(info.value)
    assert server.hits[f"/status/{status}"] == 1


def test_authorization_header(server):
    with pytest.raises(OSError, match="HTTP 401"):
        HttpDataset([server.url("/auth")])[0]
    assert HttpDataset([server.url("/auth")], headers={"Authorization": "Bearer token"})[0] == b"secret"


def test_timeout_on_the_last_attempt(server):
    ds = HttpDataset([server.url("/slow?s=2")], timeout=0.2, **fast(retries=1))
    with pytest.raises(TimeoutError, match=r"failed after 2 attempt\(s\): timed out after 0\.2s"):
        ds[0]
    assert server.hits["/slow"] == 2


@pytest.mark.parametrize("chunked", [False, True])
def test_timeout_while_the_body_arrives(server, chunked):
    ds = HttpDataset([server.url(f"/stall?s=2{'&chunked=1' if chunked else ''}")], timeout=0.3, retries=0)
    with pytest.raises(TimeoutError, match=r"failed after 1 attempt\(s\): timed out after 0\.3s"):
        ds[0]


@pytest.mark.parametrize("chunked", [False, True])
def test_oversized_body(server, chunked):
    ds = HttpDataset([server.url(f"/big?size=5000{'&chunked=1' if chunked else ''}")], max_bytes=1000)
    with pytest.raises(ValueError, match="over max_bytes=1000") as info:
        ds[0]
    assert ("Content-Length" in str(info.value)) is not chunked


def test_connection_closed_mid_body_is_retried_then_fails(server):
    ds = HttpDataset([server.url("/cut")], **fast(retries=2))
    with pytest.raises(OSError, match=r"failed after 3 attempt\(s\): ClientPayloadError"):
        ds[0]
    assert server.hits["/cut"] == 3


def test_retry_after_is_honoured_up_to_max_backoff(server, caplog):
    with caplog.at_level(logging.INFO, logger="torch_drt.sources"):
        assert HttpDataset([server.url("/retry-after/a?after=1")], backoff=0.01, max_backoff=5)[0] == b"patient"
        capped = HttpDataset([server.url("/retry-after/b?after=100")], backoff=0.01, max_backoff=0.2)
        assert capped[0] == b"patient"
    waits = [r.getMessage().rsplit("retry in ", 1)[1] for r in caplog.records]
    assert waits == ["1s", "0.2s"]  # the server's wait, then the server's wait capped at max_backoff


def test_connection_refused_hides_credentials():
    ds = HttpDataset(["http://user:pw@127.0.0.1:9/x?key=SECRET"], **fast(retries=1))
    with pytest.raises(OSError) as info:
        ds[0]
    message = str(info.value)
    assert "after 2 attempt(s)" in message and "SECRET" not in message and "pw" not in message


def test_errors_in_the_loader_keep_type_and_the_next_batch_follows(server):
    urls = [server.url(f"/item/{i}") for i in range(6)]
    urls[2] = server.url("/status/404")
    loader = StatefulDataLoader(HttpDataset(urls, **fast()), batch_size=2, num_workers=1, item_concurrency=2,
                                collate_fn=list)
    it = iter(loader)
    assert len(next(it)) == 2
    with pytest.raises(OSError, match="HTTP 404"):
        next(it)
    assert next(it) == [bytes([4]) * 16, bytes([5]) * 16]
    loader.close()


def test_session_is_closed_with_the_loader_and_dataset_pickles(server):
    ds = HttpDataset([server.url(f"/item/{i}") for i in range(4)])
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=1, collate_fn=list, worker_method="thread")
    list(loader)
    sessions = [session for session, _ in ds._sessions.values()]
    assert len(sessions) == 1
    loader.close()
    assert sessions[0].closed and not ds._sessions
    clone = pickle.loads(pickle.dumps(ds))
    assert clone[3] == bytes([3]) * 16


def test_process_workers(server):
    ds = HttpDataset([server.url(f"/item/{i}") for i in range(6)])
    loader = StatefulDataLoader(ds, batch_size=3, num_workers=2, worker_method="process", item_concurrency=3,
                                collate_fn=list, multiprocessing_context="spawn")
    assert [b[0][0] for b in loader] == [0, 3]
    loader.close()


def test_from_template_builds_urls_item_by_item(server):
    ds = HttpDataset.from_template(server.url("/item/{n}?size={size}&tag={tag}"),
                                   {"n": [1, 2], "size": [4, 5], "tag": ["a b", "c/d"]})
    assert ds.locations[1].endswith("/item/2?size=5&tag=c%2Fd")
    assert ds[0] == bytes([1]) * 4
