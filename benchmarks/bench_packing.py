"""Language-model packing benchmarks (issue 16), one run, ratios printed.

1. Packing: 8,000 documents with log-normal lengths (log-mean 6, log-sd 1: median 403, mean ~665 tokens), cut
   into pieces of at most L, packed into L = 2,048 and 8,192 with 128 open sequences: padding fraction and real
   tokens/s of torch_drt's first fit and best fit (PackerNode over an in-memory source, sequences assembled)
   against Grain's FirstFitPackIterDataset and BestFitPackIterDataset on the same documents (Grain lives in
   the peers side environment: benchmarks/setup_peers.sh). Targets: best-fit padding at most Grain's, throughput >= 10x.
2. Concatenate-and-chunk from a token stream: 128 MiB int32, sequence 2,048, batch 8, 2 worker threads,
   ``from_storage(..., packing="concat")`` with ``collate_packed`` (tokens, segment ids, positions, loss mask)
   against the ceiling: a memory copy of the same output bytes per batch (int32 tokens, int32 segment ids, int32
   positions, a bool mask: 13 bytes per token; the tokens copied from the mapped shards, the other 9 bytes from
   a prepared buffer, into a fresh buffer). Target >= 50%. Also printed: a tokens-only collate against a
   tokens-only copy (4 bytes per token, the old figure's numpy slice loop), and the four fields with 0 workers.
   All timed interleaved, medians of at least 5, by wall time and by process CPU time.
3. Resume at 90% of a 100M-token epoch (uint16 documents, best fit, sequence 4,096, batch 8, 2 workers): time
   to the first batch after ``load_state_dict`` against a fresh start. Target <= 2x.

    python benchmarks/bench_packing.py [--repeats 3] [--skip-peers] [--resume-tokens 100000000] [--json F]
        [--only packing stream resume]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median_time, run_side
from _envs import env_python

from torch_drt import StatefulDataLoader
from torch_drt.lm import ArraySource, PackedWindows, PackerNode, collate_packed
from torch_drt.storage import DocumentStorage, DocumentStorageWriter, TokenStreamStorage, TokenStreamWriter

LENGTHS = (2048, 8192)
BINS = 128
PEERS = env_python("peers")
PARTS = ("packing", "stream", "resume")


def document_lengths(n: int, seed: int = 0) -> np.ndarray:
    return np.maximum(1, np.random.default_rng(seed).lognormal(6.0, 1.0, n)).astype(np.int64)


def packing(lengths: np.ndarray, repeats: int) -> dict:
    """torch_drt's packers over the documents: padding fraction and real tokens/s per (L, method)."""
    tokens = (np.arange(int(lengths.sum()), dtype=np.int64) % 50_000).astype(np.int32)
    source = ArraySource(tokens, np.concatenate([[0], np.cumsum(lengths)]))
    out: dict = {}
    for length in LENGTHS:
        for method in ("first_fit", "best_fit"):
            node = PackerNode(source, length, method=method, buffer_size=BINS, overlong="split")
            count = []

            def drain(node=node, count=count):
                node.reset()
                count[:] = [sum(1 for _ in node)]

            seconds = median_time(drain, repeats)
            out.setdefault(str(length), {})[method] = {
                "tokens_per_s": tokens.size / seconds,
                "padding": 1 - tokens.size / (count[0] * length),
                "sequences": count[0],
            }
    return out


def grain(lengths: np.ndarray, repeats: int, work: Path, skip: bool) -> dict:
    if skip:
        return {"error": "skipped by --skip-peers"}
    if not PEERS.exists():
        return {"error": f"no peers venv ({PEERS}); create it with benchmarks/setup_peers.sh"}
    np.save(work / "lengths.npy", lengths)
    return run_side(PEERS, "_side_grain.py", str(work / "lengths.npy"), str(repeats), *map(str, LENGTHS))


