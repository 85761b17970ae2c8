"""A training loop over feedline.torch.DataLoader (CPU tensors, pin_memory
off) against the same loop over the plain feedline.Loader (numpy views), on
the same files and settings, passes alternating (numpy, torch, numpy, ...)
so that both see the same machine load; prints each pass's batches/s and the
main thread's CPU time per batch (what the adapter adds: one DLPack import
per field, in the native iteration), then the ratio of the medians.

    python python/benches/bench_torch_adapter.py --dataset A --data /tmp/peers/data --rounds 5
    python python/benches/bench_torch_adapter.py --dataset C --data /tmp/peers/data --rounds 3

The harness's files: A (32 TFRecord shards of {x: float[64], y: int64}),
shuffle 10,000, batch 256, 2 readers; C (16 TFRecord shards of JPEGs),
shuffle 1,000, batch 64, 1 reader, transform imagenet-train on 2 workers —
the settings of A_feedline_py_r2 / C_feedline_py_w2 in benches/peers-jobs.tsv.
"""

import argparse
import json
import os
import statistics
import time

import feedline
import feedline.torch as ft

SETTINGS = {
    "A": dict(shuffle=10_000, batch_size=256, readers=2, capacity=4,
              schema={"x": ("float32", [64]), "y": ("int64", [1])}),
    "C": dict(shuffle=1_000, batch_size=64, readers=1, capacity=4, transform="imagenet-train",
              workers=2),
}
FIELDS = {"A": ("x", "y"), "C": ("image/encoded", "image/class/label")}


def files(data, ds):
    """The TFRecord shards the harness's manifest.json lists (else, for C
    before its manifest entry is written, jpeg-*.tfrecord)."""
    with open(os.path.join(data, "manifest.json")) as f:
        m = json.load(f)
    if ds in m:
        return [os.path.join(data, n) for n in m[ds]["files"]]
    prefix = {"A": "small-", "C": "jpeg-"}[ds]
    return sorted(os.path.join(data, n) for n in os.listdir(data)
                  if n.startswith(prefix) and n.endswith(".tfrecord"))


def one_pass(api, paths, ds, seed, passes=1):
    kw = dict(SETTINGS[ds], files=paths, seed=seed, passes=passes, rank=0, world_size=1)
    feat, label = FIELDS[ds]
    t0 = time.perf_counter()
    c0 = time.thread_time()
    p0 = time.process_time()
    if api == "torch":
        loader = ft.DataLoader(pin_memory=False, **kw)
    else:
        loader = feedline.Loader(**kw)
    batches = records = 0
    for b in loader:
        x, y = b[feat], b[label]
        records += y.shape[0]
        batches += 1
    cpu = time.thread_time() - c0
    dt = time.perf_counter() - t0
    proc = time.process_time() - p0
    loader.close()
    return batches / dt, cpu / max(batches, 1) * 1e6, records, batches / proc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=["A", "C"], default="A")
    ap.add_argument("--data", default="/tmp/peers/data")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=1,
                    help="passes per round (one loader), for a few shards on a fast machine")
    args = ap.parse_args()
    paths = files(args.data, args.dataset)
    one_pass("torch", paths, args.dataset, 0)  # warm-up: page cache, torch import, counts
    rates = {"numpy": [], "torch": []}
    cpus = {"numpy": [], "torch": []}
    per_cpu = {"numpy": [], "torch": []}
    for r in range(args.rounds):
        for api in ("numpy", "torch") if r % 2 == 0 else ("torch", "numpy"):
            bps, cpu_us, records, bpc = one_pass(api, paths, args.dataset, r + 1,
                                                args.passes)
            rates[api].append(bps)
            cpus[api].append(cpu_us)
            per_cpu[api].append(bpc)
            print(f"round {r} {api:5s}: {bps:8.1f} batches/s, {bpc:8.1f} batches per CPU-second "
                  f"(all threads), main thread {cpu_us:7.1f} us CPU per batch, {records} records",
                  flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(f"median batches/s: Loader {med['numpy']:.1f}, feedline.torch.DataLoader "
          f"{med['torch']:.1f}: {100 * med['torch'] / med['numpy']:.1f} %")
    pc = {k: statistics.median(v) for k, v in per_cpu.items()}
    print(f"median batches per CPU-second (the process, all threads; what bounds batches/s on "
          f"a busy CPU): Loader {pc['numpy']:.1f}, feedline.torch.DataLoader {pc['torch']:.1f}: "
          f"{100 * pc['torch'] / pc['numpy']:.1f} %")
    print(f"median main-thread CPU per batch: Loader {cpu['numpy']:.1f} us, "
          f"feedline.torch.DataLoader {cpu['torch']:.1f} us")


if __name__ == "__main__":
    main()
