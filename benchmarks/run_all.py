"""Run every benchmark in one process tree and write a Markdown report (tables per workload, a scaling plot).

    python benchmarks/run_all.py [--report benchmark-report.md] [--quick] [--repeats 3]

Each benchmark runs as a child process with ``--json``; peers that cannot be installed or run are reported as
skipped with the reason. Side environments for the peers: ``benchmarks/setup_peers.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

from _report_tables import (  # noqa: E402
    build_table,
    cache_table,
    fmt,
    formats_table,
    packing_section,
    ratio,
    remote_table,
    skip_reason,
)


def describe_machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = next(
            int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")
        )
        memory = f"{mem / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "unknown memory"
    import torch

    return (
        f"{cpu}, {os.cpu_count()} CPUs, {memory}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def run(script: str, out: Path, *args: str) -> tuple[dict | None, str]:
    """Run one benchmark; return its JSON figures (or None) and its printed output."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--json", str(out), *args], capture_output=True, text=True, timeout=3600
    )
    took = time.perf_counter() - t0
    text = proc.stdout + (f"\n[{script} exited {proc.returncode}]\n{proc.stderr[-2000:]}" if proc.returncode else "")
    print(f"{script}: {took:.0f}s, exit {proc.returncode}", flush=True)
    return (json.loads(out.read_text()) if out.exists() else None), text


