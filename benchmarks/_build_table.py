"""The build benchmark's table for one ``--samples`` count (``bench_build.py``), with its processes accounting."""

from __future__ import annotations


def _share(ratios: dict, label: str) -> str:
    r = ratios.get(label)
    return "-" if r is None else f"{r['median']:.1%} ({r['min']:.0%}-{r['max']:.0%})"


def print_table(f: dict, workers: int, peers: tuple[str, ...] | list[str]) -> None:
    """Print ``bench_build.measure_local``'s (and ``measure_ray``'s) figures for one ``--samples`` count."""
    ray = "torch_drt" in f
    cluster = f"Ray cluster start {f['ray_init']:.1f} s, not timed; " if ray else "no Ray rows (--skip-ray); "
    print(f"\n# build: {f['samples']} JPEGs -> 224 px JPEG + int label, {workers} worker processes, median of "
          f"{f['repeats']} ({cluster}torch_drt in {f['parts']} parts)")
    print(f"{'library':<22} {'seconds':>9} {'samples/s':>10} {'torch_drt ratio':>16}")
    local = f["processes"]["rate"]
    ideal, bare = f["ideal"], f["bare"]
    print(f"{'ideal':<22} {ideal['seconds']:>9.2f} {ideal['rate']:>10,.0f}   ({workers} x the conversion's rate "
          "in one forked process)")
    print(f"{'bare processes':<22} {bare['seconds']:>9.2f} {bare['rate']:>10,.0f}   ({workers} forked processes "
          "converting a share each, nothing written)")
    print(f"{'torch_drt (processes)':<22} {f['processes']['seconds']:>9.2f} {local:>10,.0f}")
    if ray:
        ours = f["torch_drt"]["rate"]
        print(f"{'torch_drt (Ray)':<22} {f['torch_drt']['seconds']:>9.2f} {ours:>10,.0f} {ours / local:>15.2f}x "
              "(of the processes row)")
    rates = []
    for peer in peers:
        if "error" in f[peer]:
            print(f"{peer:<22} skipped: {f[peer]['error']}")
        else:
            rates.append(f[peer]["rate"])
            print(f"{peer:<22} {f[peer]['seconds']:>9.2f} {f[peer]['rate']:>10,.0f} {local / f[peer]['rate']:>15.2f}x")
    r = f["ratios"]
    if rates:
        print("torch_drt (processes) / peer, medians of the per-round ratios (range): " + ", ".join(
            f"{p} {r[f'build/{p}']['median']:.2f}x ({r[f'build/{p}']['min']:.2f}-{r[f'build/{p}']['max']:.2f})"
            for p in peers if f"build/{p}" in r) + " (goal >= 1.1x both)")
    print(f"shares, medians of the per-round ratios (range): build/ideal {_share(r, 'build/ideal')} (goal >= 95%) = "
          f"machine (bare/ideal) {_share(r, 'bare/ideal')} x torch_drt (build/bare) {_share(r, 'build/bare')}")
    if ray:
        print(f"Ray: build/ideal {_share(f['ray_ratios'], 'build/ideal')} (its own ideal, timed beside the cluster)")
    conversion = f["ideal"]["cpu"]
    print(f"CPU: the conversion alone {conversion:.2f} s; the bare processes {bare['cpu']:.2f} s; the processes build "
          f"{f['processes']['cpu']:.2f} s ({conversion / f['processes']['cpu']:.0%} of it converting)"
          + (f"; the Ray build {f['torch_drt']['cpu']:.2f} s ({f['ideal_ray']['cpu'] / f['torch_drt']['cpu']:.0%})"
             if ray else ""))
    from _build_local import print_accounting  # (it imports bench_build, which imports this module)

    print_accounting(f["processes"]["accounting"], conversion)
    if "resume" not in f:
        return
    r = f["resume"]
    print(f"resume: killed once half the rows were converted ({r['published_before']:.0%} of them in published "
          f"parts); rerun {r['rerun']:.2f} s vs full build {r['full']:.2f} s = {r['ratio']:.2f} (goal <= 0.60)")