def token_stream(repeats: int, work: Path) -> dict:
    seq, batch = 2048, 8
    with TokenStreamWriter(work, "stream", "int32", shard_elements=8 << 20) as writer:
        writer.write(np.arange(32 << 20, dtype=np.int32))
    storage = TokenStreamStorage(work / "stream")
    n = seq * batch  # tokens per batch; a shard holds a whole number of batches
    shards = [np.asarray(np.memmap(p, dtype=np.int32, mode="r")) for p in sorted((work / "stream").glob("*.bin"))]
    per_shard = len(shards[0]) // n
    batches = storage.total_elements // n
    full, tokens_only = loader(storage, collate_packed, seq, batch), loader(storage, stack_tokens, seq, batch)
    inline = loader(storage, collate_packed, seq, batch, workers=0)
    sizes = {k: v.element_size() for k, v in collate_packed([PackedWindows(storage, seq)[0]]).items()}
    token_bytes = sum(sizes.values())  # what the packer emits per token (13: int32, int32, int32, bool)
    fields = np.ones((token_bytes - sizes["tokens"]) * n, dtype=np.uint8)  # segment ids, positions, mask

    def copy():  # the ceiling: a memory copy of the same output bytes, into a fresh buffer per batch
        cut = sizes["tokens"] * n
        for b in range(batches):
            out = np.empty(token_bytes * n, dtype=np.uint8)
            out[:cut] = shards[b // per_shard][b % per_shard * n : (b % per_shard + 1) * n].view(np.uint8)
            out[cut:] = fields

    def copy_tokens():  # the old ceiling: tokens only, one batch stacked from its windows
        for b in range(batches):
            shard, at = shards[b // per_shard], b % per_shard * n
            np.stack([shard[at + i * seq : at + (i + 1) * seq] for i in range(batch)])

    fns = {
        "copy": copy, "drt": lambda: sum(1 for _ in full), "drt_inline": lambda: sum(1 for _ in inline),
        "copy_tokens": copy_tokens, "drt_tokens_only": lambda: sum(1 for _ in tokens_only),
    }
    wall, cpu = interleaved_wall_and_cpu(fns, max(repeats, 5))
    tokens = batches * n
    return {"bytes_per_token": token_bytes, "repeats": max(repeats, 5),
            **{name: tokens / seconds for name, seconds in wall.items()},
            "cpu": {name: tokens / seconds for name, seconds in cpu.items()}}


def interleaved_wall_and_cpu(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Median wall and process CPU seconds of each ``fn()``, one of each per round, after a warm-up round. CPU time
    (all threads) is what a run costs whatever else the machine runs: the figure to read on a shared machine."""
    for fn in fns.values():
        fn()
    wall: dict = {name: [] for name in fns}
    cpu: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return ({k: float(np.median(v)) for k, v in wall.items()}, {k: float(np.median(v)) for k, v in cpu.items()})


def loader(storage: TokenStreamStorage, collate, seq: int, batch: int, workers: int = 2) -> StatefulDataLoader:
    kw = {"sequence_length": seq, "packing": "concat", "local_batch_size": batch, "num_workers": workers}
    return StatefulDataLoader.from_storage(storage, collate, **kw)


def stack_tokens(items):
    """A collate that keeps only the tokens (what the ceiling loop copies)."""
    return torch.from_numpy(np.stack([item.tokens for item in items]))


def write_documents(work: Path, total_tokens: int) -> tuple[Path, int]:
    lengths = document_lengths(int(total_tokens / 665) + 1, seed=1)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), total_tokens)) + 1]
    rng = np.random.default_rng(2)
    with DocumentStorageWriter(work, "docs", dtype="uint16") as writer:
        pool = rng.integers(0, 50_000, int(lengths.max()) * 2, dtype=np.uint16)
        for i, n in enumerate(lengths.tolist()):
            writer.write(pool[i % 1000 : i % 1000 + n])
    return work / "docs", int(lengths.sum())


def resume(repeats: int, work: Path, total_tokens: int) -> dict:
    path, tokens = write_documents(work, total_tokens)
    kw = {"sequence_length": 4096, "packing": "best_fit", "local_batch_size": 8, "num_workers": 2, "shuffle": True,
          "shuffle_seed": 0}

    def first_batch(state=None) -> float:
        t0 = time.perf_counter()
        loader = StatefulDataLoader.from_storage(DocumentStorage(path), collate_packed, **kw)
        if state is not None:
            loader.load_state_dict(state)
        next(iter(loader))
        seconds = time.perf_counter() - t0
        loader.close()
        return seconds

    loader = StatefulDataLoader.from_storage(DocumentStorage(path), collate_packed, **kw)
    it, done, t0 = iter(loader), 0, time.perf_counter()
    while done < 0.9 * tokens:
        done += int(next(it)["loss_mask"].sum())
    epoch_s = (time.perf_counter() - t0) / 0.9
    state = loader.state_dict()
    loader.close()
    fresh, resumed = [], []
    for _ in range(repeats):  # interleaved
        fresh.append(first_batch())
        resumed.append(first_batch(state))
    return {"tokens": tokens, "fresh": float(np.median(fresh)), "resumed": float(np.median(resumed)),
            "epoch_tokens_per_s": tokens / epoch_s, "state_bytes": len(json.dumps(state))}


def report_packing(lengths: np.ndarray, ours: dict, theirs: dict) -> None:
    print(f"\n## packing {len(lengths):,} log-normal documents ({int(lengths.sum()):,} tokens), {BINS} open sequences")
    for length in LENGTHS:
        for method in ("first_fit", "best_fit"):
            o = ours[str(length)][method]
            line = (f"L={length:<5} {method:<9} torch_drt padding {o['padding']:.4f}, "
                    f"{o['tokens_per_s'] / 1e6:7.1f} M tok/s")
            if "error" not in theirs:
                t = theirs[str(length)][method]
                line += (f"; Grain padding {t['padding']:.4f}, {t['tokens_per_s'] / 1e6:5.2f} M tok/s; "
                         f"speed-up {o['tokens_per_s'] / t['tokens_per_s']:.0f}x (target >= 10x)")
            print(line)
    if "error" in theirs:
        print(f"Grain: skipped ({theirs['error']})")


def report_stream(stream: dict) -> None:
    print("\n## concatenate-and-chunk from a token stream: 128 MiB int32, sequence 2,048, batch 8, 2 threads "
          f"(interleaved, medians of {stream['repeats']})")
    b = stream["bytes_per_token"]
    print(f"torch_drt {stream['drt'] / 1e6:.1f} M tok/s (all four fields, {b} bytes per token); memory copy of the "
          f"same bytes {stream['copy'] / 1e6:.1f} M tok/s ({stream['copy'] * b / 1e9:.2f} GB/s): "
          f"{stream['drt'] / stream['copy']:.0%} of the ceiling (target >= 50%)")
    print(f"the same with 0 workers (batches built in the calling thread): {stream['drt_inline'] / 1e6:.1f} M tok/s, "
          f"{stream['drt_inline'] / stream['copy']:.0%} of the ceiling")
    cpu = stream["cpu"]
    print(f"by CPU time (all threads; what other processes' load changes least): copy {cpu['copy'] / 1e6:.1f} M tok/s, "
          f"torch_drt {cpu['drt'] / cpu['copy']:.0%} of it with 2 threads, "
          f"{cpu['drt_inline'] / cpu['copy']:.0%} with 0 workers")
    print(f"tokens only: collate {stream['drt_tokens_only'] / 1e6:.1f} M tok/s, numpy slice loop "
          f"{stream['copy_tokens'] / 1e6:.1f} M tok/s: {stream['drt_tokens_only'] / stream['copy_tokens']:.0%}; "
          f"all four fields against the tokens-only loop (the old figure): {stream['drt'] / stream['copy_tokens']:.0%}")


def report_resume(res: dict) -> None:
    print(f"\n## resume at 90% of a {res['tokens']:,}-token epoch (best fit, sequence 4,096, batch 8, 2 workers)")
    print(f"first batch: fresh {res['fresh'] * 1e3:.1f} ms, resumed {res['resumed'] * 1e3:.1f} ms "
          f"({res['resumed'] / res['fresh']:.2f}x, target <= 2x); checkpoint {res['state_bytes']:,} bytes of JSON; "
          f"epoch throughput {res['epoch_tokens_per_s'] / 1e6:.1f} M tok/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--documents", type=int, default=8000)
    parser.add_argument("--resume-tokens", type=int, default=100_000_000)
    parser.add_argument("--skip-peers", action="store_true", help="do not run Grain")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=PARTS, help="run only these parts")
    args = parser.parse_args()
    print(f"# packing benchmarks on {machine()}, median of {args.repeats}")
    work = Path(tempfile.mkdtemp(prefix="bench_packing_"))
    ours = theirs = stream = res = None
    lengths = document_lengths(args.documents)
    try:
        if "packing" in args.only:
            theirs = grain(lengths, args.repeats, work, args.skip_peers)
            ours = packing(lengths, args.repeats)
        if "stream" in args.only:
            stream = token_stream(args.repeats, work)
        if "resume" in args.only:
            res = resume(args.repeats, work, args.resume_tokens)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if ours is not None:
        report_packing(lengths, ours, theirs)
    if stream is not None:
        report_stream(stream)
    if res is not None:
        report_resume(res)
    if args.json:
        figures = {"packing": ours, "grain": theirs, "stream": stream, "resume": res}
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
