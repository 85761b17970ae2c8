"""feedline.ray.read + iter_torch_batches against Ray Data's own read_images +
map_batches (RandomResizedCrop 224, flip, ImageNet normalisation to f32
CHW: torchvision's v2 transforms, or PIL + numpy where torchvision is not
installed) on the same JPEGs, in one run on a local 3-node Ray cluster.

    python python/examples/bench_ray_data.py [--tars '/tmp/peers/data/jpeg-0000[0-3].tar'] \
        [--baseline torchvision|pil] [--rows-per-block N] [--rounds 2] [--locality] [--ship-pixels]

Each round prints images/s and the CPU seconds every process of the
cluster used during it (so images per CPU-second: "per core").

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


def torchvision_rrc_flip_normalize(batch):
    """torchvision.transforms.v2 RandomResizedCrop(224) + RandomHorizontalFlip
    + ToDtype(float32, scale=True) + Normalize, per image, on the uint8 CHW
    tensor of each decoded image (the peers' C_torch_wds_tvio pipeline)."""
    import torch
    from torchvision.transforms import v2
    t = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    out = np.empty((len(batch["image"]), 3, 224, 224), np.float32)
    for k, img in enumerate(batch["image"]):
        out[k] = t(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)).numpy()
    return {"image": out}


def cpu_seconds():
    """(process kind, CPU seconds (user + system)) of every live process, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{pid}/cmdline") as f:
                    cmd = f.read().replace("\0", " ")
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            kind = ("raylets" if "raylet" in cmd else "gcs" if "gcs_server" in cmd
                    else "driver" if "bench_ray_data" in cmd else "ray workers" if "ray::" in cmd
                    else "other")
            out[pid] = (kind, (int(fields[11]) + int(fields[12])) / tick)
    return out


def used(before, after):
    """CPU seconds used between two cpu_seconds() calls: the total, and by kind."""
    kinds = {}
    for pid, (kind, t) in after.items():
        d = t - before.get(pid, (kind, 0.0))[1]
        if d > 0:
            kinds[kind] = kinds.get(kind, 0.0) + d
    return sum(kinds.values()), {k: round(v, 2) for k, v in kinds.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tars", default="/tmp/peers/data/jpeg-0000[0-3].tar")
    ap.add_argument("--jpeg-dir", default="/tmp/feedline-ray-bench-jpegs")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rows-per-block", type=int, default=None, help="feedline.ray.read's rows_per_block")
    ap.add_argument("--baseline", default="torchvision", choices=["torchvision", "pil"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--ship-pixels", action="store_true",
                    help="also feedline.ray.read(ship_pixels=True) + iter_torch_batches(collate_fn=output_steps)")
    ap.add_argument("--locality", action="store_true",
                    help="DataContext.execution_options.locality_with_output = True (tasks on the consumer's node)")
    args = ap.parse_args()
    baseline = torchvision_rrc_flip_normalize if args.baseline == "torchvision" else rrc_flip_normalize
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
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.locality_with_output = args.locality
    try:
        result(what="host", cpus=os.cpu_count(), tars=len(tars), jpegs=n_jpegs,
               locality_with_output=args.locality)
        for round_ in range(args.rounds):
            cpu0 = cpu_seconds()
            t0 = time.perf_counter()
            n = 0
            kw = {} if args.rows_per_block is None else {"rows_per_block": args.rows_per_block}
            ds = fray.read(tars, transform="imagenet-train", columns=["jpg", "cls"], **kw)
            for b in ds.iter_torch_batches(batch_size=args.batch):
                n += len(b["cls"])
                assert tuple(b["jpg"].shape[1:]) == (3, 224, 224) and str(b["jpg"].dtype) == "torch.float32"
            dt = time.perf_counter() - t0
            cpu, by_kind = used(cpu0, cpu_seconds())
            result(what="feedline.ray.read + iter_torch_batches", round=round_, images=n, seconds=round(dt, 2),
                   images_per_s=round(n / dt, 1), cpu_seconds=round(cpu, 2),
                   images_per_cpu_s=round(n / cpu, 1), cpu_seconds_by_process=by_kind)
            if args.ship_pixels:
                cpu0 = cpu_seconds()
                t0 = time.perf_counter()
                n = 0
                ds = fray.read(tars, transform="imagenet-train", columns=["jpg", "cls"], ship_pixels=True, **kw)
                steps = fray.output_steps("imagenet-train", ["jpg"])
                for b in ds.iter_torch_batches(batch_size=args.batch, collate_fn=steps):
                    n += len(b["cls"])
                    assert tuple(b["jpg"].shape[1:]) == (3, 224, 224) and str(b["jpg"].dtype) == "torch.float32"
                dt = time.perf_counter() - t0
                cpu, by_kind = used(cpu0, cpu_seconds())
                result(what="feedline.ray.read(ship_pixels=True) + iter_torch_batches(collate_fn=output_steps)",
                       round=round_, images=n, seconds=round(dt, 2), images_per_s=round(n / dt, 1),
                       cpu_seconds=round(cpu, 2), images_per_cpu_s=round(n / cpu, 1),
                       cpu_seconds_by_process=by_kind)
            if args.skip_baseline:
                continue
            cpu0 = cpu_seconds()
            t0 = time.perf_counter()
            n = 0
            ds = ray.data.read_images(args.jpeg_dir, mode="RGB").map_batches(
                baseline, batch_size=args.batch)
            for b in ds.iter_torch_batches(batch_size=args.batch):
                n += len(b["image"])
                assert tuple(b["image"].shape[1:]) == (3, 224, 224)
            dt = time.perf_counter() - t0
            cpu, by_kind = used(cpu0, cpu_seconds())
            result(what=f"ray.data.read_images + map_batches({args.baseline} RandomResizedCrop) + iter_torch_batches",
                   round=round_, images=n, seconds=round(dt, 2), images_per_s=round(n / dt, 1),
                   cpu_seconds=round(cpu, 2), images_per_cpu_s=round(n / cpu, 1),
                   cpu_seconds_by_process=by_kind)
    finally:
        ray.shutdown()
        c.shutdown()


if __name__ == "__main__":
    main()
