"""The node cache's names for its short-lived manifest copies (``NodeCache.small``): a digest of where a manifest is
read from, so that one URL at two endpoints is two objects, and nothing of it can be read back from the name."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

_ENDPOINT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")  # botocore's endpoint settings


def manifest_name(url: str, storage_options: Mapping[str, Any], scheme: str) -> str:
    """The copy's name for the manifest at ``url``: its URL, the storage options (endpoint and credentials
    included) and, for S3, the endpoint set by the environment."""
    env = {k: os.environ.get(k) for k in _ENDPOINT_ENV} if scheme in ("s3", "s3a") else {}
    where = json.dumps([url, storage_options, env], sort_keys=True, default=repr)
    return hashlib.sha256(where.encode()).hexdigest()[:40]
