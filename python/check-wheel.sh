#!/usr/bin/env bash
# Installs a built wheel of the package into a fresh venv with no Rust
# toolchain on PATH (PATH=/usr/bin:/bin; cargo and rustc live elsewhere),
# says how long `pip install` took, and runs python/check_wheel.py with it:
# a loop over generated .npz files and a JPEG decoded by the libjpeg-turbo
# linked into the extension. ./test.sh runs it on the wheel it builds.
#
#   python/check-wheel.sh target/wheels/feedline-*-abi3-*.whl [PYTHON]
#
# PYTHON (default: python3) makes the venv; its real path is used, so that
# a version manager's shim on PATH is not needed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WHEEL="$(realpath "$1")"
PY="$(realpath "$("${2:-python3}" -c 'import sys; print(sys._base_executable)')")"
DIR="$ROOT/target/wheel-check"
rm -rf "$DIR"
mkdir -p "$DIR"
bare() { env PATH=/usr/bin:/bin "$@"; }
if bare sh -c 'command -v cargo || command -v rustc' >/dev/null; then
  echo "check-wheel.sh: cargo or rustc is on PATH=/usr/bin:/bin; the check needs a PATH without them" >&2
  exit 2
fi
bare "$PY" -m venv "$DIR/venv"
START=$(date +%s%N)
bare "$DIR/venv/bin/pip" install -q --disable-pip-version-check "$WHEEL"
END=$(date +%s%N)
echo "check-wheel.sh: pip install $(basename "$WHEEL") (and numpy) into a fresh venv, no Rust on PATH: $(( (END - START) / 1000000 )) ms"
cd "$DIR"
bare "$DIR/venv/bin/python" "$ROOT/python/check_wheel.py" "$ROOT/vision/tests/fixtures/pil_420.jpg"
