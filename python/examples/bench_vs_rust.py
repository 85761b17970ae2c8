"""Throughput of the feedline pipeline iterated from Python vs the same
pipeline in Rust (`feedline bench`), and the time one next() costs under the
GIL when the batch is already waiting.

    cargo run --release -p feedline-cli -- gen --preset small --out data/small
    python python/examples/bench_vs_rust.py data/small/*.tfrecord --feedline target/release/feedline

Each figure is the best of --repeats runs (records/s over whole passes).
"""

import argparse
import json
import statistics
import subprocess
import time

import feedline


def python_rate(files, args):
    """Records/s iterating the loader from Python, touching every field:
    from before the loader is made to its last batch (as `feedline bench`'s
    fresh-loader passes count; the teardown is not counted by either)."""
    t0 = time.perf_counter()
    n = 0
    loader = feedline.Loader(files=files, batch_size=args.batch_size, shuffle=args.shuffle,
                             readers=args.readers, passes=1, seed=1, rank=0, world_size=1)
    byte_fields = {k for k, v in loader.schema.items() if v[0] == "bytes"}
    for batch in loader:
        for name in batch:
            if args.bytes_view and name in byte_fields:
                batch.bytes_buffer(name)  # no copies
            else:
                batch[name]  # bytes fields: a bytes object per string (copies)
        n += batch.size
    dt = time.perf_counter() - t0
    loader.close()
    return n / dt


def rust_rate(files, args):
    """Records/s of `feedline bench` with the same settings."""
    cmd = [args.feedline, "bench", "--batch", str(args.batch_size), "--shuffle",
           str(args.shuffle), "--readers", str(args.readers), "--warmup", "0",
           "--repeats", "1", "--json"] + files
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    return doc


def gil_time(files, args):
    """Per-batch time of next() (and of taking every field) with the batch ready."""
    cap = 64
    with feedline.Loader(files=files, batch_size=args.batch_size, shuffle=0,
                         readers=args.readers, passes=1, capacity=cap,
                         rank=0, world_size=1) as loader:
        it = iter(loader)
        next(it)
        # Wait for the queue to fill (an event, polled).
        deadline = time.monotonic() + 60
        while loader.stats()["feed_queue"]["depth"] < cap and time.monotonic() < deadline:
            time.sleep(0.01)
        nexts, fields = [], []
        for _ in range(cap):
            t0 = time.perf_counter()
            b = next(it)
            t1 = time.perf_counter()
            for name in b:
                b[name]
            t2 = time.perf_counter()
            nexts.append(t1 - t0)
            fields.append((t2 - t1) / len(b))
    return statistics.median(nexts), statistics.median(fields)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--feedline", help="path of the feedline binary (skip the Rust run if absent)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--shuffle", type=int, default=10_000)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bytes-view", action="store_true",
                    help="take bytes fields with Batch.bytes_buffer (no copies), not as bytes objects")
    ap.add_argument("--no-gil", action="store_true",
                    help="skip the next() timing (it needs at least 65 batches in a pass)")
    args = ap.parse_args()
    py, rust = [], []
    for _ in range(args.repeats):  # interleaved: load from elsewhere hits both alike
        py.append(python_rate(args.files, args))
        if args.feedline:
            rust.append(rust_rate(args.files, args)["records_per_s"])
    print("python records/s: best {:,.0f}, median {:,.0f}".format(max(py), statistics.median(py)))
    if rust:
        print("rust   records/s: best {:,.0f}, median {:,.0f}".format(max(rust), statistics.median(rust)))
        print(f"python / rust: best {max(py) / max(rust):.1%}, "
              f"median {statistics.median(py) / statistics.median(rust):.1%}")
    if args.no_gil:
        return
    nxt, field = gil_time(args.files, args)
    print(f"next() with the batch waiting: {nxt * 1e6:.1f} us; per field taken: {field * 1e6:.1f} us")


if __name__ == "__main__":
    main()
