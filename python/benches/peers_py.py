"""feedline from Python as one more loader in the peers' benchmark harness
(/work/shared/peers, `run_peers.sh` with PEERS_EXTRA=benches/peers-jobs.tsv).

The same pipelines as the Rust adapter's jobs `A_feedline_r2`,
`B_feedline_r2` and `C_feedline_w2` (`benches/peers.rs`): the harness's
TFRecord shards from its manifest.json, the presets' schema (C's inferred),
a fresh `feedline.Loader` per pass (seed = pass index, as the adapter's
`--seed 0` + pass), feed-queue capacity 4, the harness's shuffle and batch
(A 10,000 / 256, B 1,000 / 32, C 1,000 / 64), for C the built-in transform
by name (`--transform imagenet-train`, 2 workers) -- but iterated from
Python, every batch checked by the harness's own `common.Checker` (record
count, sum of the labels, probe sum: each record exactly once; C's layout)
and every pass timed and printed by the harness's `common.run_passes`
(RESULT lines, RSS, CPU).

Each RESULT line also carries the time per batch under the GIL:
`gil_us_next` (what `next()` held it, less its waits for a batch, measured by
the loader itself: `loader.stats()["python"]`, a mean over the pass),
`gil_us_fields` (the two field look-ups, which make the numpy views: their
mean over the pass's batches; `gil_us_fields_p50` / `_p90` their median and
90th percentile) and the sums `gil_us_per_batch` (mean) and
`gil_us_per_batch_p50` (`gil_us_next` + the look-ups' median). The target is
< 5 us. The look-ups are wall time: a batch whose look-ups were preempted
(the main thread descheduled while it holds the GIL) counts that time too,
so a few such batches can dominate a pass's mean.

    # the package in a venv (./test.sh makes target/py-venv and installs it there):
    CARGO_TARGET_DIR=$PWD/target target/py-venv/bin/pip install ./python
    target/py-venv/bin/python python/benches/peers_py.py --dataset A --data /tmp/peers/data
"""

import os
import sys
import time


def _harness_dir():
    """Where the harness's common.py is: $PEERS_HARNESS, else ../shared/peers
    beside the repository or beside the current directory (where the team
    keeps it)."""
    env = os.environ.get("PEERS_HARNESS")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tried = [os.path.join(os.path.dirname(d), "shared", "peers") for d in (repo, os.getcwd())]
    for d in tried:
        if os.path.isfile(os.path.join(d, "common.py")):
            return d
    sys.exit(f"peers_py.py: the harness's common.py is not in {' or '.join(tried)}: "
             "set PEERS_HARNESS to its directory")


sys.path.insert(0, _harness_dir())
import common  # noqa: E402  (the harness: Checker, run_passes, manifest)

import feedline  # noqa: E402

# The adapter's schemas (feedline::synthetic::preset_schema; C's inferred from
# the files) and field names.
SCHEMA = {
    "A": {"x": ("float32", [64]), "y": ("int64", [1])},
    "B": {"image": ("uint8", [224 * 224 * 3]), "label": ("int64", [1])},
    "C": None,
}
FIELDS = {"A": ("x", "y"), "B": ("image", "label"), "C": ("image/encoded", "image/class/label")}


