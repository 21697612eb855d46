#!/usr/bin/env bash
# Builds the benchmark side environments (run once; the benchmarks report a peer as skipped without them):
#   .bench/peers  Python 3.11 with torch, MosaicML Streaming, LitData and Grain (they pin numpy, so not in .venv)
#   .bench/py313  Python 3.13 with dataloader-rs and guideloom (they install only there), and torch for guideloom
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .bench
if [[ ! -x .bench/peers/bin/python ]]; then
  python3.11 -m venv .bench/peers
  .bench/peers/bin/pip install -q --upgrade pip
  .bench/peers/bin/pip install -q torch==2.14.1 torchvision==0.29.1
  .bench/peers/bin/pip install -q mosaicml-streaming litdata "torchdata>=0.11,<0.12"
fi
.bench/peers/bin/python -c "import grain" 2>/dev/null || .bench/peers/bin/pip install -q grain  # bench_packing.py
PY313=$(command -v python3.13 2>/dev/null || ls ~/.pyenv/versions/3.13*/bin/python3.13 2>/dev/null | head -1 || true)
if [[ -n "${PY313}" && ! -x .bench/py313/bin/python ]]; then
  "${PY313}" -m venv .bench/py313
  .bench/py313/bin/pip install -q dataloader-rs==0.2.0 guideloom==1.1.0 numpy aiohttp torch==2.14.1 "torchdata>=0.11,<0.12"
fi
echo "side environments ready under .bench/"
