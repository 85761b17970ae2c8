#!/usr/bin/env bash
# Prints the path of a free-threaded CPython 3.13 (`python3.13t`, built with
# --disable-gil), building it first when there is none: the package's pytest
# suite runs under it too (./test.sh), with the GIL off.
#
# Which interpreter: $FEEDLINE_FT_PYTHON if set (any free-threaded CPython
# ≥ 3.13), else python3.13t on PATH, else the one this script built before
# under target/cpython-3.13t, else it builds that one: CPython 3.13.5's
# source from Debian's archive (the upstream tarball, checked against its
# SHA-256; if Debian's pool no longer has it, the current python3.13 source
# package of trixie through apt-get), configured --disable-gil, built with
# make -j$(nproc) (about 3 minutes on 2 cores) and installed under
# target/cpython-3.13t. Build messages go to target/cpython-3.13t.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
is_ft() { "$1" -c 'import sys, sysconfig; sys.exit(0 if sysconfig.get_config_var("Py_GIL_DISABLED") == 1 else 1)' 2>/dev/null; }

if [ -n "${FEEDLINE_FT_PYTHON:-}" ]; then
  if ! is_ft "$FEEDLINE_FT_PYTHON"; then
    echo "free-threaded-python.sh: FEEDLINE_FT_PYTHON=$FEEDLINE_FT_PYTHON is not a free-threaded CPython (Py_GIL_DISABLED is not 1)" >&2
    exit 2
  fi
  echo "$FEEDLINE_FT_PYTHON"
  exit 0
fi
if command -v python3.13t >/dev/null 2>&1 && is_ft "$(command -v python3.13t)"; then
  command -v python3.13t
  exit 0
fi
PREFIX="$ROOT/target/cpython-3.13t"
if [ -x "$PREFIX/bin/python3.13t" ] && is_ft "$PREFIX/bin/python3.13t"; then
  echo "$PREFIX/bin/python3.13t"
  exit 0
fi

LOG="$ROOT/target/cpython-3.13t.log"
mkdir -p "$ROOT/target"
: >"$LOG"
echo "free-threaded-python.sh: building CPython 3.13 with --disable-gil into $PREFIX (log: $LOG)" >&2

# The headers of the modules pip needs (ssl, zlib) and the usual others.
missing=()
for p in libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "free-threaded-python.sh: apt-get install ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >>"$LOG" 2>&1
  apt-get install -y -qq "${missing[@]}" >>"$LOG" 2>&1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
TARBALL="python3.13_3.13.5.orig.tar.xz"
SHA256="93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640"
URL="http://deb.debian.org/debian/pool/main/p/python3.13/$TARBALL"
if python3 - "$URL" "$WORK/$TARBALL" "$SHA256" >>"$LOG" 2>&1 <<'EOF'
import hashlib, sys, urllib.request
url, dest, want = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=120).read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"{url}: SHA-256 {got}, expected {want}")
open(dest, "wb").write(data)
EOF
then
  SRC_TAR="$WORK/$TARBALL"
else
  # Not in the pool any more: trixie's current python3.13 source package.
  echo "free-threaded-python.sh: $URL not available, asking apt-get source for trixie's python3.13" >&2
  mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$WORK/apt/sources.list"
  APT=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache")
  apt-get "${APT[@]}" update -qq >>"$LOG" 2>&1
  (cd "$WORK" && apt-get "${APT[@]}" source --download-only python3.13 >>"$LOG" 2>&1)
  SRC_TAR="$(ls "$WORK"/python3.13_*.orig.tar.* | head -1)"
fi
tar -C "$WORK" -xf "$SRC_TAR"
SRC="$(ls -d "$WORK"/Python-3.13.*/ | head -1)"
(
  cd "$SRC"
  ./configure --disable-gil --prefix="$PREFIX" --disable-test-modules
  make -j"$(nproc)"
  make install
) >>"$LOG" 2>&1 || {
  echo "free-threaded-python.sh: the build failed; the last lines of $LOG:" >&2
  tail -20 "$LOG" >&2
  exit 1
}
if ! is_ft "$PREFIX/bin/python3.13t"; then
  echo "free-threaded-python.sh: $PREFIX/bin/python3.13t was built but is not free-threaded" >&2
  exit 1
fi
echo "$PREFIX/bin/python3.13t"
