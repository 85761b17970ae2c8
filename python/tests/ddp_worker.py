"""One rank of a torchrun DDP job over feedline.torch.DataLoader (run by
test_trainers.py: `python -m torch.distributed.run --nproc_per_node N
ddp_worker.py OUT FILES...`): gloo on the CPU, the rank and
world size from the environment torchrun sets (the loader takes them from
RANK / WORLD_SIZE too), a DDP model whose gradients are all-reduced at
every step, and one more all_reduce of the step count per step — a rank
with a step more or less would hang, which the test bounds with a timeout.

For each FEEDLINE_EQUALIZE mode ("pad,drop") it runs FEEDLINE_EPOCHS
epochs whole ("full"), then again stopping FEEDLINE_STOP_IN_EPOCH1 steps
into epoch 1 ("stopped": every rank's state_dict() saved to
OUT/state-{MODE}-rank{R}.json); with FEEDLINE_RESUME=1 it loads those and
goes on ("resumed"). Per epoch it writes, for its rank, the ids of the rows
it trained on (the real rows: "mask" says which), the padding rows, the
steps and the batches, to OUT/{MODE}-{RUN}-rank{R}.json.
"""

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

import feedline.torch as ft


def run(out, files, equalize, name, epochs, stop_in_epoch1=0, resume=False):
    rank, world = dist.get_rank(), dist.get_world_size()
    with warnings.catch_warnings():
        # The loader says it took its shard from RANK / WORLD_SIZE: meant here.
        warnings.simplefilter("ignore", UserWarning)
        loader = ft.DataLoader(files=files, batch_size=8, shuffle=64, seed=11,
                               deterministic=True, equalize=equalize, pin_memory=False)
    assert (loader.loader.rank, loader.loader.world_size) == (rank, world)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    state_path = os.path.join(out, f"state-{equalize}-rank{rank}.json")
    step, first_epoch = 0, 0
    if resume:
        with open(state_path) as f:
            saved = json.load(f)
        loader.load_state_dict(saved["loader"])
        step, first_epoch = saved["step"], saved["epoch"]

    log = {"rank": rank, "world": world, "epochs": {}}
    stop_at = 0
    for epoch in range(first_epoch, epochs):
        loader.set_epoch(epoch)
        if stop_in_epoch1 and epoch == 1:
            stop_at = step + stop_in_epoch1
        rec = log["epochs"].setdefault(str(epoch), {"ids": [], "padding": 0, "steps": 0,
                                                    "no_mask": True, "batches": [],
                                                    "len": len(loader)})
        for batch in loader:
            x, y = batch["x"], batch["y"]
            if equalize == "pad":
                mask = batch["mask"]
                assert mask.dtype == torch.bool and mask.shape == y.shape
            else:
                rec["no_mask"] = rec["no_mask"] and "mask" not in batch
                mask = torch.ones_like(y, dtype=torch.bool)
            # The loss leaves the padding rows out.
            per_row = (model(x / 200).squeeze(1) - y.float() / 200) ** 2
            loss = (per_row * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()  # DDP: an all_reduce of the gradients
            opt.step()
            count = torch.tensor([1])
            dist.all_reduce(count)  # every rank takes part in every step
            assert count.item() == world
            rec["ids"].extend(y[mask].tolist())
            rec["padding"] += int((~mask).sum())
            rec["steps"] += 1
            rec["batches"].append(y.tolist())
            step += 1
            if stop_at and step == stop_at:
                break
        if stop_at and step == stop_at:
            with open(state_path, "w") as f:
                json.dump({"loader": loader.state_dict(), "step": step, "epoch": epoch}, f)
            break
    loader.close()
    with open(os.path.join(out, f"{equalize}-{name}-rank{rank}.json"), "w") as f:
        json.dump(log, f)
    dist.barrier()


def main():
    out, files = sys.argv[1], sys.argv[2:]
    epochs = int(os.environ.get("FEEDLINE_EPOCHS", "2"))
    stop = int(os.environ.get("FEEDLINE_STOP_IN_EPOCH1", "0"))
    dist.init_process_group("gloo")
    assert dist.get_rank() == int(os.environ["RANK"])
    assert dist.get_world_size() == int(os.environ["WORLD_SIZE"])
    for equalize in os.environ["FEEDLINE_EQUALIZE"].split(","):
        if os.environ.get("FEEDLINE_RESUME") == "1":
            run(out, files, equalize, "resumed", epochs, resume=True)
        else:
            run(out, files, equalize, "full", epochs)
            run(out, files, equalize, "stopped", epochs, stop_in_epoch1=stop)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
