#!/bin/bash
# before, after, after, before: the overhead scenario at f16b6da and at main, interleaved
i=0
for tree in /tmp/before51 /work/main /work/main /tmp/before51; do
  i=$((i+1))
  name=$( [ "$tree" = /tmp/before51 ] && echo before || echo after )
  cd $tree && flock /tmp/stack.lock /work/main/.venv/bin/python -m loadtest.bench --only overhead > ${OUT:-/tmp/overhead_cmp}/$i-$name.log 2>&1
  cp $tree/bench/results/overhead.json ${OUT:-/tmp/overhead_cmp}/$i-$name.json
done
echo done > ${OUT:-/tmp/overhead_cmp}/finished
