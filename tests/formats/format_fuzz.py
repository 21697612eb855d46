"""Damage one file of a foreign dataset many ways and read the whole dataset in a forked child after each:
the outcomes (``FormatError``, another ``CacheCorruptError`` by its class name, ``ok``, ``wrong``, another
exception, ``crash (exit N)``) per damage.

The child runs under an address-space limit, so an unbounded allocation on hostile bytes fails there (a
``MemoryError`` outcome) instead of taking the machine; a crash costs one restart of the child.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from forked_runner import run_forked

_WORKER = """HERE = __HERE__
import json, shutil, sys
from pathlib import Path
from torch_drt.cache.errors import CacheCorruptError, FormatError
import torch_drt.formats as formats

clean, scratch, rel, opener, expected, todo = sys.argv[1:7]
expected = json.loads(Path(expected).read_text())
sys.path.insert(0, HERE)
# PRELUDE


def comparable(sample):
    return {k: (v.hex() if isinstance(v, bytes) else repr(v)) for k, v in sample.items() if k != "__url__"}


for damage in json.loads(Path(todo).read_text()):
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(clean, scratch)
    target = Path(scratch) / rel
    body = bytearray(target.read_bytes())
    kind, at = damage
    if kind == "flip":
        body[at // 8] ^= 1 << (at % 8)
    else:
        del body[at:]
    target.write_bytes(bytes(body))
    print(json.dumps({"damage": damage, "outcome": "started"}), flush=True)
    try:
        ds = eval(opener, {**globals(), "root": scratch})
        got = [comparable(ds[i]) for i in range(len(ds))]
        outcome = "ok" if got == expected else "wrong"
    except FormatError:
        outcome = "FormatError"
    except CacheCorruptError as e:  # a file the damaged index names is missing, say
        outcome = type(e).__name__
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps({"damage": damage, "outcome": outcome}), flush=True)
"""


def comparable(sample: dict) -> dict:
    """A sample as the worker compares it (bytes as hex, everything else by repr; not where it was read from)."""
    return {k: (v.hex() if isinstance(v, bytes) else repr(v)) for k, v in sample.items() if k != "__url__"}


# a prelude for ``outcomes``: ``_canonical(ds)`` reads each sample in ``canon``'s form, one JSON string per sample
CANONICAL = """from canon import canon
class _canonical:
    def __init__(self, ds):
        self.ds = ds
    def __len__(self):
        return len(self.ds)
    def __getitem__(self, i):
        return {"v": json.dumps(canon(self.ds[i]), sort_keys=True)}
"""


def canonical_expected(rows: list) -> list[dict]:
    """Rows in ``canon``'s form (as a fixture's expected.json holds them) as ``_canonical`` reads them."""
    return [comparable({"v": json.dumps(row, sort_keys=True)}) for row in rows]


def canonical_rows(ds) -> list[dict]:
    """What ``_canonical(ds)`` reads from a clean dataset, in this process (checks ``canonical_expected``)."""
    from canon import canon

    return [comparable({"v": json.dumps(canon(ds[i]), sort_keys=True)}) for i in range(len(ds))]


def damages(size: int, flips: int, truncations: int, seed: int = 27) -> list[list]:
    """A seeded sample of bit flips and truncations of a file of ``size`` bytes."""
    rng = random.Random(seed)
    out = [["flip", p] for p in sorted(rng.sample(range(size * 8), min(flips, size * 8)))]
    out += [["truncate", n] for n in sorted(rng.sample(range(size), min(truncations, size)))]
    return out


def outcomes(
    clean: Path, rel: str, opener: str, expected: list[dict], todo: list[list], work: Path, prelude: str = ""
) -> dict:
    """Apply each damage of ``todo`` to ``clean/rel`` in turn and read the dataset ``opener`` (an expression of
    ``formats`` and ``root``, the damaged copy, and of what ``prelude`` defines) whole; the outcome per damage."""
    (work / "expected.json").write_text(json.dumps(expected))
    found: dict[str, str] = {}
    while todo:
        (work / "todo.json").write_text(json.dumps(todo))
        args = [clean, work / "scratch", rel, opener, work / "expected.json", work / "todo.json"]
        code = _WORKER.replace("# PRELUDE\n", prelude).replace("__HERE__", repr(str(Path(__file__).parent)))
        proc = run_forked(f"import sys; sys.argv[1:] = {[str(a) for a in args]!r}\n" + code, timeout=600,
                          memory_bytes=6 << 30)
        started = None
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            key = f"{record['damage'][0]}@{record['damage'][1]}"
            started = key if record["outcome"] == "started" else None
            if record["outcome"] != "started":
                found[key] = record["outcome"]
        if started is None and proc.returncode != 0:
            raise AssertionError(f"fuzz worker failed outside a damage: {proc.stderr[-2000:]}")
        if started is not None:
            found[started] = f"crash (exit {proc.returncode})"
        todo = [d for d in todo if f"{d[0]}@{d[1]}" not in found]
    return found
