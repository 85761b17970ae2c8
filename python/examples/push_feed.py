"""Feeding from Python (Paddle's PyArrayFeedQueue): producer threads push
instances and ready-made batches into a push-mode loader; the training loop
iterates the loader as usual.

    python python/examples/push_feed.py --instances 20000

`feed.push` blocks while the pipeline is full, with the GIL released, so the
consumer (and any other Python thread) runs meanwhile; `feed.close()` ends
the stream after what was pushed.
"""

import argparse
import threading
import time

import numpy as np

import feedline

SCHEMA = {"image": ("uint8", [3, 32, 32]), "label": ("int64", [])}


def make(producer, i):
    rng = np.random.default_rng(producer * 1_000_003 + i)
    return rng.integers(0, 256, (3, 32, 32), dtype=np.uint8), (producer * 7919 + i * 31) % 10


def instance_producer(feed, n):
    """Pushes instances one at a time: the pipeline shuffles and batches them."""
    for i in range(n):
        image, label = make(0, i)
        feed.push({"image": image, "label": label})


def batch_producer(feed, n, batch):
    """Pushes ready-made batches: they reach the consumer as they are."""
    for start in range(0, n, batch):
        rows = [make(1, i) for i in range(start, min(n, start + batch))]
        feed.push_batch({"image": np.stack([r[0] for r in rows]),
                         "label": np.array([r[1] for r in rows], np.int64)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=4096, help="per producer")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--capacity", type=int, default=8)
    ap.add_argument("--step-ms", type=float, default=0.5, help="simulated training step")
    args = ap.parse_args()

    loader, feed = feedline.Loader.with_feed(
        schema=SCHEMA, batch_size=args.batch_size, capacity=args.capacity, shuffle=512)
    producers = [
        threading.Thread(target=instance_producer, args=(feed, args.instances)),
        threading.Thread(target=batch_producer, args=(feed, args.instances, args.batch_size)),
    ]
    for p in producers:
        p.start()

    def close_when_done():
        for p in producers:
            p.join()
        feed.close()

    closer = threading.Thread(target=close_when_done)
    closer.start()

    t0 = time.perf_counter()
    seen, histogram = 0, np.zeros(10, np.int64)
    with loader:
        for batch in loader:
            histogram += np.bincount(batch["label"], minlength=10)
            seen += batch.size
            time.sleep(args.step_ms / 1000)  # the training step
        stats = loader.stats()
    closer.join()
    dt = time.perf_counter() - t0
    print(f"consumed {seen} instances in {dt:.2f} s; labels: {histogram.tolist()}")
    print(f"producers: {feed.stats() or 'closed'}; loader: {stats['summary']}")
    assert seen == 2 * args.instances


if __name__ == "__main__":
    main()
