"""feedline.torch under the trainers people use: PyTorch Lightning
(Trainer.fit, ckpt_path=), Hugging Face Accelerate (prepare, save_state /
load_state, skip_first_batches) and the HF Trainer (get_train_dataloader,
resume_from_checkpoint), torchrun DDP on gloo (equalize="pad"/"drop",
"mask"); and what they rely on: an epoch ends with its last batch (len()
batches taken, the end never pulled), set_epoch in the orders the trainers
call it, the sampler they call it on. Every check is by identity: each
record carries its id (y) and each run records the ids it trained on.

The Lightning, Accelerate and transformers tests skip where the package is
missing; ./test.sh installs them. The loops of docs/python.md's trainer
sections are the ones run here (named in each test's docstring)."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import feedline

torch = pytest.importorskip("torch")
import feedline.torch as ft  # noqa: E402

ROWS = (37, 50, 23, 61, 29)  # uneven files: 200 records, ids 0..199
N = sum(ROWS)
B = 16
STEPS = -(-N // B)  # 13 batches an epoch
EPOCHS = 4


def make_data(tmp_path, rows=ROWS):
    """Files of `rows` records each; y is a record's id, x = [id] * 4."""
    paths, start = [], 0
    for f, n in enumerate(rows):
        ids = np.arange(start, start + n, dtype=np.int64)
        start += n
        p = tmp_path / f"part{f}.npz"
        np.savez(p, x=np.repeat(ids.astype(np.float32)[:, None], 4, axis=1), y=ids)
        paths.append(str(p))
    return paths


def dl(paths, **kw):
    s = dict(files=paths, batch_size=B, shuffle=64, seed=5, rank=0, world_size=1, pin_memory=False)
    s.update(kw)
    return ft.DataLoader(**s)


def ids(batches):
    return sorted(y for b in batches for y in b)


def force_pinned(monkeypatch, loader):
    """The pinned-memory path without CUDA: page-locking replaced by a
    copy; the thread and its bookkeeping are the real ones."""
    monkeypatch.setattr(ft, "_pin", lambda t: {k: (v.clone() if hasattr(v, "clone") else v)
                                               for k, v in t.items()})
    loader.pin_memory = True
    return loader


def ahead_to_the_end(it, deadline_s=30.0):
    """For a pinned-memory iterator: wait until its thread has fetched the
    epoch's end ahead (and stopped), the case where that end used to make
    the next epoch empty. Polls the thread (not a timing assumption)."""
    import time
    if isinstance(it, ft._PinnedEpoch):
        end = time.monotonic() + deadline_s
        while it._thread is not None and it._thread.is_alive():
            assert time.monotonic() < end, "the pinned-memory thread did not reach the end"
            time.sleep(0.001)


def loss_of(net, batch):
    out = net(batch["x"] / N).squeeze(1)
    return ((out - batch["y"].float() / N) ** 2).mean()


# ------------------------------------------------- what the trainers rely on

@pytest.mark.parametrize("face", ["Loader", "torch", "torch-pinned", "jax"])
def test_an_epoch_ends_with_its_last_batch(tmp_path, monkeypatch, face):
    """len() batches taken (as Lightning's fetcher takes them), the end never
    pulled: the next iter() is the next epoch, whole, and a state_dict()
    taken there resumes with that same epoch (deterministic: the same
    batches) — for the Loader, feedline.torch.DataLoader (plain and pinned)
    and feedline.jax."""
    paths = make_data(tmp_path)
    if face == "jax":
        jax_mod = pytest.importorskip("jax")  # noqa: F841
        import feedline.jax as fj
    kw = dict(files=paths, batch_size=B, shuffle=64, seed=5, rank=0, world_size=1,
              deterministic=True)

    def make(**extra):
        if face == "Loader" or face == "jax":
            return feedline.Loader(**kw, **extra)
        loader = ft.DataLoader(pin_memory=False, **kw, **extra)
        return force_pinned(monkeypatch, loader) if face == "torch-pinned" else loader

    def loop(loader):
        if face == "jax":
            return fj.iterator(loader)
        return iter(loader)

    def ys(b):
        return np.asarray(b["y"]).tolist()

    with make() as whole:
        want = [[ys(b) for b in loop(whole)] for _ in range(3)]
    with make() as loader:
        got = []
        for epoch in range(3):
            it = loop(loader)
            got.append([ys(next(it)) for _ in range(len(loader))])
            ahead_to_the_end(it)
            del it
            if epoch == 1:
                state = loader.state_dict()
    assert got == want
    for e in got:
        assert ids(e) == list(range(N))
    with make(resume=state) as resumed:
        assert [ys(b) for b in loop(resumed)] == want[2]


