"""Global shuffle against its peers (issue 41), on workloads A and C.

Workload A (`--workload A`, the default): the peers'
harness shards (`gen_data.py --writer hand`: `small-NNNNN.tfrecord`, each
record a tf.train.Example {"x": 64 float32, "y": 1 int64}, and the same
values as `small-NNNNN-x.npy` / `small-NNNNN-y.npy`), one pass of a fresh
loader in a seeded global order, batches of 256 as numpy arrays, 2 worker
processes (or 2 readers) each:

- feedline: `feedline.Loader(files=TFRECORDS, shuffle_mode="global")`
  (or `"block"`, `--loader feedline-block`), reading the TFRecord files
  by position through their record index and parsing each Example;
- grain: `grain.MapDataset.source(ArrayRecordDataSource(...)).shuffle(seed)
  .batch(256).to_iter_dataset().mp_prefetch(2 workers)` over ArrayRecord
  files of the same records (group_size:1, for reads by index);
- mosaic: `streaming.StreamingDataset(local=MDS, shuffle=True,
  shuffle_algo="py1e", shuffle_seed=seed, batch_size=256)` under a torch
  `DataLoader(batch_size=256, num_workers=2)`, over MDS shards of them;
- hf: Hugging Face `datasets.load_from_disk(ARROW).shuffle(seed=seed)
  .with_format("numpy")` under a torch `DataLoader(batch_size=256,
  num_workers=2)`.

The peers' files hold each record's values raw (x as 256 bytes of float32,
y as an int64), so a peer parses nothing, where feedline parses each
Example: a comparison in the peers' favour. They are written once (untimed)
under --cache, from the .npy twins.

Workload C (`--workload C`): the 6,000 JPEGs of the peers' `gen_images.py`
(`jpeg-NNNNN.tfrecord`, and the same bytes in `jpeg-NNNNN.tar`), each
decoded, RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3, bilinear),
flipped half the time and normalised with ImageNet's mean and std into
float32 [3, 224, 224], batches of 64: feedline with
`transform="imagenet-train", workers=2` over the TFRecord files; each peer
with the same steps in Python (PIL, numpy) in its 2 worker processes, over
its own files of the JPEG bytes and labels (read from the tars).

Each run checks what it delivered: every record exactly once (by the
label's and the first float's sums against the .npy files), and that the
order is not the files' (neighbour distance of the record ids is not
computed for the peers: they do not say which record a row was).

    python bench_global_peers.py --data /work/benchdata --loader feedline|feedline-block|grain|mosaic|hf
        [--workload A|C] [--cache DIR] [--shards N] [--seed S]

One RESULT line per run: loader, records, seconds, records/s, CPU seconds
of the process and its children.
"""
import argparse
import glob
import json
import os
import resource
import sys
import time

import numpy as np

BATCH = 256
WORKERS = 2


def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def shards(data, n):
    files = sorted(glob.glob(os.path.join(data, "small-[0-9][0-9][0-9][0-9][0-9].tfrecord")))
    if not files:
        raise SystemExit(f"{data}: no small-NNNNN.tfrecord shards (run gen_data.py --writer hand)")
    return files[:n] if n else files


def npy_of(tfrecord):
    stem = tfrecord[: -len(".tfrecord")]
    return np.load(stem + "-x.npy", mmap_mode="r"), np.load(stem + "-y.npy", mmap_mode="r")


def expected(files):
    """(records, sum of labels, sum of the first float's bits) of the shards."""
    n = ys = xs = 0
    for f in files:
        x, y = npy_of(f)
        n += len(y)
        ys += int(np.asarray(y).sum())
        xs += int(np.asarray(x[:, 0]).view(np.uint32).astype(np.uint64).sum())
    return n, ys, xs


class Tally:
    """What a run delivered: records, label and first-float sums, and the
    labels' order (compared with the files' order)."""

    def __init__(self):
        self.n = self.ys = self.xs = 0
        self.first = []

    def add(self, x, y):
        x = np.asarray(x, dtype=np.float32).reshape(-1, 64)
        y = np.asarray(y, dtype=np.int64).reshape(-1)
        assert len(x) == len(y), (x.shape, y.shape)
        self.n += len(y)
        self.ys += int(y.sum())
        self.xs += int(x[:, 0].view(np.uint32).astype(np.uint64).sum())
        if len(self.first) < 4096:
            self.first.extend(x[:, 0].tolist())


