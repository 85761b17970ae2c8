"""feedline.ray.Service against the local feedline.Loader on the same JPEG
files and transform, on a local multi-node Ray cluster (ray.cluster_utils),
and the object store's throughput for numpy batches of the same size.

    python python/examples/bench_ray.py [--files '/tmp/peers/data/jpeg-0000[0-3].tar'] \
        [--transform imagenet-train] [--batch 64] [--workers 2] [--placement head|prep] \
        [--also-ship-output]

Prints one RESULT line per measurement (JSON), with the CPU seconds each
kind of process used during the Service's run. --placement head puts the
worker actors on the trainer's node (the rank reads their batches from its
own node's object store: no transfer); prep puts them on the other two
nodes (every batch crosses between the nodes' object stores, over TCP on
this host as between hosts).
"""

import argparse
import glob
import json
import os
import time

import numpy as np


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def local_run(files, args):
    import feedline
    t0 = time.perf_counter()
    n = 0
    with feedline.Loader(files, batch_size=args.batch, shuffle=args.shuffle, seed=7, passes=1,
                         transform=args.transform, workers=args.threads * args.workers,
                         rank=0, world_size=1, deterministic=args.deterministic) as l:
        for b in l:
            n += b.size
            nbytes = sum(v.nbytes for v in b.values() if isinstance(v, np.ndarray))
    dt = time.perf_counter() - t0
    result(what="local Loader", images=n, seconds=round(dt, 2), images_per_s=round(n / dt, 1),
           batch_bytes=nbytes, workers=args.threads * args.workers)
    return n / dt


def cpu_by_process():
    """CPU seconds (user + system) of every live process, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().replace("\0", " ").strip()
        except OSError:
            continue
        close = stat.rfind(")")
        fields = stat[close + 2:].split()
        name = cmd or stat[stat.find("(") + 1:close]
        out[pid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def cpu_report(before, after, seconds):
    """The CPU each kind of process used between two cpu_by_process() calls."""
    kinds = {}
    for pid, (name, t) in after.items():
        used = t - before.get(pid, (name, 0.0))[1]
        if used <= 0:
            continue
        if "ray::_Worker" in name:
            kind = "worker actors"
        elif "raylet" in name:
            kind = "raylets"
        elif "gcs_server" in name:
            kind = "gcs"
        elif "ray::" in name or "default_worker" in name:
            kind = "ray: " + name.split()[0][:40]
        elif "bench_ray" in name:
            kind = "driver (rank)"
        else:
            kind = "other: " + name.split()[0].rsplit("/", 1)[-1][:30]
        kinds[kind] = kinds.get(kind, 0.0) + used
    total = sum(kinds.values())
    result(what="cpu seconds by process", seconds=round(seconds, 2), total=round(total, 2),
           **{k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]) if v >= 0.05})


def service_run(files, args, ship_pixels=True):
    import feedline.ray as fray
    res = {"CPU": 0.5, args.placement: 0.01}
    svc = fray.Service(files=files, batch_size=args.batch, shuffle=args.shuffle, seed=7,
                       transform=args.transform, deterministic=args.deterministic,
                       workers=args.workers, resources_per_worker=res,
                       threads_per_worker=args.threads, world_size=1,
                       interleave=args.interleave, prefetch=args.prefetch, ship_pixels=ship_pixels)
    try:
        before = cpu_by_process()
        t0 = time.perf_counter()
        n = 0
        loader = svc.loader(0)
        for b in loader:
            n += b.size
        dt = time.perf_counter() - t0
        cpu_report(before, cpu_by_process(), dt)
        st = svc.stats()
        result(what="Service", placement=args.placement, ship_pixels=ship_pixels, images=n, seconds=round(dt, 2),
               images_per_s=round(n / dt, 1), workers=args.workers, threads_per_worker=args.threads,
               rank_wait_fraction=round(st["rank_wait_fraction"], 3), bottleneck=st["bottleneck"],
               rank_output_steps_s=round(loader.stats()["output_steps_s"], 2),
               per_worker_images_per_s=[round(w["records"] / dt, 1) for w in st["workers"]])
        loader.close()
    finally:
        svc.shutdown()
    return n / dt


def object_store(args, nbytes):
    """Bytes/s of ray.put and ray.get of one batch-sized numpy array in the
    driver (same node), and of batches returned by an actor on another node
    and fetched by the driver (a transfer between two nodes' stores)."""
    import ray
    a = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    reps = 20
    t0 = time.perf_counter()
    refs = [ray.put(a) for _ in range(reps)]
    put = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = 0
    for r in refs:
        s += int(ray.get(r)[::4096].sum())
    get = time.perf_counter() - t0
    del refs
    result(what="object store, same node", batch_bytes=nbytes, put_bytes_per_s=round(nbytes * reps / put),
           get_bytes_per_s=round(nbytes * reps / get), reps=reps)

    @ray.remote(num_cpus=0.5, resources={"prep": 0.01})
    class Maker:
        def __init__(self, n):
            self.a = np.random.default_rng(1).integers(0, 255, n, dtype=np.uint8)

        def make(self):
            return self.a

    m = Maker.remote(nbytes)
    ray.get(m.make.remote())
    t0 = time.perf_counter()
    for _ in range(reps):
        x = ray.get(m.make.remote())
        s += int(x[::4096].sum())
        del x
    dt = time.perf_counter() - t0
    result(what="object store, actor on another node -> driver", batch_bytes=nbytes,
           bytes_per_s=round(nbytes * reps / dt), reps=reps)
    ray.kill(m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default="/tmp/peers/data/jpeg-0000[0-3].tar")
    ap.add_argument("--transform", default="imagenet-train")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shuffle", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2, help="worker actors")
    ap.add_argument("--threads", type=int, default=1, help="transform threads per worker actor")
    ap.add_argument("--interleave", type=int, default=4)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--placement", default="head", choices=["head", "prep"])
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--also-ship-output", action="store_true",
                    help="run the Service a second time with ship_pixels=False")
    args = ap.parse_args()
    files = sorted(glob.glob(args.files))
    if not files:
        raise SystemExit(f"no files match {args.files}")

    import ray
    from ray.cluster_utils import Cluster
    mb = 1024 * 1024
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"head": 1}, "object_store_memory": 600 * mb,
        "include_dashboard": False})
    for i in range(2):
        c.add_node(num_cpus=2, resources={"prep": 1, f"prep{i}": 1}, object_store_memory=600 * mb)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    try:
        result(what="host", cpus=os.cpu_count(), files=len(files), transform=args.transform,
               batch=args.batch)
        if not args.skip_local:
            local_run(files, args)
        service_run(files, args)
        if args.also_ship_output:
            service_run(files, args, ship_pixels=False)
        if not args.skip_local:
            local_run(files, args)
        import feedline
        with feedline.Loader(files[:1], batch_size=args.batch, shuffle=0, passes=1, transform=args.transform,
                             workers=1, rank=0, world_size=1) as l:
            nbytes = sum(v.nbytes for v in next(iter(l)).values() if isinstance(v, np.ndarray))
        object_store(args, nbytes)
    finally:
        ray.shutdown()
        c.shutdown()


if __name__ == "__main__":
    main()
