"""The cache benchmarks' workload (issue 2): 20,000 records of 4 KiB of random bytes with an int label, the same
records in every run, and the arguments that size it."""

from __future__ import annotations

import argparse

import numpy as np

PAYLOAD = 4096  # bytes of each record's payload
SAMPLES = 20_000


def payloads(samples: int) -> list[bytes]:
    """``samples`` random payloads of ``PAYLOAD`` bytes (seed 0: every run and library writes the same)."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, PAYLOAD, dtype=np.uint8).tobytes() for _ in range(samples)]


def workload_parser(doc: str | None, rounds: str, default_rounds: int) -> argparse.ArgumentParser:
    """A parser of ``--samples`` (records written) and ``rounds`` (``"--repeats"`` or ``"--rounds"``: how often the
    measurement runs, ``default_rounds`` times unless told)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument(rounds, type=int, default=default_rounds)
    return parser
