#!/bin/bash
# The overhead scenario at two checkouts, interleaved: before, after, after, before.
#   BEFORE=<checkout of f16b6da> AFTER=<checkout of 95d7ceb> OUT=<folder> experiments/one-path/run_overhead.sh
set -e
PYTHON=${PYTHON:-$(pwd)/.venv/bin/python}
OUT=${OUT:-/tmp/overhead_cmp}
mkdir -p "$OUT"
i=0
for name in before after after before; do
  i=$((i+1))
  tree=$([ "$name" = before ] && echo "$BEFORE" || echo "$AFTER")
  (cd "$tree" && "$PYTHON" -m loadtest.bench --only overhead > "$OUT/$i-$name.log" 2>&1)
  cp "$tree/bench/results/overhead.json" "$OUT/$i-$name.json"
done