def test_iterable_dataset_moves_on_at_each_iteration(tmp_path):
    """feedline.torch.IterableDataset under torch's DataLoader (num_workers=0,
    as Lightning drives it): len() batches taken, the end never pulled,
    the next iteration is the next epoch — whole, in that epoch's order (a
    fresh Loader's pass n), not the same epoch again; padding adds "mask"."""
    paths = make_data(tmp_path)
    with feedline.Loader(files=paths, batch_size=B, shuffle=64, seed=5, rank=0, world_size=1,
                         deterministic=True) as whole:
        want = [[b["y"].tolist() for b in whole] for _ in range(3)]
    ds = ft.IterableDataset(files=paths, batch_size=B, shuffle=64, seed=5, rank=0, world_size=1,
                            deterministic=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    got = []
    for _ in range(3):
        it = iter(loader)
        got.append([next(it)["y"].tolist() for _ in range(len(loader))])
        del it
    assert got == want
    ds = ft.IterableDataset(files=paths, batch_size=B, rank=1, world_size=2, equalize="pad")
    assert all(b["mask"].dtype == torch.bool for b in ds)


ORDERS = [("load", "iter", "set_epoch"),   # Lightning's on resume
          ("load", "set_epoch", "iter"),   # Accelerate's loop, the HF Trainer's
          ("iter", "load", "set_epoch"),   # Lightning's check iter() first
          ("iter", "set_epoch", "load")]


@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.parametrize("at", ["mid", "end"])
@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_set_epoch_in_any_order_after_a_restore(tmp_path, monkeypatch, order, at, pinned):
    """A state taken mid-epoch 1 (after 5 batches) or at its end (all 13,
    the end not pulled), loaded into a new DataLoader with iter() and
    set_epoch(the epoch it is in) in each order the trainers use: the
    iterator gives the rest of epoch 1 (mid) or epoch 2 whole (end) — the
    uninterrupted run's batches — never nothing."""
    paths = make_data(tmp_path)
    with dl(paths, deterministic=True) as whole:
        want = [[b["y"].tolist() for b in whole] for _ in range(4)]
    stop = 5 if at == "mid" else STEPS
    with dl(paths, deterministic=True) as first:
        for _ in first:
            pass
        it = iter(first)
        [next(it) for _ in range(stop)]
        state = json.loads(json.dumps(first.state_dict()))
    epoch, rest = (1, want[1][stop:]) if at == "mid" else (2, want[2])
    loader = dl(paths, deterministic=True)
    if pinned:
        force_pinned(monkeypatch, loader)
    with loader:
        it = None
        for step in order:
            if step == "load":
                loader.load_state_dict(state)
            elif step == "iter":
                it = iter(loader)
            else:
                loader.sampler.set_epoch(epoch)  # where Lightning and Accelerate call it
        assert [b["y"].tolist() for b in it] == rest, order
        assert [b["y"].tolist() for b in loader] == want[epoch + 1], order  # then the next


def test_the_sampler_lightning_and_accelerate_call_set_epoch_on(tmp_path):
    """dataloader.sampler and dataloader.batch_sampler.sampler are one
    object whose set_epoch is the loader's: Lightning's _set_sampler_epoch
    (the function its fit loop calls) sets the next epoch's order."""
    paths = make_data(tmp_path)
    with dl(paths, deterministic=True) as whole:
        want = [[b["y"].tolist() for b in whole] for _ in range(4)]
    with dl(paths, deterministic=True) as loader:
        assert loader.sampler is loader.batch_sampler.sampler
        assert len(loader.batch_sampler) == len(loader) == STEPS
        with pytest.raises(TypeError, match="set_epoch"):
            iter(loader.sampler)
        pl_data = pytest.importorskip("lightning.fabric.utilities.data")
        pl_data._set_sampler_epoch(loader, 3)
        assert loader.sampler.epoch == 3
        assert [b["y"].tolist() for b in loader] == want[3]


def test_mask_on_every_batch_of_a_loader_that_pads(tmp_path):
    """equalize="pad": every batch (not only the padded ones) has "mask", a
    bool tensor [B], True for a real row; the real rows of both ranks are
    every record once. equalize="drop" pads nothing: no "mask". A loader=
    that pads without mask=True raises at its first padded batch; mask=False
    with equalize="pad" and a field named "mask" are refused."""
    paths = make_data(tmp_path)
    real, steps, padded = [], [], []
    for rank in range(2):
        with dl(paths, rank=rank, world_size=2, equalize="pad") as loader:
            n, pad = 0, 0
            for b in loader:
                m = b["mask"]
                assert m.dtype == torch.bool and m.shape == b["y"].shape
                real.extend(b["y"][m].tolist())
                n, pad = n + 1, pad + int((~m).sum())
            steps.append(n)
            padded.append(pad)
    assert steps[0] == steps[1]
    assert sorted(real) == list(range(N))
    short = padded.index(max(padded))  # the rank whose batches are padded
    assert padded[short] > 0
    for rank in range(2):
        with dl(paths, rank=rank, world_size=2, equalize="drop") as loader:
            assert all("mask" not in b for b in loader)
    native = feedline.Loader(files=paths, batch_size=B, shuffle=0, rank=short, world_size=2,
                             equalize="pad")
    with ft.DataLoader(loader=native, pin_memory=False) as loader:
        with pytest.raises(feedline.FeedlineError, match="mask=True"):
            for _ in loader:
                pass
    native = feedline.Loader(files=paths, batch_size=B, shuffle=0, rank=short, world_size=2,
                             equalize="pad")
    with ft.DataLoader(loader=native, pin_memory=False, mask=True) as loader:
        assert all(b["mask"].dtype == torch.bool for b in loader)
    with pytest.raises(ValueError, match="mask=False"):
        dl(paths, equalize="pad", mask=False)
    p = tmp_path / "m.npz"
    np.savez(p, mask=np.zeros(4, np.int64), y=np.arange(4))
    with pytest.raises(ValueError, match="named \"mask\""):
        dl([str(p)], equalize="pad")


def test_pinned_mask_and_epoch_end(tmp_path, monkeypatch):
    """The pinned-memory path with equalize="pad": "mask" comes pinned with
    the rest, and len() batches taken, then iter() again, gives the next
    epoch whole (its thread had fetched the epoch's end ahead): each epoch
    the plain path's batches, masks included."""
    paths = make_data(tmp_path)
    kw = dict(equalize="pad", rank=0, world_size=2, deterministic=True)
    with dl(paths, **kw) as plain:
        want = [[(b["y"].tolist(), b["mask"].tolist()) for b in plain] for _ in range(3)]
    with force_pinned(monkeypatch, dl(paths, **kw)) as loader:
        for epoch in range(3):
            it = iter(loader)
            got = [next(it) for _ in range(len(loader))]
            ahead_to_the_end(it)
            assert all(b["mask"].dtype == torch.bool for b in got)
            assert [(b["y"].tolist(), b["mask"].tolist()) for b in got] == want[epoch], epoch


def test_skip_first_batches_goes_on_from_the_loader(tmp_path):
    """Accelerate's skip_first_batches of a feedline loader (what the HF
    Trainer calls on resume): restored at batch 5 of epoch 1, a skip of 5
    reads nothing again — the rest of epoch 1, as the uninterrupted run;
    a fresh loader reads and drops (a UserWarning says so); a skip of fewer
    batches than the restored state consumed is an error."""
    accelerate = pytest.importorskip("accelerate")
    paths = make_data(tmp_path)
    with dl(paths, deterministic=True) as whole:
        want = [[b["y"].tolist() for b in whole] for _ in range(3)]
    with dl(paths, deterministic=True) as first:
        list(first)
        it = iter(first)
        [next(it) for _ in range(5)]
        state = first.state_dict()
    with dl(paths, deterministic=True) as loader:
        loader.load_state_dict(state)
        loader.set_epoch(1)
        skipped = accelerate.skip_first_batches(loader, 5)
        assert len(skipped) == STEPS - 5
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing read and dropped
            assert [b["y"].tolist() for b in skipped] == want[1][5:]
        assert [b["y"].tolist() for b in loader] == want[2]
    with dl(paths, deterministic=True) as loader:
        loader.set_epoch(1)
        with pytest.warns(UserWarning, match="read and dropped 5"):
            got = [b["y"].tolist() for b in accelerate.skip_first_batches(loader, 5)]
        assert got == want[1][5:]
    with dl(paths, deterministic=True) as loader:
        loader.load_state_dict(state)
        with pytest.raises(ValueError, match="already consumed 5"):
            list(accelerate.skip_first_batches(loader, 3))


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")
def test_skip_first_batches_of_a_pinned_loader_pins_nothing_again(tmp_path, monkeypatch):
    """The torch DataLoader that skip_first_batches builds takes the feedline
    loader's pin_memory=True: its pinning step gets each batch back as it is
    (the tensors the loader pinned and moved, not a second copy — a tensor
    already on the GPU could not be pinned)."""
    accelerate = pytest.importorskip("accelerate")
    from torch.utils.data._utils.pin_memory import pin_memory

    paths = make_data(tmp_path)
    with dl(paths, deterministic=True) as whole:
        want = [b["y"].tolist() for b in whole]
    with force_pinned(monkeypatch, dl(paths, deterministic=True)) as loader:
        with pytest.warns(UserWarning, match="read and dropped 2"):
            got = list(accelerate.skip_first_batches(loader, 2))
        assert [b["y"].tolist() for b in got] == want[2:]
        for b in got:
            again = pin_memory(b)  # what torch's DataLoader does with pin_memory=True
            assert type(again) is dict and all(again[k] is b[k] for k in b)


# ------------------------------------------------------------ PyTorch Lightning

def lightning_fit(paths, tmp, *, deterministic, ckpt_path=None, callbacks=(), pinned=None):
    """The Lightning loop of docs/python.md: train_dataloader() returns a
    feedline.torch.DataLoader; Lightning calls its sampler's set_epoch,
    stops each epoch at len(), checkpoints its state_dict()."""
    import lightning.pytorch as pl

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
            self.seen = []  # (global step, epoch, ids) of every training step

        def train_dataloader(self):
            self.loader = ft.DataLoader(files=paths, batch_size=B, shuffle=64, seed=5,
                                        deterministic=deterministic, rank=0, world_size=1,
                                        pin_memory=False)
            if pinned is not None:
                pinned(self.loader)
            return self.loader

        def training_step(self, batch, batch_idx):
            self.seen.append((self.global_step, self.current_epoch, batch["y"].tolist()))
            return loss_of(self.net, batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=bool(callbacks), callbacks=list(callbacks),
                         num_sanity_val_steps=0, default_root_dir=str(tmp))
    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice (workers, logging interval)
        trainer.fit(model, ckpt_path=ckpt_path)
    model.loader.close()
    return model.seen


def by_epoch(seen):
    out = {}
    for _, epoch, ys in seen:
        out.setdefault(epoch, []).append(ys)
    return out


@pytest.mark.parametrize("pinned", [False, True])
def test_lightning_fit_trains_every_record_once_per_epoch(tmp_path, monkeypatch, pinned):
    """Trainer.fit for 4 epochs: every epoch has len() steps and every
    record once (it was 13, 0, 13, 0 steps before epochs ended with their
    last batch); each epoch in its own order (set_epoch reached)."""
    pytest.importorskip("lightning.pytorch")
    paths = make_data(tmp_path)
    hook = (lambda loader: force_pinned(monkeypatch, loader)) if pinned else None
    seen = lightning_fit(paths, tmp_path, deterministic=False, pinned=hook)
    epochs = by_epoch(seen)
    assert sorted(epochs) == list(range(EPOCHS))
    for e, batches in epochs.items():
        assert len(batches) == STEPS, e
        assert ids(batches) == list(range(N)), e
    assert [g for g, _, _ in seen] == list(range(EPOCHS * STEPS))
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize("deterministic", [True, False])
def test_lightning_resume_from_checkpoints(tmp_path, deterministic):
    """Checkpoints at every step and at every epoch's end (ModelCheckpoint);
    fit resumed with ckpt_path= from 3 of them — mid-epoch 1 (step 18), the
    last step of epoch 1 (step 26) and the end of epoch 2: the interrupted
    epoch's records are each trained once in all (the run up to the
    checkpoint, then the resumed one), every later epoch whole, and in
    deterministic mode the resumed run's batches are the uninterrupted
    run's at the same global steps."""
    pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.callbacks import ModelCheckpoint

    paths = make_data(tmp_path)
    steps = ModelCheckpoint(dirpath=tmp_path / "steps", filename="{step}", every_n_train_steps=1,
                            save_top_k=-1)
    ends = ModelCheckpoint(dirpath=tmp_path / "ends", filename="end-{epoch}", every_n_epochs=1,
                           save_on_train_epoch_end=True, save_top_k=-1)
    full = lightning_fit(paths, tmp_path / "full", deterministic=deterministic,
                         callbacks=[steps, ends])
    assert [g for g, _, _ in full] == list(range(EPOCHS * STEPS))
    points = [(tmp_path / "steps" / "step=18.ckpt", 18), (tmp_path / "steps" / "step=26.ckpt", 26),
              (tmp_path / "ends" / "end-epoch=2.ckpt", 3 * STEPS)]
    for ckpt, at in points:
        resumed = lightning_fit(paths, tmp_path / f"r{at}", deterministic=deterministic,
                                ckpt_path=str(ckpt))
        assert [g for g, _, _ in resumed] == list(range(at, EPOCHS * STEPS)), ckpt.name
        before, after = by_epoch(full[:at]), by_epoch(resumed)
        if at % STEPS:  # resumed mid-epoch
            e = at // STEPS
            assert ids(before[e] + after[e]) == list(range(N)), ckpt.name
        else:  # at an epoch's end: the resumed run begins with the next
            assert min(after) == at // STEPS and len(before[at // STEPS - 1]) == STEPS
        for e in range(-(-at // STEPS), EPOCHS):
            assert len(after[e]) == STEPS and ids(after[e]) == list(range(N)), (ckpt.name, e)
        if deterministic:
            assert resumed == full[at:], ckpt.name


# ------------------------------------------------------ Hugging Face Accelerate

def accelerate_loop(paths, out, *, deterministic, save_at=(), resume_from=None):
    """The Accelerate loop of docs/python.md: prepare() hands the feedline
    loader back as it is, register_for_checkpointing() puts its
    state_dict() in save_state(), load_state() restores it, and
    skip_first_batches() goes on from there (nothing read twice)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = ft.DataLoader(files=paths, batch_size=B, shuffle=64, seed=5,
                           deterministic=deterministic, pin_memory=False,
                           rank=accelerator.process_index, world_size=accelerator.num_processes)
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    net, opt, prepared = accelerator.prepare(net, opt, loader)
    assert prepared is loader  # not wrapped, not re-sharded
    accelerator.register_for_checkpointing(loader)
    step = 0
    if resume_from is not None:
        accelerator.load_state(resume_from)
        step = int(os.path.basename(resume_from).split("-")[1])
    first_epoch, skip = divmod(step, len(loader))
    seen = []
    for epoch in range(first_epoch, EPOCHS):
        loader.set_epoch(epoch)
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for batch in batches:
            loss = loss_of(net, batch)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            seen.append((step, epoch, batch["y"].tolist()))
            step += 1
            if step in save_at:
                accelerator.save_state(os.path.join(out, f"step-{step}"))
    loader.close()
    return seen


@pytest.mark.parametrize("deterministic", [True, False])
def test_accelerate_prepare_save_state_load_state_skip_first_batches(tmp_path, deterministic):
    """4 epochs, every record once per epoch; save_state at steps 18 (mid
    epoch 1), 26 (an epoch's last) and 39 (epoch 2's last); resumed from each with
    load_state + skip_first_batches: the interrupted epoch's records once
    in all, the later epochs whole, deterministic: the same batches at the
    same steps."""
    pytest.importorskip("accelerate")
    paths = make_data(tmp_path)
    points = (18, 26, 3 * STEPS)
    full = accelerate_loop(paths, str(tmp_path), deterministic=deterministic, save_at=points)
    epochs = by_epoch(full)
    assert all(len(epochs[e]) == STEPS and ids(epochs[e]) == list(range(N)) for e in range(EPOCHS))
    for at in points:
        resumed = accelerate_loop(paths, str(tmp_path / "again"), deterministic=deterministic,
                                  resume_from=str(tmp_path / f"step-{at}"))
        assert [g for g, _, _ in resumed] == list(range(at, EPOCHS * STEPS)), at
        before, after = by_epoch(full[:at]), by_epoch(resumed)
        if at % STEPS:
            e = at // STEPS
            assert ids(before[e] + after[e]) == list(range(N)), at
        for e in range(-(-at // STEPS), EPOCHS):
            assert ids(after[e]) == list(range(N)), (at, e)
        if deterministic:
            assert resumed == full[at:], at


# ---------------------------------------------------------- the HF Trainer

def hf_train(paths, out, *, deterministic, save_at=(), resume_from=None):
    """The HF Trainer loop of docs/python.md: get_train_dataloader() returns a
    feedline.torch.DataLoader, feedline.torch.hf_trainer_callback(loader)
    keeps its state with each checkpoint; the Trainer calls set_epoch on it
    and, on resume, skip_first_batches."""
    import transformers

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
            self.seen = []

        def forward(self, x, y, **rest):
            self.seen.append(y.tolist())
            return {"loss": loss_of(self.lin, {"x": x, "y": y})}

    loader = ft.DataLoader(files=paths, batch_size=B, shuffle=64, seed=5,
                           deterministic=deterministic, pin_memory=False, rank=0, world_size=1)

    class FeedlineTrainer(transformers.Trainer):
        def get_train_dataloader(self):
            return loader

    class SaveAt(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_save = state.global_step in save_at

    args = transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=B, num_train_epochs=EPOCHS,
        learning_rate=1e-3, save_strategy="steps", save_steps=10_000, logging_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, seed=0)
    torch.manual_seed(0)
    net = Net()
    trainer = FeedlineTrainer(model=net, args=args,
                              callbacks=[ft.hf_trainer_callback(loader), SaveAt()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=resume_from)
    loader.close()
    first = trainer.state.global_step - len(net.seen)
    return [(first + i, (first + i) // STEPS, ys) for i, ys in enumerate(net.seen)]


@pytest.mark.parametrize("deterministic", [True, False])
def test_hf_trainer_resume_from_checkpoint(tmp_path, deterministic):
    """The Trainer for 4 epochs: every record once per epoch; checkpoints at
    steps 18 (mid epoch 1), 26 (epoch 1's last) and 39 (epoch 2's last); train(resume_from_checkpoint=) from each: the
    interrupted epoch's records once in all, the later epochs whole,
    deterministic: the uninterrupted run's batches at the same steps."""
    pytest.importorskip("transformers")
    paths = make_data(tmp_path)
    points = (18, 26, 3 * STEPS)
    out = str(tmp_path / "out")
    full = hf_train(paths, out, deterministic=deterministic, save_at=points)
    assert [g for g, _, _ in full] == list(range(EPOCHS * STEPS))
    epochs = by_epoch(full)
    assert all(ids(epochs[e]) == list(range(N)) for e in range(EPOCHS))
    for at in points:
        resumed = hf_train(paths, out, deterministic=deterministic,
                           resume_from=os.path.join(out, f"checkpoint-{at}"))
        assert [g for g, _, _ in resumed] == list(range(at, EPOCHS * STEPS)), at
        before, after = by_epoch(full[:at]), by_epoch(resumed)
        if at % STEPS:
            e = at // STEPS
            assert ids(before[e] + after[e]) == list(range(N)), at
        for e in range(-(-at // STEPS), EPOCHS):
            assert ids(after[e]) == list(range(N)), (at, e)
        if deterministic:
            assert resumed == full[at:], at


# ------------------------------------------------------------ torchrun DDP

WORKER = os.path.join(os.path.dirname(__file__), "ddp_worker.py")


def torchrun(nproc, out, paths, **env):
    e = dict(os.environ, OMP_NUM_THREADS="1", FEEDLINE_EQUALIZE="pad,drop", FEEDLINE_EPOCHS="2",
             **{k: str(v) for k, v in env.items()})
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(nproc), WORKER, str(out), *paths]
    # A rank with a step more or fewer than the others would hang in its
    # all_reduce: the timeout turns that into a failure.
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


def logs(out, mode, run, nproc):
    return [json.load(open(os.path.join(out, f"{mode}-{run}-rank{r}.json"))) for r in range(nproc)]


@pytest.mark.parametrize("nproc", [2, 3])
def test_torchrun_ddp_ranks_equal_every_record_once_resume_exact(tmp_path, nproc):
    """torchrun --nproc_per_node 2 and 3, gloo, ranks from the environment,
    uneven files: with equalize="pad" and "drop" every rank runs the same
    steps each epoch (an all_reduce each step: no hang), "pad": every record
    once across the ranks in the real rows ("mask"), "drop": none twice and
    no "mask"; stopped after 2 steps into epoch 1 and resumed in new
    processes from every rank's state_dict(): each rank's batches are the
    uninterrupted run's."""
    paths = make_data(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    torchrun(nproc, out, paths, FEEDLINE_STOP_IN_EPOCH1=2)
    torchrun(nproc, out, paths, FEEDLINE_RESUME=1)
    for mode in ("pad", "drop"):
        full = logs(out, mode, "full", nproc)
        for e in ("0", "1"):
            steps = {log["epochs"][e]["steps"] for log in full}
            assert len(steps) == 1, (mode, e, steps)
            assert {log["epochs"][e]["len"] for log in full} == steps, (mode, e)
            real = sorted(y for log in full for y in log["epochs"][e]["ids"])
            if mode == "pad":
                assert real == list(range(N)), (mode, e)
                assert sum(log["epochs"][e]["padding"] for log in full) > 0
            else:
                assert len(real) == len(set(real)) and set(real) <= set(range(N)), (mode, e)
                assert all(log["epochs"][e]["no_mask"] for log in full)
        stopped = logs(out, mode, "stopped", nproc)
        resumed = logs(out, mode, "resumed", nproc)
        for r in range(nproc):
            s, res, f = stopped[r]["epochs"], resumed[r]["epochs"], full[r]["epochs"]
            assert len(s["1"]["batches"]) == 2 and s["0"]["batches"] == f["0"]["batches"]
            assert s["1"]["batches"] + res["1"]["batches"] == f["1"]["batches"], (mode, r)
            assert sorted(res) == ["1"], (mode, r)
        if mode == "pad":
            ep1 = sorted(y for r in range(nproc) for y in stopped[r]["epochs"]["1"]["ids"]
                         + resumed[r]["epochs"]["1"]["ids"])
            assert ep1 == list(range(N))
