"""Runs in the peers venv (.bench/peers): Grain's first-fit and best-fit packing; prints one JSON object.

    python _side_grain.py LENGTHS.npy REPEATS L [L ...]

The document lengths come from the main benchmark (the same documents for both libraries). Documents longer than
L are cut into pieces of L and a remainder beforehand (Grain refuses longer elements; torch_drt's ``split``
policy makes the same pieces). Each configuration packs every piece with ``num_packing_bins=128`` and no bin
shuffling; the figures are the padding fraction and real tokens per second (median of REPEATS passes).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

BINS = 128


def pieces(lengths: np.ndarray, length: int) -> list[dict]:
    tokens = (np.arange(int(lengths.sum()), dtype=np.int64) % 50_000).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    out = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        while b - a > length:
            out.append({"tokens": tokens[a : a + length]})
            a += length
        if b > a:
            out.append({"tokens": tokens[a:b]})
    return out


def measure(cls, elements: list[dict], length: int, repeats: int) -> dict:
    import grain

    times, sequences, real = [], 0, 0
    for _ in range(repeats):
        ds = cls(
            grain.MapDataset.source(elements).to_iter_dataset(),
            length_struct={"tokens": length},
            num_packing_bins=BINS,
            shuffle_bins=False,
        )
        t0 = time.perf_counter()
        sequences = real = 0
        for packed in ds:
            sequences += 1
            real += int(np.count_nonzero(packed["tokens_segment_ids"]))
        times.append(time.perf_counter() - t0)
    return {"tokens_per_s": real / statistics.median(times), "padding": 1 - real / (sequences * length),
            "sequences": sequences}


def main() -> None:
    from grain import experimental

    lengths = np.load(sys.argv[1])
    repeats = int(sys.argv[2])
    out = {"bins": BINS}
    for length in (int(x) for x in sys.argv[3:]):
        elements = pieces(lengths, length)
        out[str(length)] = {
            "first_fit": measure(experimental.FirstFitPackIterDataset, elements, length, repeats),
            "best_fit": measure(experimental.BestFitPackIterDataset, elements, length, repeats),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
