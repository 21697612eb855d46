"""The report's formatting helpers and per-benchmark tables (used by run_all.py)."""

from __future__ import annotations


def fmt(x: float | None, unit: str = "") -> str:
    return "skipped" if x is None else f"{x:,.0f}{unit}" if x >= 100 else f"{x:.3g}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    return "" if not a or not b else f"{a / b:.2f}x"


def skip_reason(entry: dict | None) -> str | None:
    return entry.get("error") if isinstance(entry, dict) and "error" in entry else None


def cache_table(r: dict) -> list[str]:
    rows = [
        "| library | write samples/s | read samples/s | torch_drt write ratio | torch_drt read ratio |",
        "|---|---|---|---|---|",
    ]
    ours = r["torch_drt"]
    rows.append(f"| torch_drt | {fmt(ours['write'])} | {fmt(ours['read'])} | | |")
    peers = {"dataset-rt": r.get("dataset-rt"), **r.get("peers", {})}
    for name, fig in peers.items():
        if reason := skip_reason(fig):
            rows.append(f"| {name} | skipped: {reason} | | | |")
        else:
            rows.append(
                f"| {name} | {fmt(fig['write'])} | {fmt(fig['read'])} | {ratio(ours['write'], fig['write'])} "
                f"| {ratio(ours['read'], fig['read'])} |"
            )
    return rows


