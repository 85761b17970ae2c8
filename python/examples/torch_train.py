"""Train a small PyTorch model on feedline's small preset through
feedline.torch.DataLoader: dicts of tensors viewing the batches (DLPack, no
copy), one epoch per loop, set_epoch and state_dict as PyTorch's loaders
have them.

Make the data first (TFRecord files of Examples: x float32 [64], y an int64
label; a feature with one value in every record is a scalar, so a batch's y
is [B]):

    cargo run --release -p feedline-cli -- gen --preset small --out data/small
    python python/examples/torch_train.py data/small/*.tfrecord --epochs 2

Needs torch (not needed by the tests). The arrays feedline hands out are
read-only views of the batch's Rust buffer: torch.from_dlpack shares that
memory, so the model must not write into its inputs in place.
"""

import argparse
import time

import feedline.torch
import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="paths or globs (FORMAT: prefixes allowed)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
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
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    with feedline.torch.DataLoader(files=args.files, batch_size=args.batch_size,
                                   shuffle=10_000, seed=7, readers=args.readers,
                                   pin_memory=device == "cuda", device=device) as loader:
        print(f"{len(loader)} batches per epoch")
        step = 0
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                x, y = batch["x"], batch["y"]   # float32 [B, 64], int64 [B]
                loss = loss_fn(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen += y.shape[0]
                if step % 200 == 0:
                    print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")
                step += 1
            state = loader.state_dict()   # torch.save(state, ...) resumes with load_state_dict
        stats = loader.loader.stats()
    dt = time.perf_counter() - t0
    print(f"{seen} instances in {dt:.1f} s ({seen / dt:,.0f}/s); "
          f"bottleneck: {stats['bottleneck']}")


if __name__ == "__main__":
    main()
