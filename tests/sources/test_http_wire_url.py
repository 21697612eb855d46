"""The request target on the wire is the URL as built, byte for byte (signed URLs keep their signature)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from http_server import Server

from torch_drt import HttpDataset, StatefulDataLoader
from torch_drt.sources._urls import wire_url


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def sent(server: Server, url: str) -> str:
    """The raw path and query that reached the server for a GET of ``url``."""
    before = len(server.raw_paths)
    body = HttpDataset([url], retries=0)[0]
    assert len(server.raw_paths) == before + 1
    assert body.decode() == server.raw_paths[-1]
    return server.raw_paths[-1]


@pytest.mark.parametrize(
    "target",
    [
        "/raw/a%26b%3Dc/d%2Fe?sig=x%2By%3D&e=%26",  # escaped delimiters in the path and the query stay escaped
        "/raw/key%3D%2F%3F%23?X-Amz-Signature=ab%2Fcd%3D&X-Amz-Credential=K%2F2026%2Fs3",
        "/raw/x/../y/./z?a=1&a=2&b=&c",  # dot segments, repeated and empty parameters: untouched
        "/raw/%7Euser/%41%42?q=%7e",  # escapes of unreserved characters and lower-case hex: untouched
        "/raw/p;param=1,2?q=a+b&r=(x)*!$'",
    ],
)
def test_path_and_query_go_on_the_wire_as_built(server, target):
    assert sent(server, server.url(target)) == target


def test_fragment_is_not_sent(server):
    assert sent(server, server.url("/raw/f%26?q=%3D#frag")) == "/raw/f%26?q=%3D"


def test_characters_a_url_cannot_hold_are_encoded_once(server):
    assert sent(server, server.url("/raw/a b/ä?q=ä ö&p=%zz")) == "/raw/a%20b/%C3%A4?q=%C3%A4%20%C3%B6&p=%25zz"


def test_template_values_are_sent_as_encoded(server):
    ds = HttpDataset.from_template(server.url("/raw/{name}?sig={sig}"), {"name": ["a&b=c/d"], "sig": ["x+y=/"]})
    assert ds[0].decode() == "/raw/a%26b%3Dc%2Fd?sig=x%2By%3D%2F"


def test_redirect_targets_go_on_the_wire_as_written(server):
    target = "/raw/r%26s%3D?X-Signature=ab%2Bcd%3D"
    body = HttpDataset([server.url(f"/redirect?to={quote(target, safe='')}")])[0]
    assert body.decode() == target and server.raw_paths[-1] == target


def test_through_the_loader(server):
    targets = [f"/raw/{i}%26{i}%3D?s=%3D{i}" for i in range(6)]
    loader = StatefulDataLoader(HttpDataset([server.url(t) for t in targets]), batch_size=3, num_workers=2,
                                item_concurrency=3, collate_fn=list)
    assert [body.decode() for batch in loader for body in batch] == targets
    loader.close()


@pytest.mark.parametrize(
    ("url", "wire"),
    [  # the common shape (no urlsplit) and each case that must leave it for the general path, same results
        ("http://127.0.0.1:8080/item/1?size=5", "http://127.0.0.1:8080/item/1?size=5"),
        ("https://ex.com/a%26b?sig=x%2By", "https://ex.com/a%26b?sig=x%2By"),
        ("http://h/x?", "http://h/x"),  # an empty query is dropped
        ("http://h/x??a", "http://h/x??a"),
        ("http://h/x?a#", "http://h/x?a"),
        ("http://h/x?a#b/c", "http://h/x?a"),  # no fragment
        ("http://h/x#%41", "http://h/x"),
        ("HTTP://H.COM/x", "http://h.com/x"),
        ("http://h?x", "http://h/?x"),
        ("http://h?/x", "http://h/?/x"),
        ("http://h", "http://h/"),
        ("http://u:p%40ss@h:80/x", "http://u:p%40ss@h/x"),
        ("http://a@b@c/x", "http://a%40b@c/x"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://ü.com/x", "http://xn--tda.com/x"),
        ("http://h/a b?c d", "http://h/a%20b?c%20d"),
        ("http://h/x?q=%", "http://h/x?q=%25"),
    ],
)
def test_wire_url_of_each_shape(url, wire):
    assert str(wire_url(url)) == wire


@pytest.mark.parametrize(
    "url",
    ["http://[::1/x", "http://h:0/x", "http://h:99999/x", "http://h\t/x", "http://h\u2028/x", "ftp://h/x", "http:///x",
     "httpss://h/x", "http://h/\x7f"],
)
def test_wire_url_refuses_what_is_not_an_http_url(url):
    with pytest.raises(ValueError, match="is not an http"):
        wire_url(url)
