"""``torch-drt profile``: run a loader for N batches, print its statistics and verdict, draw where the time went.

TARGET is a cache (a directory or URL, loaded with ``to_torch_dataloader``) or ``module:function``, a factory
returning a torch_drt loader. While the loader runs, its statistics are read every few batches; the deltas make
the picture: per worker, the share of each interval spent in each stage, and the throughput over time.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

from torch_drt._cli_cache_inputs import add_storage_options
from torch_drt._cli_common import CliError, positive_int

_POINTS = 40  # statistics read this many times over a run


def profile_loader(loader: Any, batches: int) -> tuple[Any, list[dict[str, Any]]]:
    """Iterate ``loader`` for ``batches`` batches (over epochs if needed).

    Returns:
        The final ``LoaderStats`` and the timeline: ``{"t": seconds, **stats.to_dict()}`` read every few batches.
    """
    if not callable(getattr(loader, "stats", None)):
        raise CliError(f"the factory returned a {type(loader).__name__}, not a torch_drt loader (no stats())")
    every = max(1, batches // _POINTS)
    start = time.perf_counter()
    timeline = [{"t": 0.0, **loader.stats().to_dict()}]
    done = 0
    while done < batches:
        progressed = False
        for _ in loader:
            done += 1
            progressed = True
            if done % every == 0 or done == batches:
                timeline.append({"t": time.perf_counter() - start, **loader.stats().to_dict()})
            if done == batches:
                break
        if not progressed:
            raise CliError("the loader yields no batches")
    return loader.stats(), timeline


def _series(timeline: list[dict[str, Any]], key: str) -> list[float]:
    """Per interval: the growth of ``key`` over it."""
    return [b.get(key, 0.0) - a.get(key, 0.0) for a, b in itertools.pairwise(timeline)]


def draw_profile(timeline: list[dict[str, Any]], path: str | Path) -> Any:
    """Draw the timeline to a PNG at ``path``: a panel per worker (each stage's share of each interval, stacked)
    and the throughput (batches/s). The PNG's text chunks ``Stages`` and ``Workers`` list the legend's stages and
    the panels' workers (comma-separated), so a picture can be checked against a fresh run without its pixels.

    Returns:
        The matplotlib ``Figure`` (its legend names the stages).

    Raises:
        CliError: when matplotlib is missing (``pip install 'torch_drt[profile]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise CliError("--png needs matplotlib: pip install 'torch_drt[profile]'") from e
    keys = set().union(*timeline)
    workers = sorted({k.split("/")[1] for k in keys if k.startswith("worker/")}, key=lambda w: (w != "main", w))
    stages = sorted({k.split("/")[1] for k in keys if k.startswith("stage/")})
    if not workers:
        workers = ["main"]
    ends = [p["t"] for p in timeline[1:]]
    spans = [max(1e-9, d) for d in _series(timeline, "t")]
    fig, axes = plt.subplots(len(workers) + 1, 1, figsize=(9, 1.6 * len(workers) + 2.4), sharex=True, squeeze=False)
    colors = {stage: plt.cm.tab10(i % 10) for i, stage in enumerate(stages)}
    for ax, worker in zip(axes[:, 0], workers):
        shares = []
        for stage in stages:  # a worker's stage time per interval, as a share of the interval
            busy = _series(timeline, f"worker/{worker}/stage/{stage}_s")
            shares.append([min(1.0, b / s) for b, s in zip(busy, spans)])
        ax.stackplot(ends, shares, labels=stages, colors=[colors[s] for s in stages], step="pre")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"worker {worker}" if worker != "main" else "calling\nthread", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", title="stage", fontsize=8)
    throughput = axes[-1, 0]
    throughput.plot(ends, [b / s for b, s in zip(_series(timeline, "batches"), spans)], color="black")
    throughput.set_ylabel("batches/s", fontsize=8)
    throughput.set_xlabel("seconds")
    fig.suptitle("where the loader's time went (share of each interval per stage)", fontsize=10)
    fig.savefig(path, dpi=100, metadata={"Stages": ",".join(labels), "Workers": ",".join(workers)})
    plt.close(fig)
    return fig


def picture_names(path: str | Path) -> dict[str, list[str]]:
    """The names a picture of ``draw_profile`` was drawn with: ``{"stages": [...], "workers": [...]}``.

    Raises:
        ValueError: when ``path`` is not a PNG drawn by ``draw_profile`` (no ``Stages`` text chunk).
    """
    from PIL import Image

    with Image.open(path) as image:
        text = dict(getattr(image, "text", {}))
    if "Stages" not in text:
        raise ValueError(f"{path}: not a torch-drt profile picture (no Stages text chunk)")
    return {key.lower(): text.get(key, "").split(",") for key in ("Stages", "Workers")}


def _factory(target: str) -> Any:
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise CliError(f"cannot import {module_name!r} (from TARGET {target!r}): {e}") from e
    factory = getattr(module, name, None)
    if not callable(factory):
        raise CliError(f"{target!r}: {module_name} has no callable {name!r}")
    return factory()


def _cache_loader(target: str, args: argparse.Namespace) -> Any:
    from torch_drt import _cli_cache_inputs as inputs
    from torch_drt.cache import DatasetRuntime, ReaderConfig
    from torch_drt.locations.location import is_url

    if not is_url(target) and not Path(target).is_dir():
        raise CliError(f"{target} is neither a cache directory, a URL nor module:function", 2)
    runtime = DatasetRuntime(1)
    dataset = runtime.cached_dataset(target, reader_config=ReaderConfig(seed=0),
                                     storage_options=inputs.storage_options(args))
    return dataset.to_torch_dataloader(collate_fn=list, batch_size=args.batch_size, num_workers=args.num_workers)


def cmd_profile(args: argparse.Namespace) -> int:
    """``torch-drt profile TARGET``: the statistics table and verdict of N batches; ``--png``/``--json`` files."""
    from torch_drt.locations.location import split_protocol

    target = args.target
    looks_like_factory = ":" in target and not split_protocol(target)[0] and not Path(target).exists()
    loader = _factory(target) if looks_like_factory else _cache_loader(target, args)
    stats, timeline = profile_loader(loader, args.batches)
    print(stats)
    if args.json:
        Path(args.json).write_text(json.dumps({"stats": stats.to_dict(), "verdict": stats.verdict(),
                                               "timeline": timeline}, indent=1))
    if args.png:
        draw_profile(timeline, args.png)
        print(f"picture: {args.png}")
    close = getattr(loader, "close", None)
    if callable(close):
        close()
    return 0


def add_profile(sub: Any) -> None:
    """Declare ``torch-drt profile``."""
    profile = sub.add_parser("profile", help="run a loader for N batches: where the time goes, and a verdict")
    profile.add_argument("target", help="a cache directory or URL, or module:function returning a torch_drt loader")
    profile.add_argument("--batches", type=positive_int, default=200, help="batches to load (default 200)")
    profile.add_argument("--batch-size", type=positive_int, default=32, help="a cache's batch size")
    profile.add_argument("--num-workers", type=int, default=2, help="a cache's loading processes")
    profile.add_argument("--png", help="write the picture here (needs matplotlib: torch_drt[profile])")
    profile.add_argument("--json", help="write the statistics, verdict and timeline here")
    add_storage_options(profile, help="fsspec options for a cache URL")
    profile.set_defaults(func=cmd_profile)