def packing_section(r: dict) -> list[str]:
    """Language-model packing against Grain, the packed token stream, and resume (bench_packing.py)."""
    gr = r.get("grain", {})
    lines = [
        "## Language-model packing: log-normal documents, 128 open sequences",
        "",
        "| L | method | torch_drt padding | Grain padding | torch_drt M tok/s | Grain M tok/s | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for length, methods in r["packing"].items():
        for method, ours in methods.items():
            theirs = None if skip_reason(gr) else gr.get(length, {}).get(method)
            rate = f"{ours['tokens_per_s'] / 1e6:.1f}"
            if theirs:
                cells = [f"{theirs['padding']:.4f}", rate, f"{theirs['tokens_per_s'] / 1e6:.2f}",
                         ratio(ours["tokens_per_s"], theirs["tokens_per_s"])]
            else:
                cells = [f"skipped: {skip_reason(gr)}", rate, "", ""]
            lines.append(f"| {length} | {method} | {ours['padding']:.4f} | " + " | ".join(cells) + " |")
    st, rs = r["stream"], r["resume"]
    lines += [
        "",
        f"Concatenate-and-chunk from a token stream (sequence 2,048, batch 8, 2 threads, all four fields): "
        f"{st['drt'] / 1e6:.1f} M tok/s, {st['drt'] / st['ceiling']:.0%} of the numpy memory-map loop "
        f"({st['ceiling'] / 1e6:.1f} M tok/s, tokens only); with a tokens-only collate "
        f"{st['drt_tokens_only'] / st['ceiling']:.0%}.",
        "",
        f"Resume at 90% of a {rs['tokens']:,}-token epoch (best fit, sequence 4,096): first batch "
        f"{rs['resumed'] * 1e3:.1f} ms against {rs['fresh'] * 1e3:.1f} ms fresh ({rs['resumed'] / rs['fresh']:.2f}x); "
        f"checkpoint {rs['state_bytes']:,} bytes.",
        "",
    ]
    return lines


def build_table(b: dict) -> list[str]:
    """The build benchmark's section: samples/s per library and the rerun after a kill."""
    ours = b["torch_drt"]
    rows = [
        f"## Building a cache: {b['samples']:,} JPEGs decoded, resized to 224 and re-encoded, 2 worker processes",
        "",
        "| library | seconds | samples/s | torch_drt ratio |",
        "|---|---|---|---|",
        f"| torch_drt on Ray ({b['parts']} parts) | {ours['seconds']:.2f} | {fmt(ours['rate'])} | |",
    ]
    for name in ("litdata", "mosaicml-streaming"):
        fig = b.get(name, {})
        if reason := skip_reason(fig):
            rows.append(f"| {name} | skipped: {reason} | | |")
        else:
            rows.append(f"| {name} | {fig['seconds']:.2f} | {fmt(fig['rate'])} | {ratio(ours['rate'], fig['rate'])} |")
    r = b["resume"]
    rows += [
        "",
        f"Rerun after a kill at 50% of the rows: {r['rerun']:.2f} s against {r['full']:.2f} s for a full build "
        f"({r['ratio']:.2f}; goal <= 0.60). Ray cluster start ({b['ray_init']:.1f} s) not timed.",
        "",
    ]
    return rows


def remote_table(r: dict) -> list[str]:
    """Caches on object storage (bench_remote.py): torch_drt against Streaming and LitData through a 20 ms proxy."""
    rows = [
        f"## Caches on object storage: {r['samples']:,} x {r['size']:,} B on moto S3 behind a "
        f"{r['latency'] * 1e3:.0f} ms proxy, shuffled, batch 256 (torch_drt shard_window={r['window']})",
        "",
        "| library | workers | time to first batch (ms) | cold epoch 1 (samples/s) | warm epoch 2 (samples/s) "
        "| epoch-2 bytes, 50% cache |",
        "|---|---|---|---|---|---|",
    ]
    libraries = {"torch_drt": r["torch_drt"], **r.get("peers", {})}
    for w in (0, 2):
        for name, fig in libraries.items():
            f = fig.get(f"w{w}", fig)
            if reason := skip_reason(f):
                rows.append(f"| {name} | {w} | skipped: {reason} | | | |")
                continue
            half = f["epoch2_bytes"]
            half = f"{half:.0%}" if isinstance(half, float) else f"skipped: {skip_reason(half)}"
            rows.append(f"| {name} | {w} | {f['ttfb'] * 1e3:.0f} | {fmt(f['epoch1'])} | {fmt(f['epoch2'])} "
                        f"| {half} |")
    res, ceil = r["resume"], r["ceiling"]
    rows += [
        "",
        f"First batch after a mid-epoch resume: {res['resumed'] * 1e3:.1f} ms against a warm batch's "
        f"{res['warm'] * 1e3:.1f} ms ({res['resumed'] / res['warm']:.2f}x; goal <= 2x; medians of "
        f"{res.get('resumes', 1)} resumes; before it, opening the cache, building the loader and loading the "
        f"checkpoint took {res['build'] * 1e3:.1f} ms). Network ceiling (plain GETs "
        f"of every shard through the proxy, 8 at a time): {fmt(ceil['samples_per_s'])} samples/s, "
        f"{ceil['mb_per_s']:.0f} MB/s.",
        "",
    ]
    return rows


def formats_table(r: dict) -> list[str]:
    """Datasets in other formats (bench_formats.py): torch_drt against each system's own loader on its files."""
    rows = [
        f"## Datasets in other formats: {r['samples']:,} x {r['size']:,} B, MDS, LitData and WebDataset on moto S3 "
        f"behind a {r['latency'] * 1e3:.0f} ms proxy, Parquet local; shuffled, batch {r['batch']}, medians of "
        f"{r['repeats']} interleaved rounds",
        "",
        "| format | library | workers | time to first batch (ms) | cold epoch 1 (samples/s) | warm epoch 2 "
        "(samples/s) | torch_drt: cold, warm, first batch |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, libraries in r["results"].items():
        ours = libraries["torch_drt"]
        for w in ("w0", "w2"):
            for name, figures in libraries.items():
                f, o = figures[w], ours[w]
                if reason := skip_reason(f):
                    rows.append(f"| {system} | {name} | {w[1:]} | skipped: {' '.join(reason.split())} | | | |")
                    continue
                ratios = "" if name == "torch_drt" or skip_reason(o) else (
                    f"{ratio(o['epoch1'], f['epoch1'])}, {ratio(o['epoch2'], f['epoch2'])}, "
                    f"{o['ttfb'] / f['ttfb']:.2f} of theirs")
                rows.append(f"| {system} | {name} | {w[1:]} | {f['ttfb'] * 1e3:.0f} | {fmt(f['epoch1'])} "
                            f"| {fmt(f['epoch2'])} | {ratios} |")
    return [*rows, ""]
