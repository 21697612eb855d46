"""No credential, token, query or fragment ever leaves a source: not in an error's message, repr, args, chain or
printed traceback, not in a dataset's repr, not in a log record. Real aiohttp server, real S3 protocol (moto)."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import traceback
from pathlib import Path
from urllib.parse import quote

import pytest
from http_server import Server
from s3_server import s3_fixture  # noqa: F401 (the s3 fixture)

from torch_drt import FileDataset, HttpDataset, ObjectStoreDataset, StatefulDataLoader

SECRETS = ("TOKENSECRET", "PASSSECRET", "FRAGSECRET", "BEARERSECRET", "KEYSECRET", "SIGSECRET")
HEADERS = {"Authorization": "Bearer BEARERSECRET"}
FAST = {"backoff": 0.01, "max_backoff": 0.02}


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def assert_clean(error: BaseException, *types: type[BaseException]) -> None:
    """``error`` is a builtin documented type and no secret shows anywhere a person or a log could see it."""
    assert isinstance(error, types or (OSError, TimeoutError, ValueError)), repr(error)
    assert type(error).__module__ == "builtins", f"{type(error)} is not a documented builtin error type"
    shown = [str(error), repr(error), *map(repr, error.args), "".join(traceback.format_exception(error))]
    shown += [f"{e!s} {e!r}" for e in chain(error)]
    shown.append(repr(pickle.loads(pickle.dumps(error))))
    for text in shown:
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked: {text[:500]}"


def failure(ds, index: int = 0) -> BaseException:
    with pytest.raises(Exception) as info:
        ds[index]
    return info.value


def test_redirect_loop_with_a_token_and_a_bearer_header(server):
    url = server.url("/redirect-loop/a?token=TOKENSECRET#FRAGSECRET")
    error = failure(HttpDataset([url], headers=HEADERS, **FAST))
    assert_clean(error, OSError)
    assert "/redirect-loop/a" in str(error) and "redirect" in str(error).lower()


@pytest.mark.parametrize(
    "url",
    [
        "ftp://user:PASSSECRET@example.com/x?token=TOKENSECRET#FRAGSECRET",
        "http://user:PASSSECRET@/x?token=TOKENSECRET",
        "http://user:PASSSECRET@[bad/x?token=TOKENSECRET",
        "user:PASSSECRET@example.com/x?token=TOKENSECRET",
        "http://example.com:99999999/x?token=TOKENSECRET",
        "http://exa mple.com/x?token=TOKENSECRET",
    ],
)
def test_invalid_urls_are_value_errors_without_secrets(url):
    error = failure(HttpDataset([url], headers=HEADERS, **FAST))
    assert_clean(error, ValueError)
    assert "not an http(s) URL" in str(error)


@pytest.mark.parametrize(
    "target",
    [
        "ftp://user:PASSSECRET@example.com/y?token=TOKENSECRET#FRAGSECRET",
        "http://user:PASSSECRET@[bad/y?token=TOKENSECRET",
        "/status/404?token=TOKENSECRET#FRAGSECRET",
        "http://user:PASSSECRET@127.0.0.1:9/y?token=TOKENSECRET",
    ],
)
def test_redirect_targets_never_show(server, target):
    url = server.url(f"/redirect?to={quote(target, safe='')}")
    error = failure(HttpDataset([url], headers=HEADERS, retries=1, **FAST))
    assert_clean(error, OSError)
    assert "/redirect" in str(error)


@pytest.mark.parametrize(
    "path, options, kind",
    [
        ("/status/404?token=TOKENSECRET#FRAGSECRET", {}, OSError),
        ("/status/403?reason=token%20TOKENSECRET%20expired", {}, OSError),  # a reason phrase echoing the request
        ("/flaky/secret?sig=SIGSECRET", {"retries": 1}, OSError),
        ("/slow?s=2&token=TOKENSECRET", {"timeout": 0.2, "retries": 1}, TimeoutError),
        ("/big?size=5000&token=TOKENSECRET", {"max_bytes": 1000}, ValueError),
        ("/cut?token=TOKENSECRET", {"retries": 1}, OSError),
    ],
)
def test_failed_requests_show_no_secret(server, path, options, kind):
    url = server.url(path).replace("http://", "http://user:PASSSECRET@")
    error = failure(HttpDataset([url], **{**FAST, **options}))
    assert_clean(error, kind)
    assert path.split("?")[0] in str(error)


def test_connection_refused_shows_no_secret():
    error = failure(HttpDataset(["http://user:PASSSECRET@127.0.0.1:9/x?token=TOKENSECRET"], retries=1, **FAST))
    assert_clean(error, OSError)
    assert "after 2 attempt(s)" in str(error)


def test_errors_through_the_loader_show_no_secret(server):
    urls = [server.url(f"/redirect-loop/{i}?token=TOKENSECRET") for i in range(2)]
    loader = StatefulDataLoader(HttpDataset(urls, headers=HEADERS, **FAST), batch_size=2, num_workers=1,
                                collate_fn=list)
    with pytest.raises(OSError) as info:
        next(iter(loader))
    loader.close()
    assert_clean(info.value, OSError)


def test_reprs_show_no_secret(server, tmp_path):
    http = HttpDataset([server.url("/item/1?token=TOKENSECRET#FRAGSECRET").replace("//", "//u:PASSSECRET@")],
                       headers=HEADERS)
    template = HttpDataset.from_template("https://u:PASSSECRET@tiles.example/{n}?sig=SIGSECRET", {"n": [1, 2]},
                                         headers=HEADERS)
    files = FileDataset([tmp_path / "a", tmp_path / "b"])
    store = ObjectStoreDataset("memory://bucket/tiles", ["a", "b", "c"],
                               options={"key": "KEYSECRET", "secret": "KEYSECRET", "skip_instance_cache": True})
    for ds, shows in [(http, "HttpDataset(1 url"), (template, "HttpDataset(2 url"), (files, "FileDataset(2 path"),
                      (store, "ObjectStoreDataset('memory://bucket/tiles', 3 key")]:
        text = f"{ds!r} {ds!s} {ds.locations!r}"
        assert shows in text
        for secret in SECRETS:
            assert secret not in text, text
    assert "Authorization" in repr(http) and "key" in repr(store)  # names of headers and options, never values


def test_template_errors_show_no_secret():
    for template in ("https://u:PASSSECRET@x.example/{n?sig=SIGSECRET", "https://x.example/{a b}?sig=SIGSECRET",
                     "https://x.example/{n}?sig=SIGSECRET&c={c}"):
        with pytest.raises(ValueError) as info:
            HttpDataset.from_template(template, {"n": [1]})
        assert_clean(info.value, ValueError)


def test_retries_are_logged_redacted_under_torch_drt(server, caplog):
    url = server.url("/flaky/logged?token=TOKENSECRET#FRAGSECRET").replace("//", "//u:PASSSECRET@")
    with caplog.at_level(logging.DEBUG):
        assert HttpDataset([url], **FAST)[0] == b"finally"
    retries = [r for r in caplog.records if r.name.startswith("torch_drt") and "retry" in r.getMessage()]
    assert len(retries) == 2 and all(r.levelno == logging.INFO for r in retries)
    assert "/flaky/logged" in retries[0].getMessage() and "HTTP 503" in retries[0].getMessage()
    for record in caplog.records:
        text = f"{record.getMessage()} {record.exc_text or ''} {record.args!r}"
        for secret in SECRETS:
            assert secret not in text, text


def test_retries_are_silent_by_default(server):
    code = (
        "import sys; sys.path.insert(0, 'tests'); from torch_drt import HttpDataset\n"
        f"assert HttpDataset([{server.url('/flaky/silent')!r}], backoff=0.01)[0] == b'finally'\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr
    assert server.hits["/flaky/silent"] == 3 and proc.stderr == ""


# --- object stores: fsspec's own errors name the URL (with its query); s3fs's can carry the request -----------------


def test_object_store_over_http_shows_no_secret(server):
    ds = ObjectStoreDataset(server.url("").replace("//", "//u:PASSSECRET@"), ["status/404?token=TOKENSECRET"],
                            retries=1, **FAST)
    error = failure(ds)
    assert_clean(error, FileNotFoundError)
    assert "/status/404" in str(error)
    error = failure(ObjectStoreDataset(server.url(""), ["status/500?token=TOKENSECRET"], retries=1, **FAST))
    assert_clean(error, OSError)


def test_object_store_bad_url_shows_no_secret():
    url = "nosuchprotocol://u:PASSSECRET@bucket/x?sig=SIGSECRET"
    with pytest.raises((ValueError, ImportError)) as info:
        ObjectStoreDataset(url, ["a"])
    assert_clean(info.value, ValueError, ImportError)


def test_s3_errors_show_no_secret(s3):
    options = {**s3, "key": "testing", "secret": "testing"}
    ds = ObjectStoreDataset("s3://bucket/tiles", ["missing.png"], options=options, **FAST)
    assert_clean(failure(ds), FileNotFoundError)
    unreachable = {"client_kwargs": {"endpoint_url": "http://u:PASSSECRET@127.0.0.1:9"}, "key": "KEYSECRET",
                   "secret": "KEYSECRET", "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 0.5}}
    error = failure(ObjectStoreDataset("s3://bucket/tiles", ["0.png"], options=unreachable, retries=1, **FAST))
    assert_clean(error, OSError)
    assert "s3://bucket/tiles/0.png" in str(error)

