"""The per-batch cost of feedline.ray.Service's control path: tiny batches
(16 rows of 5 numbers) from .npz files, one rank in the driver, on a local
3-node Ray cluster; batches/s against the local Loader's.

    python python/examples/bench_ray_overhead.py [--dir /tmp/wt-ray-ovh] [--placement head|prep]
"""
import argparse
import glob
import json
import os
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/wt-ray-ovh")
    ap.add_argument("--placement", default="head")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for f in range(32):
        p = os.path.join(args.dir, f"p{f:02d}.npz")
        if not os.path.exists(p):
            ids = np.arange(f * 2000, (f + 1) * 2000)
            np.savez(p, x=np.repeat(ids[:, None], 4, 1).astype(np.float32), y=ids)
    files = sorted(glob.glob(os.path.join(args.dir, "*.npz")))
    import feedline
    import feedline.ray as fray
    import ray
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1},
                                                      "include_dashboard": False,
                                                      "object_store_memory": 200 << 20})
    for i in range(2):
        c.add_node(num_cpus=2, resources={"prep": 1}, object_store_memory=200 << 20)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        t0 = time.perf_counter()
        with feedline.Loader(files, batch_size=16, shuffle=1000, seed=1, passes=1, rank=0, world_size=1) as l:
            n = sum(1 for _ in l)
        dt = time.perf_counter() - t0
        print("RESULT " + json.dumps({"what": "local Loader", "batches": n, "batches_per_s": round(n / dt)}))
        svc = fray.Service(files=files, batch_size=16, shuffle=1000, seed=1, workers=args.workers,
                           resources_per_worker={"CPU": 0.5, args.placement: 0.01}, world_size=1)
        loader = svc.loader(0)
        t0 = time.perf_counter()
        n = sum(1 for _ in loader)
        dt = time.perf_counter() - t0
        print("RESULT " + json.dumps({"what": "Service", "placement": args.placement, "batches": n,
                                      "batches_per_s": round(n / dt), "us_per_batch": round(dt / n * 1e6)}))
        svc.shutdown()
    finally:
        ray.shutdown()
        c.shutdown()


if __name__ == "__main__":
    main()