class Epoch:
    """One pass: a fresh loader, iterated as (features, labels) pairs; its
    close() is the pass's teardown (timed apart by run_passes). With
    `--api torch` the loader is a feedline.torch.DataLoader (pin_memory off:
    CPU tensors viewing the batches) and the pairs are torch tensors (the
    harness's Checker reads them through numpy's __array__, no copy)."""

    def __init__(self, args, files, seed, extra):
        settings = dict(
            files=files, batch_size=args.batch, shuffle=args.shuffle, seed=seed,
            passes=1, readers=args.readers, capacity=args.capacity,
            deterministic=args.deterministic, rank=0, world_size=1,
            schema=SCHEMA[args.dataset], transform=args.transform,
            workers=args.workers if args.transform else None)
        if args.api == "torch":
            import feedline.torch as feedline_torch
            self.adapter = feedline_torch.DataLoader(pin_memory=False, **settings)
            self.loader = self.adapter.loader
        else:
            self.adapter = None
            self.loader = feedline.Loader(**settings)
        self.fields = FIELDS[args.dataset]
        self.extra = extra

    def __iter__(self):
        feat, label = self.fields
        it = iter(self.adapter if self.adapter is not None else self.loader)
        clock = time.perf_counter_ns
        looks = []
        for batch in it:
            t0 = clock()
            pair = (batch[feat], batch[label])
            looks.append(clock() - t0)
            yield pair
        # Under the GIL per batch: next() (the loader's own clock: a mean) +
        # the look-ups (timed per batch: mean, and the median and 90th
        # percentile over the pass's batches).
        nxt = self.loader.stats()["python"]["next_gil_us"]
        looks.sort()
        n = max(len(looks), 1)
        mean = sum(looks) / n / 1e3
        p50 = looks[len(looks) // 2] / 1e3 if looks else 0.0
        p90 = looks[min(len(looks) - 1, len(looks) * 9 // 10)] / 1e3 if looks else 0.0
        self.extra["gil_us_per_batch"] = round(nxt + mean, 2)
        self.extra["gil_us_per_batch_p50"] = round(nxt + p50, 2)
        self.extra["gil_us_next"] = round(nxt, 2)
        self.extra["gil_us_fields"] = round(mean, 2)
        self.extra["gil_us_fields_p50"] = round(p50, 2)
        self.extra["gil_us_fields_p90"] = round(p90, 2)

    def close(self):
        self.loader.close()


def main():
    ap = common.parser(__doc__.splitlines()[0])
    # The Rust adapter's seed (0; pass i uses seed + i), not common.py's 1234.
    ap.set_defaults(variant=None, seed=0)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--shuffle", type=int, help="default: the harness's (A 10,000, B 1,000)")
    ap.add_argument("--batch", type=int, help="default: the harness's (A 256, B 32)")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--transform", help="a built-in transform (C: imagenet-train), as the CLI's --transform")
    ap.add_argument("--workers", type=int, default=2, help="transform workers (with --transform)")
    ap.add_argument("--api", choices=["numpy", "torch"], default="numpy",
                    help="iterate feedline.Loader (numpy views) or feedline.torch.DataLoader "
                         "(CPU tensors, pin_memory=False)")
    # common.parser requires --variant; here it defaults to the Rust adapter's name.
    for a in ap._actions:
        if a.dest == "variant":
            a.required = False
    args = ap.parse_args()
    if args.dataset == "C" and not args.transform:
        ap.error("dataset C is JPEGs: give --transform imagenet-train (decode, RandomResizedCrop 224, "
                 "flip, normalise to f32 CHW)")
    if args.shuffle is None:
        args.shuffle = common.SHUFFLE[args.dataset]
    if args.batch is None:
        args.batch = common.BATCH[args.dataset]
    if args.variant is None:
        args.variant = f"r{args.readers}_s{args.shuffle}_b{args.batch}"
        if args.deterministic:
            args.variant += "_det"
        if args.capacity != 4:
            args.variant += f"_cap{args.capacity}"
        if args.transform:
            args.variant += f"_w{args.workers}"
        if args.api == "torch":
            args.variant += "_torch"
    files = common.tfrecord_files(args.data, args.dataset)
    # The RESULT extras; the gil_us_* ones are set at each pass's end.
    extra = {"api": "python" if args.api == "numpy" else "python-torch",
             "version": feedline.__version__}

    def epoch(i):
        return Epoch(args, files, args.seed + i, extra)

    return common.run_passes(args, "feedline-python", epoch, extra)


if __name__ == "__main__":
    sys.exit(main())
