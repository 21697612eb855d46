"""Bit flips in metadata.arrow (issue 10): never a crash, never silently wrong metadata, always CacheCorruptError.

Each flip is opened in a child interpreter (one child runs many flips; a crash costs one restart), so a
SIGSEGV in a native parser fails the test instead of killing pytest. The default suite runs a seeded sample of
flips; ``-m slow`` sweeps every byte.
"""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

import pytest
from conftest import QUIET, ListSource, run_isolated

import torch_drt as drt

WORKER = """
    import json, shutil, sys
    from pathlib import Path
    import torch_drt as drt
    from conftest import rehash_manifest

    clean, scratch, verify, rehash = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
    expected = json.loads(Path(sys.argv[5]).read_text())
    rt = drt.DatasetRuntime(1)
    for pos in json.loads(Path(sys.argv[6]).read_text()):
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(clean, scratch)
        body = bytearray((scratch / "metadata.arrow").read_bytes())
        body[pos // 8] ^= 1 << (pos % 8)
        (scratch / "metadata.arrow").write_bytes(bytes(body))
        if rehash:
            rehash_manifest(scratch)
        print(json.dumps({"pos": pos, "outcome": "started"}), flush=True)
        try:
            config = drt.ReaderConfig(seed=0, shuffle=False, validate_cache=verify)
            ds = rt.cached_dataset([scratch], reader_config=config)
            got = [[s.data.hex(), s.metadata] for s in ds]
            outcome = "ok" if got == expected else "wrong"
        except drt.CacheCorruptError:
            outcome = "CacheCorruptError"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"[:200]
        print(json.dumps({"pos": pos, "outcome": outcome}), flush=True)
"""


def _fuzz(tmp_path: Path, positions: list[int], *, verify: bool, rehash: bool) -> dict[int, str]:
    """Outcome per flipped bit position; a child that dies is restarted after the flip that killed it."""
    runtime = drt.DatasetRuntime(1)
    (res,) = runtime.write_cache(ListSource("m", 40), tmp_path / "clean", writer_config=QUIET)
    clean = res.path
    ds = runtime.cached_dataset([clean], reader_config=drt.ReaderConfig(seed=0, shuffle=False))
    (tmp_path / "expected.json").write_text(json.dumps([[s.data.hex(), s.metadata] for s in ds]))
    outcomes: dict[int, str] = {}
    todo = list(positions)
    while todo:
        (tmp_path / "todo.json").write_text(json.dumps(todo))
        args = [
            clean,
            tmp_path / "scratch",
            int(verify),
            int(rehash),
            tmp_path / "expected.json",
            tmp_path / "todo.json",
        ]
        code = "import sys; sys.argv[1:] = " + repr([str(a) for a in args]) + "\n" + textwrap.dedent(WORKER)
        proc = run_isolated(code, timeout=600)
        started = None
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            if record["outcome"] == "started":
                started = record["pos"]
            else:
                outcomes[record["pos"]] = record["outcome"]
                started = None
        if started is None and proc.returncode != 0:
            pytest.fail(f"fuzz worker failed outside a flip: {proc.stderr[-2000:]}")
        if started is not None:  # the child died on this flip
            outcomes[started] = f"crash (exit {proc.returncode})"
        todo = [p for p in todo if p not in outcomes]
    return outcomes


def _positions(tmp_path: Path, count: int | None) -> list[int]:
    runtime = drt.DatasetRuntime(1)
    (res,) = runtime.write_cache(ListSource("m", 40), tmp_path / "probe", writer_config=QUIET)
    bits = (res.path / "metadata.arrow").stat().st_size * 8
    if count is None:
        return list(range(0, bits, 8 + 1))  # every byte, a different bit of each
    return sorted(random.Random(10).sample(range(bits), count))


@pytest.mark.parametrize("verify", [False, True])
def test_metadata_bit_flips_are_cache_corrupt_errors(tmp_path, verify):
    outcomes = _fuzz(tmp_path, _positions(tmp_path, 24), verify=verify, rehash=False)
    assert {o for o in outcomes.values()} == {"CacheCorruptError"}, outcomes


def test_a_forged_manifest_over_a_flipped_metadata_file_never_crashes(tmp_path):
    """The checksum agrees with the damaged file: Arrow's full validation must still refuse or read it safely."""
    outcomes = _fuzz(tmp_path, _positions(tmp_path, 24), verify=False, rehash=True)
    assert {o for o in outcomes.values()} <= {"CacheCorruptError", "ok", "wrong"}, outcomes


@pytest.mark.slow
@pytest.mark.parametrize(("verify", "rehash"), [(False, False), (True, False), (False, True)])
def test_metadata_flip_sweep(tmp_path, verify, rehash):
    outcomes = _fuzz(tmp_path, _positions(tmp_path, None), verify=verify, rehash=rehash)
    allowed = {"CacheCorruptError", "ok", "wrong"} if rehash else {"CacheCorruptError"}
    assert {o for o in outcomes.values()} <= allowed, {p: o for p, o in outcomes.items() if o not in allowed}
