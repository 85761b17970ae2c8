"""feedline.ray.Service end to end on a local 3-node Ray cluster: worker
actors on the two "cpu" nodes, two trainer ranks as Ray tasks, each stopped
half-way through the first epoch with its state_dict() (as a
ray.train.Checkpoint would hold it), then resumed by a new Service with
another worker count, and every record checked to come exactly once.

    python python/examples/ray_service.py [--dir /tmp/feedline-ray-example]
"""

import argparse
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/feedline-ray-example")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    files = []
    for f in range(8):
        p = os.path.join(args.dir, f"part{f}.npz")
        ids = np.arange(f * 100, (f + 1) * 100)
        np.savez(p, x=np.repeat(ids[:, None], 4, 1).astype(np.float32), y=ids)
        files.append(p)

    import ray
    from ray.cluster_utils import Cluster
    import feedline.ray

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "object_store_memory": 100 << 20})
    for _ in range(2):
        cluster.add_node(num_cpus=2, resources={"cpu": 1}, object_store_memory=100 << 20)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)

    settings = dict(files=files, batch_size=32, shuffle=200, seed=7, deterministic=True,
                    world_size=2, resources_per_worker={"CPU": 0.5, "cpu": 0.1})

    @ray.remote(num_cpus=0.5)
    def rank_task(service, rank, stop_after, state=None):
        loader = service.loader(rank, state=state)
        seen = []
        for batch in loader:
            seen.extend(int(y) for y in batch["y"])
            if stop_after is not None and len(seen) >= stop_after:
                break
        return seen, json.dumps(loader.state_dict())

    try:
        service = feedline.ray.Service(workers=2, **settings)
        first = ray.get([rank_task.remote(service, r, 150) for r in range(2)])
        service.shutdown()
        states = [json.loads(s) for _, s in first]
        resumed = feedline.ray.Service(workers=3, resume=states, **settings)
        rest = ray.get([rank_task.remote(resumed, r, None) for r in range(2)])
        print(json.dumps(resumed.stats()["ranks"], indent=1))
        resumed.shutdown()
        ys = [y for seen, _ in first + rest for y in seen]
        assert sorted(ys) == list(range(800)), "not exactly once"
        print(f"epoch 0: {len(ys)} records, each exactly once, across a stop and a resume "
              f"with 2 then 3 worker actors")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
