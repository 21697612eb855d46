"""What the per-record integrity check costs on reads (issues 10 and 26: record checks cost <= 5%).

One torch_drt cache per layout (20,000 x 4 KiB by default, format 2: an XXH3-64 per record, checked on every
read), read as shipped ("checked"), with ``ReaderConfig(record_checks="first_read")`` ("first read": a record is
hashed on its first read in the process only; every timed block here re-reads records the warm-up round verified,
so this is the cost of the later epochs of a process), without the XXH3 record checks and without any check (the
record checks and the per-gather file size checks off), the configurations interleaved within each round (medians
of ``--repeats`` rounds after a warm-up round that is dropped). Workloads:

- batched: ``iter_batches(1024)``, sequential over large shards, shuffled over 1 MiB shards (many per gather);
- per-sample: ``CachedSample`` iteration, sequential;
- loader: ``to_torch_dataloader(batch_size=256, shuffle=True, num_workers=0)``, uint8 tensor batches.

The last column is the floor of any per-record XXH3 check: the hash alone over the same records (the xxhash
package's C routine, one call per record, a batch of records already in the CPU's caches), as a share of the
checked read's time.
The record cost cannot go below it without a cheaper hash or fewer checked bytes.

Then the hash's speed against a copy, and the checked gather alone (``checksums.copied_checksums`` over a mapped
file, 1,024 records a gather) with parts of 128 KiB and of the shipped size, against the copy alone.

    python benchmarks/bench_integrity.py [--samples 20000] [--repeats 7] [--cpu]

``--cpu`` times with ``time.process_time`` (the CPU this process spends, its threads included) instead of the wall
clock: on a machine shared with other work, the cost of a check is its CPU, not the waits between time slices.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _workload import payloads, workload_parser

CONFIGS = {
    "checked": (True, True),
    "first read": (True, True),
    "no record checks": (False, True),
    "no checks": (False, False),
}


class _Source:
    def __init__(self, name: str, payloads: list[bytes], make_input) -> None:
        self.name, self.payloads, self.make_input = name, payloads, make_input

    def __iter__(self):
        for i, data in enumerate(self.payloads):
            yield self.make_input(data, {"label": i % 1000})


def integrity_switches(record_checks: bool, size_checks: bool) -> None:
    """Benchmark-only switches (private attributes, class-wide: the loader's own readers too): turn the record
    checksums and the file size checks off or on."""
    from torch_drt.cache import _opened_cache
    from torch_drt.cache._opened_cache import OpenedCache
    from torch_drt.locations.local import LocalFile

    for cls, name, on in ((OpenedCache, "verify", record_checks), (LocalFile, "check", size_checks)):
        original = cls.__dict__.get(f"_bench_{name}") or cls.__dict__[name]
        setattr(cls, f"_bench_{name}", original)
        setattr(cls, name, original if on else _off)
    copied = getattr(_opened_cache, "_bench_copied", None) or _opened_cache.copied_checksums
    _opened_cache._bench_copied = copied  # every_read copies and hashes in parts (checksums.copied_checksums)
    _opened_cache.copied_checksums = copied if record_checks else _copied_unhashed


def _copied_unhashed(part, count: int, nbytes: int, checksums) -> tuple[list, int]:
    return part(0, count), -1


def _off(*args: object) -> None:
    return None


def _to_array(sample):
    return np.frombuffer(sample.data, dtype=np.uint8)


def _stack(items):
    import torch

    return torch.from_numpy(np.stack(items))


def _work(ds, api: str):
    if api == "batches":
        return lambda: sum(len(b.data) for b in ds.iter_batches(1024))
    if api == "samples":
        return lambda: sum(1 for _ in ds)
    loader = ds.to_torch_dataloader(
        sample_transform_fn=_to_array, collate_fn=_stack, batch_size=256, shuffle=True, num_workers=0
    )
    return lambda: sum(b.shape[0] for b in loader)


def _workloads(root: Path, payloads: list[bytes]) -> list[tuple[str, dict[str, object]]]:
    """Per workload: its label and the read of each configuration ("first read" reads its own dataset)."""
    import torch_drt as drt

    rt = drt.DatasetRuntime(num_workers=2)
    out = []
    for label, shard_bytes, shuffle, api in [
        ("iter_batches(1024), sequential", 64 << 20, False, "batches"),
        ("iter_batches(1024), shuffled", 1 << 20, True, "batches"),
        ("CachedSample iteration, sequential", 64 << 20, False, "samples"),
        ("loader, batch 256, shuffled, 0 workers", 64 << 20, True, "loader"),
    ]:
        ds = rt.from_cache_sources(
            _Source(f"integrity{shard_bytes}", payloads, drt.CacheInput),
            root,
            writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=shard_bytes),
            reader_config=drt.ReaderConfig(seed=0, shuffle=shuffle),
        )
        once = rt.cached_dataset(
            [ds.layouts[0].path],
            reader_config=drt.ReaderConfig(seed=0, shuffle=shuffle, record_checks="first_read"),
        )
        work = _work(ds, api)
        works = {config: work for config in CONFIGS} | {"first read": _work(once, api)}
        out.append((f"{label}, {len(ds.layouts[0].shards)} shard(s)", works))
    return out


def _hash_seconds(payloads: list[bytes], batch: int = 1024, clock=time.perf_counter) -> float:
    """The hash alone over ``payloads``, a batch at a time, each batch hashed once untimed first: its records are
    in the CPU's caches, as a read's freshly copied records are when they are checked."""
    from torch_drt.checksums import record_checksums

    total = 0.0
    for i in range(0, len(payloads), batch):
        part = payloads[i : i + batch]
        record_checksums(part, len(part))
        t0 = clock()
        record_checksums(part, len(part))
        total += clock() - t0
    return total


def bench_integrity(
    root: Path, payloads: list[bytes], repeats: int, clock=time.perf_counter
) -> list[tuple[str, dict[str, float]]]:
    """Read samples/s per (workload, configuration) and the hash alone, all interleaved within each round, timed
    with ``clock``."""
    out = []
    passes = max(1, -(-200_000 // len(payloads)))  # each timed block reads about 200,000 samples
    try:
        for label, works in _workloads(root, payloads):
            times: dict[str, list[float]] = {c: [] for c in [*CONFIGS, "hash alone"]}
            for _ in range(max(5, repeats) + 1):  # the first round warms the page cache and is dropped
                for config, switches in CONFIGS.items():
                    integrity_switches(*switches)
                    t0 = clock()
                    n = sum(works[config]() for _ in range(passes))
                    times[config].append(clock() - t0)
                    assert n == passes * len(payloads), n
                integrity_switches(True, True)
                times["hash alone"].append(sum(_hash_seconds(payloads, clock=clock) for _ in range(passes)))
            out.append((label, {c: passes * len(payloads) / statistics.median(t[1:]) for c, t in times.items()}))
    finally:
        integrity_switches(True, True)
    return out


def print_integrity(rows: list[tuple[str, dict[str, float]]], repeats: int) -> None:
    """The table: samples/s per configuration, the record checks' and all checks' share of the checked read's
    time, and the hash alone's share (the floor of the record checks)."""
    print(f"# integrity on reads (target: record checks cost <= 5%): samples/s, median of {max(5, repeats)}")
    head = ["checked", "first read", "no record checks", "no checks", "record cost", "first-read cost", "all",
            "hash floor"]
    print(f"{'workload':<56} " + " ".join(f"{h:>{max(10, len(h))}}" for h in head))
    for label, rates in rows:
        checked, once = rates["checked"], rates["first read"]
        unchecked, bare = rates["no record checks"], rates["no checks"]
        print(
            f"{label:<56} {checked:>10,.0f} {once:>10,.0f} {unchecked:>16,.0f} {bare:>10,.0f} "
            f"{1 - checked / unchecked:>11.1%} {1 - once / unchecked:>15.1%} {1 - checked / bare:>10.1%} "
            f"{checked / rates['hash alone']:>10.1%}"
        )


def hash_speed(clock=time.process_time) -> list[tuple[str, float, float]]:
    """XXH3-64 (the xxhash package) against a copy of the same buffer, in GB/s, medians of 5: one 4 KiB record per
    call (the copy as a read makes it, a new ``bytes`` per record), one 256 KiB buffer (in a core's cache) and one
    64 MiB buffer (from memory), both copied into a buffer allocated once (memcpy)."""
    import xxhash

    out = []
    for label, size, reps in [("4 KiB, one call per record", 4096, 20_000), ("256 KiB, in cache", 256 << 10, 400),
                              ("64 MiB, from memory", 64 << 20, 2)]:
        src = memoryview(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes())
        dst = memoryview(bytearray(size))
        copy = (lambda s=src: bytes(s)) if size <= 4096 else (lambda s=src, d=dst: d.__setitem__(slice(None), s))
        rates = []
        for fn in (lambda s=src: xxhash.xxh3_64_intdigest(s), copy):
            times = []
            for _ in range(5):
                t0 = clock()
                for _ in range(reps):
                    fn()
                times.append(clock() - t0)
            rates.append(size * reps / statistics.median(times) / 1e9)
        out.append((label, *rates))
    return out


def print_hash_speed(rows: list[tuple[str, float, float]]) -> None:
    """The hash's own speed: what a check of every byte read costs next to copying those bytes."""
    print("# XXH3-64 vs a copy of the same bytes on this CPU, GB/s (the hash's time as a share of the copy's)")
    for label, xxh3, copy in rows:
        print(f"{label:<56} xxh3 {xxh3:6.1f}  copy {copy:6.1f}  hash/copy {copy / xxh3:5.2f}")


def part_sizes(payloads: list[bytes], repeats: int, clock=time.perf_counter) -> dict[str, float]:
    """The checked gather alone (``checksums.copied_checksums`` over one mapped file of ``payloads``, 1,024 records a
    gather, sequential) with parts of 128 KiB and of the shipped size, and the copy alone: ns per record, the three
    interleaved, medians of ``repeats`` rounds after a warm-up round that is dropped."""
    import mmap

    from torch_drt import checksums

    shipped = checksums._HOT_BYTES
    with tempfile.TemporaryFile() as f:
        f.write(b"".join(payloads))
        f.flush()
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        ends = np.cumsum([len(p) for p in payloads]).tolist()
        starts = [0, *ends[:-1]]
        sums = checksums.record_checksums(payloads, len(payloads))
        gathers = [(k, min(k + 1024, len(payloads))) for k in range(0, len(payloads), 1024)]

        def checked(part_bytes: int):
            def run() -> None:
                checksums._HOT_BYTES = part_bytes
                for k, e in gathers:
                    s, t = starts[k:e], ends[k:e]
                    part = lambda i, j, s=s, t=t: [mm[a:b] for a, b in zip(s[i:j], t[i:j])]  # noqa: E731
                    assert checksums.copied_checksums(part, e - k, t[-1] - s[0], sums[k:e])[1] == -1
            return run

        def copy() -> None:
            for k, e in gathers:
                [mm[a:b] for a, b in zip(starts[k:e], ends[k:e])]

        runs = {
            "copy alone": copy,
            "parts of 128 KiB": checked(128 << 10),
            f"parts of {shipped >> 10} KiB": checked(shipped),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        try:
            for _ in range(max(5, repeats) + 1):
                for name, run in runs.items():
                    t0 = clock()
                    run()
                    times[name].append(clock() - t0)
        finally:
            checksums._HOT_BYTES = shipped
            mm.close()
    return {name: statistics.median(t[1:]) / len(payloads) * 1e9 for name, t in times.items()}


def print_part_sizes(rows: dict[str, float]) -> None:
    """The checked gather's part size: ns per record, and above the copy."""
    print("# every_read's parts (a gather copied and hashed a part at a time): ns per record, gathers of 1,024")
    copy = rows["copy alone"]
    for name, ns in rows.items():
        print(f"{name:<56} {ns:8.0f} ns" + ("" if name == "copy alone" else f"  above the copy {ns - copy:6.0f} ns"))


def main() -> None:
    parser = workload_parser(__doc__, "--repeats", 7)
    parser.add_argument("--cpu", action="store_true", help="time with process_time (CPU), not the wall clock")
    args = parser.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    records = payloads(args.samples)
    work = Path(tempfile.mkdtemp(prefix="bench_integrity_"))
    try:
        print_integrity(bench_integrity(work, records, args.repeats, clock), args.repeats)
        print_hash_speed(hash_speed())
        print_part_sizes(part_sizes(records, args.repeats, clock))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