def run_feedline(files, seed, mode):
    import feedline

    loader = feedline.Loader(files=files, batch_size=BATCH, passes=1, seed=seed,
                             shuffle_mode=mode, readers=WORKERS, drop_last=False)
    t = Tally()
    for b in loader:
        t.add(b["x"], b["y"])
    return t, {"version": getattr(feedline, "__version__", "?"), "mode": mode}


def arrayrecord_files(files, cache):
    from array_record.python.array_record_module import ArrayRecordWriter

    out = []
    for f in files:
        path = os.path.join(cache, "arrayrecord", os.path.basename(f)[: -len(".tfrecord")] + ".array_record")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            x, y = npy_of(f)
            x, y = np.asarray(x), np.asarray(y)
            w = ArrayRecordWriter(path + ".tmp", "group_size:1")
            for i in range(len(y)):
                w.write(x[i].tobytes() + y[i].tobytes())
            w.close()
            os.replace(path + ".tmp", path)
        out.append(path)
    return out


def unpack_rows(rows):
    raw = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), 264)
    return raw[:, :256].view(np.float32), raw[:, 256:].view(np.int64).reshape(-1)


def run_grain(files, seed, cache):
    import grain

    src = grain.sources.ArrayRecordDataSource(arrayrecord_files(files, cache))
    d = grain.MapDataset.source(src).shuffle(seed=seed).batch(BATCH, batch_fn=unpack_rows)
    it = iter(d.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS)))
    t = Tally()
    for x, y in it:
        t.add(x, y)
    return t, {"version": grain.__version__}


def mds_dir(files, cache):
    from streaming import MDSWriter

    out = os.path.join(cache, f"mds-{len(files)}")
    if not os.path.exists(os.path.join(out, "index.json")):
        tmp = out + ".tmp"
        with MDSWriter(out=tmp, columns={"x": "bytes", "y": "int64"}, size_limit=1 << 26) as w:
            for f in files:
                x, y = npy_of(f)
                x, y = np.asarray(x), np.asarray(y)
                for i in range(len(y)):
                    w.write({"x": x[i].tobytes(), "y": y[i]})
        os.replace(tmp, out)
    return out


def collate_mds(samples):
    x = np.frombuffer(b"".join(s["x"] for s in samples), dtype=np.float32).reshape(-1, 64)
    return x, np.array([s["y"] for s in samples], dtype=np.int64)


def run_mosaic(files, seed, cache):
    import streaming
    from torch.utils.data import DataLoader

    local = mds_dir(files, cache)
    streaming.base.util.clean_stale_shared_memory()
    ds = streaming.StreamingDataset(local=local, shuffle=True, shuffle_algo="py1e",
                                    shuffle_seed=seed, batch_size=BATCH)
    dl = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=collate_mds)
    t = Tally()
    for x, y in dl:
        t.add(x, y)
    return t, {"version": streaming.__version__}


def arrow_dir(files, cache):
    import datasets

    out = os.path.join(cache, f"arrow-{len(files)}")
    if not os.path.exists(os.path.join(out, "dataset_info.json")):
        xs, ys = zip(*(npy_of(f) for f in files))
        x = np.concatenate([np.asarray(v) for v in xs])
        y = np.concatenate([np.asarray(v) for v in ys])
        ds = datasets.Dataset.from_dict({"x": x, "y": y})
        ds.save_to_disk(out + ".tmp")
        os.replace(out + ".tmp", out)
    return out


def collate_hf(rows):
    if isinstance(rows, dict):  # __getitems__ gave a batch of columns
        return np.asarray(rows["x"]), np.asarray(rows["y"])
    return np.stack([r["x"] for r in rows]), np.array([r["y"] for r in rows], dtype=np.int64)


def run_hf(files, seed, cache):
    import datasets
    from torch.utils.data import DataLoader

    ds = datasets.load_from_disk(arrow_dir(files, cache)).shuffle(seed=seed).with_format("numpy")
    dl = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=collate_hf)
    t = Tally()
    for x, y in dl:
        t.add(x, y)
    return t, {"version": datasets.__version__}


# ---- workload C: JPEGs ---------------------------------------------------

C_BATCH = 64
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def jpeg_shards(data, n):
    files = sorted(glob.glob(os.path.join(data, "jpeg-[0-9][0-9][0-9][0-9][0-9].tfrecord")))
    if not files:
        raise SystemExit(f"{data}: no jpeg-NNNNN.tfrecord shards (run gen_images.py)")
    return files[:n] if n else files


