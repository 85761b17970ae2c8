#!/usr/bin/env bash
# `--shuffle-mode global` and `block` against `buffer` on the peers'
# workloads A and B (shards made by ../shared/peers/gen_data.py, or any
# small-*/large-* TFRecord files), page cache warm, the modes interleaved:
# buffer, global, block, buffer, global, block, three timed repeats each
# (block mode's blocks are --shuffle records, as buffer mode's pool). One
# line per repeat.
#
#   benches/global_vs_buffer.sh DATA_DIR [A|B|"A B"]
#
# MODES: the modes, in the order of each round (default "buffer global block").
# FEEDLINE: the command (default target/release/feedline); IDX: the index
# directory (default a new temporary one).
set -euo pipefail
D=${1:?usage: benches/global_vs_buffer.sh DATA_DIR [A|B|"A B"]}
WORKLOADS=${2:-A B}
F=${FEEDLINE:-target/release/feedline}
IDX=${IDX:-$(mktemp -d)}
cat "$D"/*.tfrecord > /dev/null
run() { # workload mode args...
  local w=$1 mode=$2; shift 2
  "$F" bench "$@" --shuffle-mode "$mode" --index-dir "$IDX" --repeats 3 --json -q 2>/dev/null \
    | W=$w M=$mode python3 -c '
import json, os, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    o = json.loads(line)
    if o.get("phase") != "timed":
        continue
    print(os.environ["W"], os.environ["M"], "run", o["run"], "records/s %.0f" % o["records_per_s"],
          "cpu_s %.2f" % o["cpu_seconds"], "peak_rss_mb", o["peak_rss_mb"])'
}
for w in $WORKLOADS; do
  for mode in ${MODES:-buffer global block} ${MODES:-buffer global block}; do
    if [ "$w" = A ]; then run A "$mode" "$D"/small-*.tfrecord --batch 256 --shuffle 10000
    else run B "$mode" "$D"/large-*.tfrecord --batch 32 --shuffle 1000; fi
  done
done
