#!/usr/bin/env bash
# Workload C (the JPEGs of gen_images.py) against a grid of readers 1-2 x
# workers 1-3 x batches in flight 2, 4, 16, with --autotune before and after
# each round; then tuned passes (--multi-pass, one loader for all passes)
# of --autotune against the best cells. docs/performance.md quotes it.
#   benches/autotune_grid.sh DATA_DIR [ROUNDS]     (FEEDLINE=path/to/feedline)
set -euo pipefail
data=${1:?usage: autotune_grid.sh DATA_DIR [ROUNDS]}
rounds=${2:-2}
F=${FEEDLINE:-$(dirname "$0")/../target/release/feedline}
files=("$data"/jpeg-*.tfrecord)
common=(--batch 64 --shuffle 1000 --transform imagenet-train --json)
first() {
  "$F" bench "${files[@]}" "${common[@]}" --warmup 0 --repeats 1 "$@" 2>/dev/null | python3 -c "
import json, sys
v = json.load(sys.stdin)
a = v.get('autotune') or {}
print('first %-45s %6.0f images/s  tuned %s' % (' '.join(sys.argv[1:]), v['records_per_s'], json.dumps(a.get('values'))))" "$@"
}
tuned() {
  "$F" bench "${files[@]}" "${common[@]}" --multi-pass --warmup 1 --repeats 3 "$@" 2>/dev/null | python3 -c "
import json, statistics, sys
t = [p for p in map(json.loads, filter(str.strip, sys.stdin)) if p.get('phase') == 'timed']
a = t[-1].get('autotune') or {}
print('multi %-45s median %6.0f  %s  tuned %s' % (' '.join(sys.argv[1:]), statistics.median(p['records_per_s'] for p in t), [round(p['records_per_s']) for p in t], json.dumps(a.get('values'))))" "$@"
}
for _ in $(seq "$rounds"); do
  first --autotune
  for r in 1 2; do for w in 1 2 3; do for b in 2 4 16; do
    first --readers $r --workers $w --batches-in-flight $b
  done; done; done
  first --autotune
done
for _ in $(seq "$rounds"); do
  tuned --autotune
  for cell in "2 2 4" "1 2 4" "2 3 4" "2 2 16"; do
    set -- $cell
    tuned --readers "$1" --workers "$2" --batches-in-flight "$3"
  done
done
