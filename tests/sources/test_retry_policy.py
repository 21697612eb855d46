"""sources.retry: the one owner of what is transient, the waits, the attempt loop and the caller's error."""

from __future__ import annotations

import asyncio
import errno
import logging

import aiohttp
import pytest

from torch_drt.sources.retry import AttemptError, RetryPolicy, is_transient, parse_retry_after


@pytest.mark.parametrize(
    "error, unknown, transient",
    [
        (TimeoutError(), False, True),
        (InterruptedError(), False, True),
        (BlockingIOError(), False, True),
        (ConnectionResetError(), False, True),
        (aiohttp.ServerDisconnectedError(), False, True),
        (aiohttp.ClientPayloadError("cut"), False, True),
        (AttemptError("HTTP 503", transient=True), False, True),
        (AttemptError("HTTP 404", transient=False), True, False),
        (FileNotFoundError(), True, False),
        (PermissionError(), True, False),
        (IsADirectoryError(), True, False),
        (ValueError(), True, False),
        (TypeError(), True, False),
        (aiohttp.TooManyRedirects(None, ()), True, False),
        (aiohttp.InvalidURL("x"), True, False),
        (OSError(errno.EIO, "I/O error"), False, False),  # a local file: waiting does not cure it
        (OSError(errno.EIO, "I/O error"), True, True),  # an object store's client error (throttling, 5xx)
        (RuntimeError("botocore"), True, True),
        (RuntimeError("other"), False, False),
    ],
)
def test_what_is_transient(error, unknown, transient):
    assert is_transient(error, unknown=unknown) is transient


@pytest.mark.parametrize(
    "value, seconds",
    [(None, None), ("", None), ("3", 3.0), (" 7 ", 7.0), ("\u00b2", None), ("\u0663", None), ("-1", None),
     ("1.5", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("Wed, 99 Foo 99999 99:99:99 GMT", None),
     ("9" * 400, float("9" * 400))],
)
def test_retry_after_never_raises(value, seconds):
    assert parse_retry_after(value) == seconds


def test_run_retries_transient_failures_then_gives_the_documented_error(caplog):
    calls = []

    def attempt():
        calls.append(1)
        raise ConnectionResetError(errno.ECONNRESET, "reset by http://u:SECRET@host/x?token=SECRET")

    with caplog.at_level(logging.INFO, logger="torch_drt"), pytest.raises(ConnectionResetError) as info:
        RetryPolicy(2, 0.001, 0.001).run(attempt, "reading s3://bucket/key")
    assert len(calls) == 3
    assert str(info.value) == (
        f"[Errno {errno.ECONNRESET}] reading s3://bucket/key failed after 3 attempt(s): "
        "ConnectionResetError (Connection reset by peer)"
    )
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "reading s3://bucket/key: attempt 1 of 3 failed (ConnectionResetError (Connection reset by peer))",
        "reading s3://bucket/key: attempt 2 of 3 failed (ConnectionResetError (Connection reset by peer))",
    ]
    assert all(r.name == "torch_drt.sources" and "SECRET" not in r.getMessage() for r in caplog.records)


def test_permanent_failures_are_not_retried_and_foreign_types_become_os_errors():
    calls = []

    def attempt():
        calls.append(1)
        raise aiohttp.TooManyRedirects(None, (), message="http://u:SECRET@h/?token=SECRET")

    with pytest.raises(OSError) as info:
        asyncio.run(RetryPolicy(3, 0.001).arun(_async(attempt), "GET http://h/"))
    assert len(calls) == 1 and type(info.value) is OSError
    assert str(info.value) == "GET http://h/ failed after 1 attempt(s): TooManyRedirects"


def test_an_attempt_error_gives_its_kind_and_reason():
    def attempt():
        raise AttemptError("the body is 9 bytes, over max_bytes=8", transient=False, kind=ValueError)

    with pytest.raises(ValueError, match=r"^GET http://h/ failed after 1 attempt\(s\): the body is 9 bytes"):
        RetryPolicy().run(attempt, "GET http://h/")


def test_success_after_failures():
    outcomes = iter([TimeoutError(), AttemptError("HTTP 503", transient=True), b"body"])

    def attempt():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert RetryPolicy(2, 0.001).run(attempt, "x") == b"body"


def test_arun_goes_on_after_the_callers_own_first_attempt():
    calls = []

    def attempt():
        calls.append(1)
        raise ConnectionResetError()

    policy = RetryPolicy(2, 0.001)
    with pytest.raises(OSError, match=r"^x failed after 3 attempt\(s\): ConnectionResetError$"):
        asyncio.run(policy.arun(_async(attempt), "x", ConnectionResetError()))
    assert len(calls) == 2  # the first attempt was the caller's
    with pytest.raises(ValueError, match=r"^x failed after 1 attempt\(s\): too big$"):
        asyncio.run(policy.arun(_async(attempt), "x", AttemptError("too big", transient=False, kind=ValueError)))
    assert len(calls) == 2  # a permanent first failure: no attempt more
    assert asyncio.run(policy.arun(_async(lambda: b"body"), "x", TimeoutError())) == b"body"


@pytest.mark.parametrize("run", ["run", "arun"])
def test_what_may_be_made_only_when_an_attempt_fails(run, caplog):
    made = []

    def what():
        made.append(1)
        return "GET http://h/x"

    policy = RetryPolicy(1, 0.001)
    call = (lambda a: policy.run(a, what)) if run == "run" else (lambda a: asyncio.run(policy.arun(_async(a), what)))
    assert call(lambda: b"body") == b"body" and made == []  # a successful item never builds its message
    outcomes = iter([ConnectionResetError(), ConnectionResetError()])

    def attempt():
        raise next(outcomes)

    with caplog.at_level(logging.INFO, logger="torch_drt"), pytest.raises(OSError) as info:
        call(attempt)
    assert str(info.value) == "GET http://h/x failed after 2 attempt(s): ConnectionResetError"
    assert caplog.records[0].getMessage().startswith("GET http://h/x: attempt 1 of 2 failed") and made == [1]


@pytest.mark.parametrize("kwargs", [{"retries": -1}, {"retries": 1.5}, {"retries": True}, {"backoff": -1},
                                    {"max_backoff": float("nan")}])
def test_policy_validation(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def _async(fn):
    async def attempt():
        return fn()

    return attempt
