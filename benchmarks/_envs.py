"""Where the benchmark side environments live (the one place that decides; stdlib only, any Python).

``$TORCH_DRT_BENCH_ENVS`` when set; else ``.bench/`` in this checkout when it already exists (git-ignored, kept
for setups made before); else the user's cache directory: ``${XDG_CACHE_HOME:-~/.cache}/torch_drt/bench``.
Nothing builds them but ``benchmarks/setup_peers.sh`` (also run by ``torch-drt bench --setup-peers``, which asks
first); a benchmark without its environment reports that peer as skipped.

    python benchmarks/_envs.py          # prints the directory
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TORCH_DRT_BENCH_ENVS"
CHECKOUT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = {
    "peers": "Python 3.11: MosaicML Streaming, LitData, Grain",
    "py313": "Python 3.13: dataloader-rs, guideloom",
}


def envs_dir() -> Path:
    """The directory holding the side environments (one subdirectory per name in ``ENVIRONMENTS``)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser().absolute()
    legacy = CHECKOUT / ".bench"
    if legacy.exists():
        return legacy
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "torch_drt" / "bench"


def env_python(name: str) -> Path:
    """The interpreter of side environment ``name`` (it may not exist)."""
    return envs_dir() / name / "bin" / "python"


def missing() -> list[str]:
    """The side environments not built yet."""
    return [name for name in ENVIRONMENTS if not env_python(name).exists()]


if __name__ == "__main__":
    print(envs_dir())