def jpegs_of(tfrecord):
    """(label, JPEG bytes) of a shard, from its WebDataset twin."""
    import tarfile

    out, by_key = [], {}
    with tarfile.open(tfrecord[: -len(".tfrecord")] + ".tar") as t:
        for m in t.getmembers():
            key, ext = m.name.rsplit(".", 1)
            by_key.setdefault(key, {})[ext] = t.extractfile(m).read()
    for key in sorted(by_key):
        out.append((int(by_key[key]["cls"]), by_key[key]["jpg"]))
    return out


def expected_c(files):
    labels = [lab for f in files for lab, _ in jpegs_of(f)]
    return len(labels), sum(labels), 0


def train_transform(jpeg, rng):
    """torchvision's RandomResizedCrop(224) + RandomHorizontalFlip +
    ToTensor + Normalize, in PIL and numpy."""
    import io
    import math

    from PIL import Image

    img = Image.open(io.BytesIO(jpeg)).convert("RGB")
    w, h = img.size
    area = w * h
    box = (0, 0, w, h)
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            box = (x, y, x + cw, y + ch)
            break
    img = img.resize((224, 224), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (x - MEAN) / STD


class CTally(Tally):
    def add_images(self, x, y):
        x = np.asarray(x)
        y = np.asarray(y, dtype=np.int64).reshape(-1)
        assert x.shape[1:] == (3, 224, 224) and x.dtype == np.float32 and len(x) == len(y), x.shape
        self.n += len(y)
        self.ys += int(y.sum())
        if len(self.first) < 64:
            self.first.extend(y.tolist())


class Transformed:
    """A picklable per-record transform (a worker seeds its own draws)."""

    def __init__(self, seed):
        self.seed, self.rng = seed, None

    def __call__(self, rec):
        if self.rng is None:
            self.rng = np.random.default_rng([self.seed, os.getpid()])
        lab, jpeg = rec
        return train_transform(jpeg, self.rng), lab


class GrainRecord(Transformed):
    """An ArrayRecord record (label, then the JPEG) transformed."""

    def __call__(self, rec):
        return super().__call__((int(np.frombuffer(rec[:8], np.int64)[0]), rec[8:]))


def stack_c(items):
    return np.stack([x for x, _ in items]), np.array([y for _, y in items], dtype=np.int64)


class Clock:
    """The timed part of a run: from start() (after the peer's files are
    written) to stop()."""

    def start(self):
        self.c0, self.t0 = cpu(), time.perf_counter()

    def stop(self):
        self.secs, self.cpus = time.perf_counter() - self.t0, cpu() - self.c0


def run_c(loader, files, seed, cache, clock):
    t = CTally()
    if loader.startswith("feedline"):
        import feedline

        mode = "block" if loader == "feedline-block" else "global"
        clock.start()
        fl = feedline.Loader(files=files, batch_size=C_BATCH, passes=1, seed=seed, shuffle_mode=mode,
                             shuffle=1000, transform="imagenet-train", workers=WORKERS)
        for b in fl:
            t.add_images(b["image/encoded"], b["image/class/label"])
        return t, {"version": getattr(feedline, "__version__", "?"), "mode": mode}
    if loader == "grain":
        import grain
        from array_record.python.array_record_module import ArrayRecordWriter

        paths = []
        for f in files:
            path = os.path.join(cache, "arrayrecord-c", os.path.basename(f)[: -len(".tfrecord")] + ".array_record")
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                w = ArrayRecordWriter(path + ".tmp", "group_size:1")
                for lab, jpeg in jpegs_of(f):
                    w.write(np.int64(lab).tobytes() + jpeg)
                w.close()
                os.replace(path + ".tmp", path)
            paths.append(path)
        src = grain.sources.ArrayRecordDataSource(paths)
        d = (grain.MapDataset.source(src).shuffle(seed=seed)
             .map(GrainRecord(seed))
             .batch(C_BATCH, batch_fn=stack_c))
        clock.start()
        for x, y in d.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS)):
            t.add_images(x, y)
        return t, {"version": grain.__version__}
    from torch.utils.data import DataLoader, Dataset

    if loader == "mosaic":
        import streaming
        from streaming import MDSWriter

        out = os.path.join(cache, f"mds-c-{len(files)}")
        if not os.path.exists(os.path.join(out, "index.json")):
            with MDSWriter(out=out + ".tmp", columns={"jpg": "bytes", "cls": "int64"}, size_limit=1 << 26) as w:
                for f in files:
                    for lab, jpeg in jpegs_of(f):
                        w.write({"jpg": jpeg, "cls": lab})
            os.replace(out + ".tmp", out)
        streaming.base.util.clean_stale_shared_memory()

        class Images(streaming.StreamingDataset):
            def __init__(self, **kw):
                super().__init__(**kw)
                self.tf = Transformed(seed)

            def __getitem__(self, i):
                s = super().__getitem__(i)
                return self.tf((int(s["cls"]), s["jpg"]))

        clock.start()
        ds = Images(local=out, shuffle=True, shuffle_algo="py1e", shuffle_seed=seed, batch_size=C_BATCH)
        info = {"version": streaming.__version__}
    else:
        import datasets

        out = os.path.join(cache, f"arrow-c-{len(files)}")
        if not os.path.exists(os.path.join(out, "dataset_info.json")):
            recs = [r for f in files for r in jpegs_of(f)]
            datasets.Dataset.from_dict({"cls": [r[0] for r in recs], "jpg": [r[1] for r in recs]}).save_to_disk(out + ".tmp")
            os.replace(out + ".tmp", out)
        clock.start()
        hf = datasets.load_from_disk(out).shuffle(seed=seed)

        class Images(Dataset):
            def __init__(self):
                self.tf = Transformed(seed)

            def __len__(self):
                return len(hf)

            def __getitem__(self, i):
                r = hf[i]
                return self.tf((r["cls"], r["jpg"]))

        ds = Images()
        info = {"version": datasets.__version__}
    for x, y in DataLoader(ds, batch_size=C_BATCH, num_workers=WORKERS, collate_fn=stack_c):
        t.add_images(x, y)
    return t, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--loader", required=True,
                    choices=["feedline", "feedline-block", "grain", "mosaic", "hf"])
    ap.add_argument("--cache", default=None, help="where the peers' files are written (default DATA/peers-global)")
    ap.add_argument("--shards", type=int, default=0, help="the first N shards only (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workload", choices=["A", "C"], default="A")
    args = ap.parse_args()
    cache = args.cache or os.path.join(args.data, "peers-global")
    if args.workload == "C":
        files = jpeg_shards(args.data, args.shards)
        want = expected_c(files)
        clock = Clock()
        tally, info = run_c(args.loader, files, args.seed, cache, clock)
        clock.stop()
        secs, cpus = clock.secs, clock.cpus
        if (tally.n, tally.ys, tally.xs) != want:
            raise SystemExit(f"{args.loader}: delivered (images, label sum) {(tally.n, tally.ys)}, the files hold {want[:2]}")
        order = [lab for f in files for lab, _ in jpegs_of(f)]
        if tally.first[:64] == order[:64]:
            raise SystemExit(f"{args.loader}: the first images came in the files' order")
        print("RESULT " + json.dumps({
            "workload": "C", "loader": args.loader, "images": tally.n, "seconds": round(secs, 3),
            "images_per_s": round(tally.n / secs, 1), "cpu_seconds": round(cpus, 2),
            "seed": args.seed, **info,
        }))
        return
    files = shards(args.data, args.shards)
    want = expected(files)
    prepare = {"grain": arrayrecord_files, "mosaic": mds_dir, "hf": arrow_dir}.get(args.loader)
    if prepare:
        t0 = time.perf_counter()
        prepare(files, cache)
        print(f"[prepare] {args.loader}: {time.perf_counter() - t0:.1f} s (untimed)", file=sys.stderr)
    c0, t0 = cpu(), time.perf_counter()
    if args.loader.startswith("feedline"):
        tally, info = run_feedline(files, args.seed, "block" if args.loader == "feedline-block" else "global")
    elif args.loader == "grain":
        tally, info = run_grain(files, args.seed, cache)
    elif args.loader == "mosaic":
        tally, info = run_mosaic(files, args.seed, cache)
    else:
        tally, info = run_hf(files, args.seed, cache)
    secs, cpus = time.perf_counter() - t0, cpu() - c0
    got = (tally.n, tally.ys, tally.xs)
    if got != want:
        raise SystemExit(f"{args.loader}: delivered (records, label sum, x0 sum) {got}, the files hold {want}")
    x0, _ = npy_of(files[0])
    in_file_order = np.array_equal(np.asarray(tally.first[:64], dtype=np.float32), np.asarray(x0[:64, 0]))
    if in_file_order:
        raise SystemExit(f"{args.loader}: the first records came in the files' order")
    print("RESULT " + json.dumps({
        "loader": args.loader, "records": tally.n, "seconds": round(secs, 3),
        "records_per_s": round(tally.n / secs), "cpu_seconds": round(cpus, 2),
        "shards": len(files), "seed": args.seed, **info,
    }))


if __name__ == "__main__":
    main()
