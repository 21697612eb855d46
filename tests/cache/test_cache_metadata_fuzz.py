"""Bit flips in metadata.arrow (issue 10): never a crash, never silently wrong metadata, always CacheCorruptError.

Each flip is opened in a child interpreter (one child runs many flips; a crash costs one restart), so a
SIGSEGV in a native parser fails the test instead of killing pytest. The default suite runs a seeded sample of
flips; ``-m slow`` sweeps every byte.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import QUIET, ListSource, flip_outcomes

import torch_drt as drt


def _clean(tmp_path: Path) -> Path:
    (res,) = drt.DatasetRuntime(1).write_cache(ListSource("m", 40), tmp_path / "clean", writer_config=QUIET)
    return res.path


def _positions(clean: Path, count: int | None) -> list[int]:
    bits = (clean / "metadata.arrow").stat().st_size * 8
    if count is None:
        return list(range(0, bits, 8 + 1))  # every byte, a different bit of each
    return sorted(random.Random(10).sample(range(bits), count))


@pytest.mark.parametrize("verify", [False, True])
def test_metadata_bit_flips_are_cache_corrupt_errors(tmp_path, verify):
    clean = _clean(tmp_path)
    outcomes = flip_outcomes(clean, "metadata.arrow", _positions(clean, 24), tmp_path, verify=verify)
    assert set(outcomes.values()) == {"CacheCorruptError"}, outcomes


def test_a_forged_manifest_over_a_flipped_metadata_file_never_crashes(tmp_path):
    """The checksum agrees with the damaged file: Arrow's full validation must still refuse or read it safely."""
    clean = _clean(tmp_path)
    outcomes = flip_outcomes(clean, "metadata.arrow", _positions(clean, 24), tmp_path, rehash=True)
    assert set(outcomes.values()) <= {"CacheCorruptError", "ok", "wrong"}, outcomes


@pytest.mark.slow
@pytest.mark.parametrize(("verify", "rehash"), [(False, False), (True, False), (False, True)])
def test_metadata_flip_sweep(tmp_path, verify, rehash):
    clean = _clean(tmp_path)
    outcomes = flip_outcomes(clean, "metadata.arrow", _positions(clean, None), tmp_path, verify=verify, rehash=rehash)
    allowed = {"CacheCorruptError", "ok", "wrong"} if rehash else {"CacheCorruptError"}
    assert set(outcomes.values()) <= allowed, {p: o for p, o in outcomes.items() if o not in allowed}