def report(results: dict, outputs: dict, machine: str, plot: str | None) -> str:
    lines = [
        "# torch_drt benchmark report",
        "",
        f"Machine: {machine}",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `python benchmarks/run_all.py {' '.join(sys.argv[1:])}`"
        "; each script's figures are medians over its repeats (`--repeats`, printed in each raw output).",
        "",
    ]
    if (c := results.get("bench_cache.py")) is not None:
        lines += ["## Cache: write and sequential read, 20,000 x 4 KiB", "", *cache_table(c), ""]
    if (cl := results.get("bench_cache_loader.py")) is not None:
        tp = cl.get("throughput", {})
        lines += [
            "## The cache's torch loader, batch 256, uint8 tensors (samples/s)",
            "",
            "| mode | torch_drt 0 workers | torch_drt 2 workers | dataset-rt 0 workers | ratio (0 workers) |",
            "|---|---|---|---|---|",
        ]
        for mode in ("shuffled", "sequential"):
            theirs = tp.get(f"dataset_rt_{mode}_0")
            lines.append(
                f"| {mode} | {fmt(tp.get(f'drt_{mode}_0'))} | {fmt(tp.get(f'drt_{mode}_2'))} | "
                f"{fmt(theirs) if theirs else 'skipped: ' + tp.get('dataset_rt_error', '')} | "
                f"{ratio(tp.get(f'drt_{mode}_0'), theirs)} |"
            )
        if "resume" in cl:
            r = cl["resume"]
            lines += [
                "",
                f"Resume at 90% of a 1,000,000-sample epoch: first batch {r['resumed'] * 1e3:.1f} ms against "
                f"{r['fresh'] * 1e3:.1f} ms for a fresh start ({r['resumed'] / r['fresh']:.2f}x).",
            ]
        if "memory" in cl:
            m = cl["memory"]
            share = sum(w["snapshot_pss"] for w in m["workers"]) / m["snapshot_bytes"]
            lines += [
                "",
                f"Memory, 10,000,000-row table, 4 workers: snapshot {m['snapshot_bytes'] / 2**20:.0f} MiB; "
                f"workers' PSS of it {share:.2f} copies; USS per worker "
                + ", ".join(f"{w['uss'] / 2**20:.0f}" for w in m["workers"])
                + " MiB.",
            ]
        lines.append("")
    if (lo := results.get("bench_loader.py")) is not None:
        ov, rs = lo["overhead"], lo.get("dataloader-rs", {})
        lines += [
            "## Loader overhead: 100,000 int items, batch 64 (seconds per epoch, lower is better)",
            "",
            "| loader | 0 workers | 2 workers | torch_drt speed-up (0 / 2) |",
            "|---|---|---|---|",
            f"| torch_drt | {ov['drt_0']:.4f} | {ov['drt_2']:.4f} | |",
            f"| torch DataLoader (2 persistent processes) | {ov['torch_0']:.4f} | {ov['torch_2']:.4f} | "
            f"{ratio(ov['torch_0'], ov['drt_0'])} / {ratio(ov['torch_2'], ov['drt_2'])} |",
            f"| torchdata nodes (threads) | {ov['nodes_0']:.4f} | {ov['nodes_2']:.4f} | "
            f"{ratio(ov['nodes_0'], ov['drt_0'])} / {ratio(ov['nodes_2'], ov['drt_2'])} |",
        ]
        if reason := skip_reason(rs):
            lines.append(f"| dataloader-rs | skipped: {reason} | | |")
        else:
            lines.append(
                f"| dataloader-rs (Python 3.13) | {rs['overhead_0']:.4f} | {rs['overhead_2']:.4f} | "
                f"{ratio(rs['overhead_0'], ov['drt_0'])} / {ratio(rs['overhead_2'], ov['drt_2'])} |"
            )
        same = lo.get("same_interpreter", {"error": "not measured"})
        if reason := skip_reason(same):
            lines.append(f"| same interpreter | skipped: {reason} | | |")
        else:  # dataloader-rs's row above is across interpreters: these are both on the side one
            py = same["python"]
            lines += [
                f"| torch_drt (Python {py}) | {same['drt_0']:.4f} | | |",
                f"| dataloader-rs (Python {py}, same interpreter) | {same['rs_0']:.4f} | | "
                f"{ratio(same['rs_0'], same['drt_0'])} / - |",
                f"| torch DataLoader (Python {py}) | {same['torch_0']:.4f} | | "
                f"{ratio(same['torch_0'], same['drt_0'])} / - |",
                "",
                f"A bare loop doing the same work without a loader: Python {same['host_python']} "
                f"{same['host_bare']:.4f}s, Python {py} {same['bare']:.4f}s (the interpreter alone: "
                f"{same['interpreter_ratio']:.2f}x as fast).",
            ]
        io = lo["io"]
        lines += [
            "",
            f"I/O-bound (1,024 x 10 ms, 64 in flight): torch_drt {io['drt']:.3f}s, ideal {io['ideal']:.3f}s "
            f"({io['drt'] / io['ideal']:.2f}x)" + ("" if skip_reason(rs) else f"; dataloader-rs {rs['io']:.3f}s"),
            "",
            "| token stream (M tokens/s) | torch_drt | numpy memmap ceiling | share | guideloom |",
            "|---|---|---|---|---|",
        ]
        gl = lo.get("guideloom", {})
        for name in ("sequential", "shuffled"):
            ours, ceil = lo["tokens"][f"drt_{name}"], lo["tokens"][f"ceiling_{name}"]
            theirs = "skipped: " + skip_reason(gl) if skip_reason(gl) else f"{gl[name] / 1e6:.1f}"
            lines.append(f"| {name} | {ours / 1e6:.1f} | {ceil / 1e6:.1f} | {ours / ceil:.0%} | {theirs} |")
        lines.append("")
    if (tr := results.get("bench_transforms.py")) is not None:
        lines += [
            "## Image pipelines (images/s)",
            "",
            "| set | torch_drt 2 threads | torch_drt 0 workers | torch DataLoader 2 processes | vs torch | vs 0 |",
            "|---|---|---|---|---|---|",
        ]
        for key, name in (("png", "PNG <= 224 px, pad"), ("jpeg", "JPEG 256-400 px, resize")):
            f = tr[key]
            lines.append(
                f"| {name} | {fmt(f['drt_2'])} | {fmt(f['drt_0'])} | {fmt(f['torch_2'])} | "
                f"{ratio(f['drt_2'], f['torch_2'])} | {ratio(f['drt_2'], f['drt_0'])} |"
            )
        if "png_decode" in tr:
            d = tr["png_decode"]
            lines += [
                "",
                f"PNG decode, one thread: Decode (Pillow, crash-safe) {d['pillow']:.0f} us per image, torchvision's "
                f"decode_png (libpng, crashes on corrupt data) {d['libpng']:.0f} us "
                f"({d['pillow'] / d['libpng']:.2f}x).",
            ]
        if plot:
            lines += ["", f"![PNG throughput by worker count]({plot})"]
        lines.append("")
    if (au := results.get("bench_augment.py")) is not None:
        lines += [
            "## Augmentation pipeline: decode, RandomResizedCrop 224, flip, ColorJitter, normalize (images/s)",
            "",
            "| torch_drt, 2 threads | torchvision v2 on torch DataLoader, 2 processes | ratio (target >= 1.5x) |",
            "|---|---|---|",
            f"| {fmt(au['torch_drt'])} | {fmt(au['torchvision'])} | {au['ratio']:.2f}x |",
            "",
            f"Values equal to torchvision v2's from the same seed within {au['max_difference']:.1e}.",
            "",
        ]
    if (fe := results.get("bench_fetch.py")) is not None:
        rs, ideal = fe.get("dataloader-rs", {}), fe["ideal"]
        loader, bare, torch_ = fe["loader"], fe["bare"], fe["torch"]
        lines += [
            "## Remote items: 2,048 x 64 KiB over HTTP, 10 ms each, fresh loader per epoch",
            "",
            "| loader | epoch (s) | first batch (ms) | vs ideal |",
            "|---|---|---|---|",
            f"| torch_drt HttpDataset, 64 in flight | {loader['epoch']:.3f} | {loader['first'] * 1e3:.0f} | "
            f"{loader['epoch'] / ideal:.2f}x |",
            f"| bare aiohttp, 64 at a time | {bare['epoch']:.3f} | | {bare['epoch'] / ideal:.2f}x |",
        ]
        if torch_:
            lines.append(f"| torch DataLoader, 8 processes | {torch_['epoch']:.3f} | {torch_['first'] * 1e3:.0f} | "
                         f"{torch_['epoch'] / ideal:.2f}x |")
        if reason := skip_reason(rs):
            lines.append(f"| dataloader-rs | skipped: {reason} | | |")
        elif "http" in rs:
            lines.append(f"| dataloader-rs HttpDataset | {rs['http']:.3f} | | {rs['http'] / fe['ideal']:.2f}x |")
        lines += ["", "Against bare aiohttp (issue 26, goal <= 1.05x; medians of the per-round ratios): "
                  + "; ".join(f"{name} wall {r['wall']:.3f}x, client CPU {r['cpu']:.3f}x"
                              for name, r in fe.get("ratios", {}).items())]
        lines.append("")
    if (pk := results.get("bench_packing.py")) is not None:
        lines += packing_section(pk)
    if (bu := results.get("bench_build.py")) is not None:
        lines += build_table(bu)
    if (rm := results.get("bench_remote.py")) is not None:
        lines += remote_table(rm)
    if (fm := results.get("bench_formats.py")) is not None:
        lines += formats_table(fm)
    lines += ["## Raw output", ""]
    for script, text in outputs.items():
        lines += [f"### {script}", "", "```", text.strip(), "```", ""]
    return "\n".join(lines)


