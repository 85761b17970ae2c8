"""feedline.ray.read + iter_batches against Ray Data's own read_images +
map_batches (RandomResizedCrop 224, flip, ImageNet normalisation to f32
CHW, in PIL + numpy as torchvision does on PIL images) on the same JPEGs,
in one run on a local 3-node Ray cluster.

    python python/examples/bench_ray_data.py [--tars '/tmp/peers/data/jpeg-0000[0-3].tar']

The JPEGs of the tars are also written out as .jpg files (read_images reads
files) under --jpeg-dir. Prints RESULT lines (JSON).
"""

import argparse
import glob
import json
import os
import tarfile
import time

import numpy as np


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def rrc_flip_normalize(batch):
    """torchvision's RandomResizedCrop(224) + RandomHorizontalFlip +
    Normalize on PIL images, per image (scale 0.08-1, ratio 3/4-4/3)."""
    from PIL import Image
    rng = np.random.default_rng()
    out = np.empty((len(batch["image"]), 3, 224, 224), np.float32)
    for k, img in enumerate(batch["image"]):
        h, w = img.shape[:2]
        area = h * w
        for _ in range(10):
            a = area * rng.uniform(0.08, 1.0)
            r = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            cw, ch = int(round(np.sqrt(a * r))), int(round(np.sqrt(a / r)))
            if 0 < cw <= w and 0 < ch <= h:
                y0, x0 = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
                break
        else:
            ch, cw, y0, x0 = h, w, 0, 0
        im = Image.fromarray(img).resize((224, 224), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        a = np.asarray(im, np.float32)
        if rng.random() < 0.5:
            a = a[:, ::-1]
        out[k] = ((a - MEAN) / STD).transpose(2, 0, 1)
    return {"image": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tars", default="/tmp/peers/data/jpeg-0000[0-3].tar")
    ap.add_argument("--jpeg-dir", default="/tmp/feedline-ray-bench-jpegs")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    tars = sorted(glob.glob(args.tars))
    os.makedirs(args.jpeg_dir, exist_ok=True)
    n_jpegs = 0
    for t in tars:
        with tarfile.open(t) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".jpg"):
                    p = os.path.join(args.jpeg_dir, os.path.basename(t) + "-" + os.path.basename(m.name))
                    if not os.path.exists(p):
                        with open(p, "wb") as f:
                            f.write(tf.extractfile(m).read())
                    n_jpegs += 1

    import ray
    import feedline.ray as fray
    from ray.cluster_utils import Cluster
    mb = 1024 * 1024
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"head": 1}, "object_store_memory": 600 * mb,
        "include_dashboard": False})
    for i in range(2):
        c.add_node(num_cpus=2, resources={"prep": 1}, object_store_memory=600 * mb)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        result(what="host", cpus=os.cpu_count(), tars=len(tars), jpegs=n_jpegs)
        for round_ in range(2):
            t0 = time.perf_counter()
            n = 0
            ds = fray.read(tars, transform="imagenet-train", rows_per_block=args.batch)
            for b in ds.iter_batches(batch_size=args.batch, batch_format="numpy"):
                n += len(b["cls"])
                assert b["jpg"].shape[1:] == (3, 224, 224) and b["jpg"].dtype == np.float32
            dt = time.perf_counter() - t0
            result(what="feedline.ray.read + iter_batches", round=round_, images=n, seconds=round(dt, 2),
                   images_per_s=round(n / dt, 1))
            t0 = time.perf_counter()
            n = 0
            ds = ray.data.read_images(args.jpeg_dir, mode="RGB").map_batches(
                rrc_flip_normalize, batch_size=args.batch)
            for b in ds.iter_batches(batch_size=args.batch, batch_format="numpy"):
                n += len(b["image"])
                assert b["image"].shape[1:] == (3, 224, 224)
            dt = time.perf_counter() - t0
            result(what="ray.data.read_images + map_batches(PIL RandomResizedCrop)", round=round_, images=n,
                   seconds=round(dt, 2), images_per_s=round(n / dt, 1))
    finally:
        ray.shutdown()
        c.shutdown()


if __name__ == "__main__":
    main()
