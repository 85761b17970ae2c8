#!/usr/bin/env bash
# All tests: the Rust workspace, then the Python package (built into a venv
# under target/, created on first use, and its pytest suite).
set -euo pipefail
cd "$(dirname "$0")"
cargo test --workspace --release
VENV="${FEEDLINE_VENV:-target/py-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
# The extension shares the workspace's target dir (its dependencies are built once).
CARGO_TARGET_DIR="$PWD/target" "$VENV/bin/pip" install -q ./python "pytest==8.3.4" "numpy>=1.24,<3"
"$VENV/bin/python" -m pytest -q python/tests
