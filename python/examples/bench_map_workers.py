"""What free-threaded CPython changes for a Python `map=`: instances/s of a
pass whose map is pure-Python work, with 1 and with N transform workers.

With the GIL, the workers take turns in the interpreter: more workers do not
run the map faster. On a free-threaded CPython (3.13t, see
python/free-threaded-python.sh) they run it at once, up to one core each.

    python python/examples/bench_map_workers.py --workers 1 2
    target/py313t-venv/bin/python python/examples/bench_map_workers.py --workers 1 2

Data: generated .npz shards (--files x --rows instances, x: float32[16],
y: int64). The map sums `--work` squares in a Python loop per instance and
adds the result to x. Each figure is the best of --repeats passes; every
pass checks that each instance came through once (by y).
"""

import argparse
import os
import sys
import sysconfig
import tempfile
import time

import numpy as np

import feedline


def make_data(root, files, rows):
    paths = []
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        x = np.zeros((rows, 16), np.float32)
        p = os.path.join(root, f"part{f}.npz")
        np.savez(p, x=x, y=ids)
        paths.append(p)
    return paths


def one_pass(paths, workers, work, total):
    def busy(inst, rng):
        s = 0
        for i in range(work):
            s += i * i
        inst["x"] += s % 7
        return inst

    t0 = time.perf_counter()
    seen = []
    with feedline.Loader(files=paths, batch_size=64, shuffle=0, readers=1, map=busy,
                         workers=workers, rank=0, world_size=1) as loader:
        for b in loader:
            seen.extend(b["y"].tolist())
    dt = time.perf_counter() - t0
    if sorted(seen) != list(range(total)):
        sys.exit(f"workers={workers}: {len(seen)} instances, not each of {total} once")
    return total / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--work", type=int, default=2000, help="loop steps per instance")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ft = sysconfig.get_config_var("Py_GIL_DISABLED") == 1
    gil = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
    print(f"python {sys.version.split()[0]} free-threaded build: {ft}, GIL on: {gil}, "
          f"cores: {os.cpu_count()}")
    total = args.files * args.rows
    with tempfile.TemporaryDirectory() as root:
        paths = make_data(root, args.files, args.rows)
        base = None
        for w in args.workers:
            best = max(one_pass(paths, w, args.work, total) for _ in range(args.repeats))
            base = base or best
            print(f"workers {w}: {best:,.0f} instances/s ({best / base:.2f}x workers "
                  f"{args.workers[0]})")


if __name__ == "__main__":
    main()
