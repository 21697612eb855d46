#!/usr/bin/env bash
# Builds the benchmark side environments (run once; the benchmarks report a peer as skipped without them), in
# $TORCH_DRT_BENCH_ENVS or the default that benchmarks/_envs.py prints (outside the source tree, or a .bench/ kept):
#   peers  Python 3.11 with torch, MosaicML Streaming, LitData, Grain and datasets (they pin numpy, so not in .venv)
#   py313  Python 3.13 with dataloader-rs and guideloom (they install only there), and torch for guideloom
set -euo pipefail
cd "$(dirname "$0")/.."
ENVS=$(python3 benchmarks/_envs.py)
mkdir -p "${ENVS}"
if [[ ! -x "${ENVS}/peers/bin/python" ]]; then
  python3.11 -m venv "${ENVS}/peers"
  "${ENVS}/peers/bin/pip" install -q --upgrade pip
  "${ENVS}/peers/bin/pip" install -q torch==2.14.1 torchvision==0.29.1
  "${ENVS}/peers/bin/pip" install -q mosaicml-streaming litdata "torchdata>=0.11,<0.12"
fi
"${ENVS}/peers/bin/python" -c "import grain" 2>/dev/null || "${ENVS}/peers/bin/pip" install -q grain  # bench_packing.py
# bench_formats.py: datasets' with_format("torch") (datasets 5 needs huggingface-hub 2, which breaks Streaming's
# transformers import: keep both below)
"${ENVS}/peers/bin/python" -c "import datasets" 2>/dev/null ||
  "${ENVS}/peers/bin/pip" install -q "datasets<5" "huggingface-hub>=0.34,<1.0"
# a pyenv shim answers `command -v` but may not run: take the first interpreter that does
PY313=""
for candidate in $(command -v python3.13 2>/dev/null) $(ls ~/.pyenv/versions/3.13*/bin/python3.13 2>/dev/null); do
  if "${candidate}" -c "" 2>/dev/null; then PY313="${candidate}"; break; fi
done
if [[ -n "${PY313}" && ! -x "${ENVS}/py313/bin/python" ]]; then
  "${PY313}" -m venv "${ENVS}/py313"
  "${ENVS}/py313/bin/pip" install -q dataloader-rs==0.2.0 guideloom==1.1.0 numpy aiohttp torch==2.14.1 "torchdata>=0.11,<0.12"
fi
echo "side environments ready under ${ENVS}/"
