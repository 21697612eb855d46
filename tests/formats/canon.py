"""A JSON form of decoded sample values that keeps their types (shared by the fixture writer, run with the peers'
own readers, and the tests, run without them): bytes, numpy scalars and arrays, PIL images, Decimals."""

from __future__ import annotations

import datetime
import hashlib
import json
from decimal import Decimal
from typing import Any

import numpy as np


def canon(value: Any) -> Any:
    """``value`` as JSON-able data that tells apart every type a reader may return."""
    if isinstance(value, (bytes, memoryview)):  # LitData's own reader returns a view of its map; ours, bytes
        return {"bytes": bytes(value).hex()}
    if isinstance(value, np.ndarray):
        return {"ndarray": value.dtype.str, "shape": list(value.shape), "hex": value.tobytes().hex()}
    if isinstance(value, np.generic):
        return {"scalar": value.dtype.str, "hex": value.tobytes().hex()}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if type(value).__module__.startswith("PIL."):
        return {"image": value.mode, "size": list(value.size),
                "sha256": hashlib.sha256(value.tobytes()).hexdigest()}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, dict):
        return {"dict": {str(k): canon(v) for k, v in value.items()}}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(json.dumps(canon(v), sort_keys=True) for v in value)}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [canon(v) for v in value]}
    if type(value).__module__ == "torch":
        return {"tensor": str(value.dtype), "shape": list(value.shape),
                "hex": value.contiguous().numpy().tobytes().hex()}
    raise TypeError(f"no canonical form for {type(value).__name__}")
