"""Peers for reading the datasets other tools write (docs/performance.md).

    python benches/datasets_peers.py make DIR        # writes the datasets
    python benches/datasets_peers.py mds DIR/NAME    # Mosaic StreamingDataset
    python benches/datasets_peers.py hf DIR/NAME     # datasets' with_format("numpy")

`make` writes, with the real writers, into DIR:
  mds-b   2,000 records of 150 KB (workload B's size): `data` bytes, `label` int
  mds-a   200,000 records of 264 B (workload A's size): the same columns
  hf-b    the records of mds-b, Dataset.save_to_disk
  hf-a    the records of mds-a, Dataset.save_to_disk
The readers iterate a torch DataLoader (batch 64, 2 workers) over the
dataset once after one warm-up pass, and print records/s per pass as JSON.
Needs mosaicml-streaming 0.13, datasets, torch.
"""

import json
import os
import sys
import time

import numpy as np

BATCH = 64


def make(out):
    import datasets
    from streaming import MDSWriter

    rng = np.random.default_rng(0)
    for name, n, size in [("b", 2000, 150_000), ("a", 200_000, 264 - 12)]:
        blobs = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]
        labels = [i % 1000 for i in range(n)]
        with MDSWriter(out=os.path.join(out, f"mds-{name}"), columns={"data": "bytes", "label": "int"}) as w:
            for b, l in zip(blobs, labels):
                w.write({"data": b, "label": l})
        ds = datasets.Dataset.from_dict({"data": blobs, "label": labels})
        ds.save_to_disk(os.path.join(out, f"hf-{name}"))


def collate_dict(items):
    """A batch as lists (no tensor conversion of the bytes)."""
    return {k: [it[k] for it in items] for k in items[0]}


def run(loader, passes=3):
    out = []
    for p in range(passes):
        t = time.perf_counter()
        n = 0
        for batch in loader:
            n += len(batch["label"])
        dt = time.perf_counter() - t
        out.append({"pass": p, "records": n, "seconds": round(dt, 3), "records_per_s": round(n / dt)})
        print(json.dumps(out[-1]), flush=True)
    return out


def main():
    import torch.utils.data as tud

    what, path = sys.argv[1], sys.argv[2]
    if what == "make":
        make(path)
    elif what == "mds":
        from streaming import StreamingDataset

        ds = StreamingDataset(local=path, batch_size=BATCH, shuffle=False)
        run(tud.DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True, collate_fn=collate_dict))
    elif what == "hf":
        import datasets

        ds = datasets.load_from_disk(path).with_format("numpy")
        run(tud.DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=True, collate_fn=collate_dict))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
