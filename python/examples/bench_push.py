"""Rate of feeding from Python: instances/s through `feed.push` (one at a
time) and `feed.push_batch` (ready-made batches) from one producer thread,
with the training loop iterating the loader on the main thread.

    python python/examples/bench_push.py --instances 100000
"""

import argparse
import threading
import time

import numpy as np

import feedline


def rate(n, batched, batch_size, capacity):
    loader, feed = feedline.Loader.with_feed(
        schema={"x": ("float32", [64]), "y": ("int64", [])},
        batch_size=batch_size, capacity=capacity)

    def produce():
        if batched:
            xs = np.ones((batch_size, 64), np.float32)
            ys = np.arange(batch_size)
            for _ in range(n // batch_size):
                feed.push_batch({"x": xs, "y": ys})
        else:
            x = np.ones(64, np.float32)
            for i in range(n):
                feed.push({"x": x, "y": i})
        feed.close()

    t0 = time.perf_counter()
    producer = threading.Thread(target=produce)
    producer.start()
    got = sum(b.size for b in loader)
    producer.join()
    dt = time.perf_counter() - t0
    loader.close()
    assert got == (n // batch_size) * batch_size if batched else got == n
    return got / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=100_000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--capacity", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for batched, name in ((False, "push"), (True, "push_batch")):
        n = args.instances * (10 if batched else 1)
        best = max(rate(n, batched, args.batch_size, args.capacity) for _ in range(args.repeats))
        print(f"{name}: {best:,.0f} instances/s")


if __name__ == "__main__":
    main()
