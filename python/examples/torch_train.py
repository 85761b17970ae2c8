"""Train a small PyTorch model on feedline's small preset, batches handed to
torch through DLPack (no copy).

Make the data first (TFRecord files of Examples: x float32 [64], y an int64
label; a feature with one value in every record is a scalar, so a batch's y
is [B]):

    cargo run --release -p feedline-cli -- gen --preset small --out data/small
    python python/examples/torch_train.py data/small/*.tfrecord --passes 2

Needs torch (not needed by the tests). The arrays feedline hands out are
read-only views of the batch's Rust buffer: torch.from_dlpack shares that
memory, so the model must not write into its inputs in place.
"""

import argparse
import time

import feedline
import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="paths or globs (FORMAT: prefixes allowed)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1000))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    t0 = time.perf_counter()
    seen = 0
    with feedline.Loader(files=args.files, batch_size=args.batch_size, shuffle=10_000,
                         seed=7, passes=args.passes, readers=args.readers) as loader:
        for step, batch in enumerate(loader):
            x = torch.from_dlpack(batch["x"])   # float32 [B, 64], shares the Rust buffer
            y = torch.from_dlpack(batch["y"])   # int64 [B], the class labels
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += batch.size
            if step % 200 == 0:
                print(f"pass {batch.pass_} step {step}: loss {loss.item():.4f}")
        stats = loader.stats()
    dt = time.perf_counter() - t0
    print(f"{seen} instances in {dt:.1f} s ({seen / dt:,.0f}/s); "
          f"bottleneck: {stats['bottleneck']}")


if __name__ == "__main__":
    main()
