"""The build benchmark's table for one ``--samples`` count (``bench_build.py``), with its processes accounting."""

from __future__ import annotations


def print_table(f: dict, workers: int, peers: tuple[str, ...] | list[str]) -> None:
    """Print ``bench_build.measure``'s figures for one ``--samples`` count."""
    print(f"\n# build: {f['samples']} JPEGs -> 224 px JPEG + int label, {workers} worker processes, median of "
          f"{f['repeats']} (Ray cluster start {f['ray_init']:.1f} s, not timed; torch_drt in {f['parts']} parts)")
    print(f"{'library':<22} {'seconds':>9} {'samples/s':>10} {'torch_drt ratio':>16}")
    ours = f["torch_drt"]["rate"]
    print(f"{'torch_drt (Ray)':<22} {f['torch_drt']['seconds']:>9.2f} {ours:>10,.0f}")
    local = f["processes"]["rate"]
    print(f"{'torch_drt (processes)':<22} {f['processes']['seconds']:>9.2f} {local:>10,.0f} {local / ours:>15.2f}x "
          "(of the Ray row)")
    rates = []
    for peer in peers:
        if "error" in f[peer]:
            print(f"{peer:<22} skipped: {f[peer]['error']}")
        else:
            rates.append(f[peer]["rate"])
            print(f"{peer:<22} {f[peer]['seconds']:>9.2f} {f[peer]['rate']:>10,.0f} {ours / f[peer]['rate']:>15.2f}x")
    for label, rate in (("torch_drt (Ray)", ours), ("torch_drt (processes)", local)):
        if rates:
            print(f"{label} / faster peer: {rate / max(rates):.2f}x, / slower peer: {rate / min(rates):.2f}x "
                  "(goal >= 1.1x both)")
    ideal, ideal_ray = f["ideal"]["rate"], f["ideal_ray"]["rate"]
    print(f"ideal ({workers} x the conversion's single-process rate, same run): {ideal:,.0f} samples/s beside the "
          f"processes build and the peers, {ideal_ray:,.0f} beside the Ray builds (its own rounds, the cluster up); "
          f"torch_drt at {ours / ideal_ray:.0%} of it on Ray, {local / ideal:.0%} in processes (goal >= 95%)"
          + "".join(f", {peer} at {f[peer]['rate'] / ideal:.0%}" for peer in peers if "error" not in f[peer]))
    conversion = f["ideal"]["cpu"]
    print(f"CPU: the conversion alone {conversion:.2f} s; the Ray build {f['torch_drt']['cpu']:.2f} s in all "
          f"({f['ideal_ray']['cpu'] / f['torch_drt']['cpu']:.0%} of it converting), the processes build "
          f"{f['processes']['cpu']:.2f} s ({conversion / f['processes']['cpu']:.0%})")
    from _build_local import print_accounting  # (it imports bench_build, which imports this module)

    print_accounting(f["processes"]["accounting"], conversion)
    if "resume" not in f:
        return
    r = f["resume"]
    print(f"resume: killed once half the rows were converted ({r['published_before']:.0%} of them in published "
          f"parts); rerun {r['rerun']:.2f} s vs full build {r['full']:.2f} s = {r['ratio']:.2f} (goal <= 0.60)")
