#!/usr/bin/env bash
# Before/after figures of two source trees on one machine: each benchmark script runs on OLD, then on NEW (the
# order alternates per script), with the same interpreter, so both sides see the same machine state.
#
#   bash benchmarks/compare_trees.sh OLD_TREE [NEW_TREE] [OUT_DIR]
#
# OLD_TREE: a checkout of the earlier commit (e.g. `git worktree add /tmp/old <rev>`); NEW_TREE defaults to this
# checkout. Each run's output goes to OUT_DIR/<script>_<side>.txt (and .json); compare them side by side.
set -u
OLD=$(cd "${1:?usage: compare_trees.sh OLD_TREE [NEW_TREE] [OUT_DIR]}" && pwd)
NEW=$(cd "${2:-$(dirname "$0")/..}" && pwd)
OUT=${3:-$(mktemp -d -t compare_trees.XXXXXX)}
PY=${PYTHON:-$NEW/.venv/bin/python}
mkdir -p "$OUT"
run() {  # side script args...
  local side=$1 script=$2 tree; shift 2
  tree=$NEW; [ "$side" = before ] && tree=$OLD
  (cd "$tree" && PYTHONPATH=$tree timeout 1500 "$PY" "benchmarks/$script.py" --json "$OUT/${script}_$side.json" "$@" \
    > "$OUT/${script}_$side.txt" 2>&1)
  echo "$(date +%T) $script $side: exit $?"
}
for s in before after; do run $s bench_cache --skip-peers; done
for s in after before; do run $s bench_cache_loader --skip-memory; done
for s in before after; do run $s bench_loader --skip-side; done
for s in after before; do run $s bench_fetch; done
for s in before after; do run $s bench_transforms --images 1000; done
echo "outputs in $OUT"
