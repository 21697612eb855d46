"""make_samples: read rows become CachedSamples (payload, the row's metadata dict, cache id, sample id)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from torch_drt.cache.records import CachedBatch, CachedSample, make_samples


@pytest.mark.parametrize(
    "columns",
    [
        {},
        {"label": [3, None, 5]},
        {"label": [3, 4, 5], "name": ["a", "b", None], "ok": [True, False, True], "w": [0.5, 1.0, 2.0]},
    ],
)
def test_samples_carry_each_rows_metadata_and_identity(columns):
    data = [b"x", b"yy", b""]
    table = pa.table(columns) if columns else pa.table({"c": [0, 0, 0]}).drop_columns(["c"])
    cache_ids, sample_ids = np.array([7, 7, 9], dtype=np.uint64), np.array([0, 5, 2], dtype=np.int64)
    samples = make_samples(data, table, cache_ids, sample_ids)
    expected = [
        CachedSample(data[i], {k: v[i] for k, v in columns.items()}, [7, 7, 9][i], [0, 5, 2][i]) for i in range(3)
    ]
    assert samples == expected
    assert all(type(s) is CachedSample and type(s.cache_id) is int and type(s.sample_id) is int for s in samples)
    assert len({id(s.metadata) for s in samples}) == 3  # one dict per sample: a user may change one
    batch = CachedBatch(data, cache_ids, sample_ids, np.arange(3), table)
    assert batch.samples() == expected