def make_plot(scaling: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(scaling["workers"], scaling["torch_drt"], marker="o", label="torch_drt (threads)")
    ax.plot(scaling["workers"], scaling["torch"], marker="s", label="torch DataLoader (processes)")
    ax.set_xlabel("workers")
    ax.set_ylabel("PNG images/s")
    ax.set_title("Image pipeline throughput by worker count")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", default="benchmark-report.md")
    parser.add_argument("--quick", action="store_true", help="one repeat, no memory run, 500 images")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    repeats = "1" if args.quick else str(args.repeats)
    work = Path(tempfile.mkdtemp(prefix="run_all_"))
    plan = [
        ("bench_cache.py", ["--repeats", repeats]),
        ("bench_cache_loader.py", ["--repeats", repeats] + (["--skip-memory"] if args.quick else [])),
        ("bench_loader.py", ["--repeats", repeats]),
        ("bench_transforms.py", ["--repeats", repeats, "--scaling"] + (["--images", "500"] if args.quick else [])),
        ("bench_augment.py", ["--repeats", repeats] + (["--images", "500"] if args.quick else [])),
        ("bench_fetch.py", ["--repeats", repeats]),
        ("bench_packing.py", ["--repeats", repeats] + (["--resume-tokens", "20000000"] if args.quick else [])),
        ("bench_build.py", ["--repeats", repeats] + (["--samples", "2000", "--parts", "20"] if args.quick else [])),
        ("bench_remote.py", ["--repeats", repeats] + (["--samples", "8000"] if args.quick else [])),
        ("bench_formats.py", ["--repeats", repeats] + (["--samples", "4000"] if args.quick else [])),
    ]
    results, outputs = {}, {}
    for script, extra in plan:
        results[script], outputs[script] = run(script, work / f"{script}.json", *extra)
    report_path = Path(args.report)
    plot = None
    if results.get("bench_transforms.py") and "scaling" in results["bench_transforms.py"]:
        plot = make_plot(results["bench_transforms.py"]["scaling"], report_path.with_suffix(".png"))
    report_path.write_text(report(results, outputs, describe_machine(), plot))
    print(f"report written to {report_path}" + (f" (plot {plot})" if plot else ""))


if __name__ == "__main__":
    main()
