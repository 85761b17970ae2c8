#!/usr/bin/env bash
# Instructions per image of each vision_bench variant, counted by valgrind's
# callgrind: exact and repeatable whatever else the machine runs (the
# wall-clock and CPU-time rates of vision_bench are not, on a shared box).
# Each variant runs a warm-up pass and one timed pass over N images; the
# cost of loading the images (a run that matches no variant) is subtracted.
#
#   bash vision/benches/count_instructions.sh [N] [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-200}
DATA=${2:-/tmp/peers/data}
cargo build --release -p feedline-vision --example vision_bench >/dev/null 2>&1
BIN=target/release/examples/vision_bench
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN" --data "$DATA" --limit "$N" --repeats 1 --only "$1" 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
BASE=$(count "no variant has this name")
printf '%-46s %14s\n' variant "instructions/image"
for v in "decode libjpeg-turbo" "decode zune-jpeg" "decode jpeg-decoder" "train unfused" \
         "train fused, full decode" "train fused + skip rows above" "train fused + skip + stop after crop" \
         "train fused + skip + stop + crop columns" "train fused + skip + stop + cols + DCT scale" "train plan"; do
  IR=$(count "$v")
  printf '%-46s %14d\n' "$v" $(( (IR - BASE) / (2 * N) ))
done
