"""What a failed request to an object store means: its S3 error code, throttling, missing credentials, HTTP
statuses, described for the retry policy (``torch_drt.sources.retry``) so that a caller's error says what happened
(never the client's own text, which may hold a URL with a query or a credential)."""

from __future__ import annotations

import sys

from torch_drt.sources.retry import AttemptError, transient_status

_THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"})


def s3_error_code(error: BaseException) -> str | None:
    """The S3 error code (``"SlowDown"``, ``"InvalidRange"``, ...) of an s3fs/botocore error, else None."""
    for e in (error, error.__cause__):
        response = getattr(e, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            code = response["Error"].get("Code")
            return str(code) if code is not None else None
    return None


def _s3_failure(error: BaseException) -> AttemptError | None:
    """Throttling (transient, said as such) and missing credentials (permanent, with how to supply them)."""
    code = s3_error_code(error)
    if code in _THROTTLED:
        return AttemptError(f"the store throttled the request ({code}: too many requests)", transient=True)
    exceptions = sys.modules.get("botocore.exceptions")
    if exceptions is not None and isinstance(error, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return AttemptError(
            "no credentials were found for this store: pass them in storage_options (key=..., secret=...), or set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); storage_options={'anon': True} reads a "
            "public bucket",
            transient=False,
            kind=PermissionError,
        )
    return None


def described_failure(error: BaseException) -> AttemptError | None:
    """A store client's error described as a transient or permanent attempt: S3 throttling and missing credentials
    (``_s3_failure``), an HTTP status (fsspec's http client raises aiohttp's); None for any other error."""
    if (described := _s3_failure(error)) is not None:
        return described
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None or not isinstance(error, aiohttp.ClientResponseError):
        return None
    status = int(error.status)
    kind: type[Exception] = {404: FileNotFoundError, 401: PermissionError, 403: PermissionError}.get(status, OSError)
    return AttemptError(f"HTTP {status}", transient=transient_status(status), kind=kind)
