"""Runs under the Python 3.13 side venv, torch_drt imported from the source tree (PYTHONPATH): the 100k-ints
workload at 0 workers on torch_drt, dataloader-rs and torch's DataLoader in one interpreter, rounds interleaved;
prints one JSON object (seconds per epoch, medians).

With ``--bare`` (any interpreter, stdlib only): the bare loop alone, its median; bench_loader.py runs it on both
interpreters in turn, so their ratio is the interpreters' own.

    PYTHONPATH=. python3.13 benchmarks/_side_same_interpreter.py [--bare] [repeats]
"""

from __future__ import annotations

import json
import platform
import sys

from _common import interleaved_times, median_time  # stdlib-only helpers, importable under Python 3.13 too
from _ints_workload import bare_loop, drain, drt_loader, rs_loader, torch_loader


def main() -> None:
    args = sys.argv[1:]
    bare = "--bare" in args
    numbers = [a for a in args if a != "--bare"]
    repeats = int(numbers[0]) if numbers else 3
    if bare:
        out: dict[str, object] = {"bare": median_time(bare_loop, repeats)}
    else:
        loaders = {"drt_0": drt_loader(), "rs_0": rs_loader(), "torch_0": torch_loader()}
        out = interleaved_times({name: drain(loader) for name, loader in loaders.items()}, repeats)
    print(json.dumps({**out, "python": platform.python_version()}))


if __name__ == "__main__":
    main()
