"""feedline for PyTorch training loops: a ``DataLoader``-shaped adapter and
an ``IterableDataset``. torch is imported when these are used (``import
feedline`` never imports it).

    import feedline.torch
    loader = feedline.torch.DataLoader(files="data/train-*.tar", batch_size=256,
                                       transform="imagenet-train", device="cuda")
    for epoch in range(10):
        loader.set_epoch(epoch)              # as DistributedSampler.set_epoch
        for batch in loader:                 # {"jpg": Tensor[256, 3, 224, 224], "cls": Tensor[256]}
            loss = model(batch["jpg"]).sum()
        torch.save(loader.state_dict(), "loader.pt")   # StatefulDataLoader's names

Batches are dicts of ``torch.Tensor``: each numeric field's tensor views
the batch's buffer (DLPack, no copy) when ``pin_memory`` is off or there is
no CUDA; ragged fields add ``NAME.offsets`` (offsets layout) or
``NAME.lengths`` (padded layout); bytes fields stay lists of ``bytes``;
a loader that may pad (``equalize="pad"``, ``pack=``) adds ``"mask"``.

Under the trainers (PyTorch Lightning, Accelerate, the Hugging Face
Trainer): an epoch ends with its last batch, ``loader.sampler.set_epoch``
is where Lightning calls it, ``prepare()`` hands the loader back as it is,
``skip_first_batches`` goes on from the loader's position, and
``hf_trainer_callback(loader)`` keeps its state with the HF Trainer's
checkpoints (docs/python.md, "Under the trainers").
"""

from __future__ import annotations

import queue
import threading
import warnings
from typing import Any, Iterator, Mapping, Optional

import feedline
from feedline import _native
from feedline._native import FeedlineError, Loader

__all__ = ["DataLoader", "IterableDataset", "to_tensors", "hf_trainer_callback"]


def _torch():
    import torch

    return torch


def _converter(torch):
    """The DLPack importer that takes a capsule: torch's C entry point
    when there is one (no Python-level checks per field), else the public
    ``torch.from_dlpack``."""
    return getattr(torch._C, "_from_dlpack", None) or torch.from_dlpack


def _ragged(schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, "offsets" | "padded") of every ragged field of `schema`."""
    out = []
    for name, spec in schema.items():
        if len(spec) == 3:
            out.append((name, spec[2]))
    return out


def _add_ragged(torch, tensors: dict, batch, ragged) -> dict:
    for name, layout in ragged:
        if layout == "padded":
            tensors[name + ".lengths"] = torch.as_tensor(batch.lengths(name).copy())
        else:
            tensors[name + ".offsets"] = torch.as_tensor(batch.offsets(name).copy())
    return tensors


def to_tensors(batch, device=None, non_blocking: bool = False) -> dict:
    """One batch (a ``feedline.Batch``) as a dict of tensors: numeric fields
    view the batch's buffer (no copy), ragged fields add ``NAME.offsets`` or
    ``NAME.lengths``, bytes fields stay lists of bytes; ``device=`` moves
    the tensors there."""
    torch = _torch()
    tensors = batch._dlpack_dict(_converter(torch))
    ragged = [(name, "padded" if batch.lengths(name) is not None else "offsets")
              for name in batch if batch.offsets(name) is not None or batch.lengths(name) is not None]
    _add_ragged(torch, tensors, batch, ragged)
    if device is not None:
        tensors = _to_device(tensors, torch.device(device), non_blocking)
    return tensors


def _add_mask(torch, tensors: dict, batch) -> dict:
    """``"mask"``: a bool tensor ``[B]``, True for a real row, False for a
    padding row (``equalize="pad"``, packing)."""
    tensors["mask"] = torch.from_numpy(batch.mask)
    return tensors


def _no_mask(torch, tensors: dict, batch) -> dict:
    """A loader that was not built to pad (as far as the adapter knows):
    a padded batch is an error, not rows a loss would count as real."""
    if batch.padded_rows:
        raise FeedlineError(
            f"feedline.torch: a batch with {batch.padded_rows} padding rows (of {batch.size}) came "
            "from a loader given as loader=: the adapter cannot tell that it pads, so its "
            "batches carry no \"mask\" -- give mask=True (every batch then has \"mask\", a bool "
            "tensor [B], True for a real row)")
    return tensors


def _to_device(tensors: dict, device, non_blocking: bool) -> dict:
    return {k: (v.to(device, non_blocking=non_blocking) if hasattr(v, "to") else v)
            for k, v in tensors.items()}


def _pin(tensors: dict) -> dict:
    return {k: (v.pin_memory() if hasattr(v, "pin_memory") else v) for k, v in tensors.items()}


def _accelerator(torch) -> bool:
    """True when page-locked memory means something: a CUDA device (or
    another accelerator torch knows)."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "is_available"):
        try:
            return bool(acc.is_available())
        except Exception:  # noqa: BLE001 - an accelerator backend that cannot answer
            pass
    return bool(torch.cuda.is_available())


_STOP = object()


class _PinnedEpoch:
    """One epoch with pinned memory: a thread takes each batch from the
    loader (as tensors viewing it), copies them into page-locked memory
    (``Tensor.pin_memory()``) and queues them, at most `depth` ahead; the
    consumer gets them in order (moved to `device` with ``non_blocking=True``
    when given). The batches the thread fetches ahead are not taken for
    checkpoints until the consumer gets them: ``state_dict()`` covers
    exactly the batches consumed. A loop left early (``break``) hands what
    the thread fetched ahead to the next loop (`pending`), which yields it
    first: nothing of the epoch is skipped. The thread starts at the first
    ``next()``, once `pending` is used up (an ``iter()`` alone fetches
    nothing)."""

    def __init__(self, dl: "DataLoader", pending=(), depth: int = 2):
        self._dl = dl
        self._loader = dl.loader
        self._device = dl.device
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._pending = list(pending)
        self._leftover: list = []  # what the thread held when stopped
        self._thread: Optional[threading.Thread] = None
        self._done = False
        torch = _torch()
        ragged = dl._ragged
        mask = dl._mask_rows

        def post(tensors, batch):
            return _pin(mask(torch, _add_ragged(torch, tensors, batch, ragged), batch)), batch

        # The epoch's iterator now (a closed loader raises here, at iter()),
        # its thread at the first next().
        self._epoch = self._loader._epoch(convert=_converter(torch), post=post, untracked=True)

    def _start(self):
        self._thread = threading.Thread(target=self._run, name="feedline-pin-memory", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        self._leftover.append(item)  # stopped: kept for the next loop
        return False

    def _run(self):
        try:
            for item in self._epoch:
                if not self._put(("item", item)):
                    return
            self._put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put(("error", e))

    def __iter__(self):
        return self

    def _get(self):
        if self._pending:
            return self._pending.pop(0)
        if self._done:
            return ("end", None)
        if self._thread is None:
            self._start()
        while True:
            try:
                return self._queue.get(timeout=0.05)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return ("end", None)

    def __next__(self):
        while True:
            kind, item = self._get()
            if kind == "end":
                self._done = True
                self._stop.set()
                raise StopIteration
            if kind == "error":
                self._done = True
                self._stop.set()
                raise item
            if isinstance(item, int):
                self._loader._record(item)  # a pass ended: taken now
                continue
            tensors, batch = item
            self._loader._record(batch)
            if self._device is not None:
                tensors = _to_device(tensors, self._device, True)
            return tensors

    def close(self) -> list:
        """Stop the thread; what it fetched ahead and the consumer did not
        get is not taken (a checkpoint does not count it) and is returned,
        in order, for the next loop of the same epoch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        rest = list(self._pending)
        while True:
            try:
                rest.append(self._queue.get_nowait())
            except queue.Empty:
                break
        rest.extend(self._leftover)
        self._pending, self._leftover = [], []
        if self._done:
            return []
        if all(kind == "end" or (kind == "item" and isinstance(item, int)) for kind, item in rest):
            # Only the epoch's end was fetched ahead (its last batch was
            # consumed): the epoch ended with that batch. The end of the
            # pass is taken now, and the next loop starts the next epoch.
            for kind, item in rest:
                if kind == "item":
                    self._loader._record(item)
            self._done = bool(rest)
            return []
        return rest

    @property
    def started(self) -> bool:
        """True once it fetched anything or has anything to hand out (a
        ``set_epoch``/``load_state_dict`` before the first ``next()`` leaves
        an iterator that did not start bound to the new epoch)."""
        return self._thread is not None or bool(self._pending)

    def __del__(self):
        try:
            self._stop.set()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _keep(torch, tensors: dict, batch) -> dict:
    return tensors


def _as_is(batch):
    """The DataLoader's ``collate_fn``: a batch is whole as it comes."""
    return batch


def _consumed_in_epoch(state: Mapping[str, Any]) -> int:
    """Batches of the open (or next) epoch that `state` (a ``state_dict()``)
    says were consumed: its first pass not complete, if any of it was."""
    for p in state.get("passes", ()):
        if p.get("pass") == state.get("pass") and not p.get("complete"):
            return int(p.get("batches", 0))
    return 0


class _EpochSampler:
    """``DataLoader.sampler`` (and ``DataLoader.batch_sampler.sampler``):
    what PyTorch Lightning (``_set_sampler_epoch``) and Accelerate call
    ``set_epoch`` on at each epoch; it calls the loader's ``set_epoch``.
    It samples nothing: feedline orders the records itself."""

    def __init__(self, dl: "DataLoader"):
        self._dl = dl
        self.epoch: Optional[int] = None

    def set_epoch(self, epoch: int) -> None:
        self._dl.set_epoch(epoch)
        self.epoch = int(epoch)

    def __iter__(self):
        raise TypeError("feedline.torch.DataLoader.sampler has no indices to give: it is there for "
                        "set_epoch(n) (the trainers call it each epoch); iterate the DataLoader")

    def __len__(self) -> int:
        return len(self._dl)


class _Position:
    """A batch by its number within one loop over ``DataLoader.batch_sampler``."""

    __slots__ = ("walk", "index")

    def __init__(self, walk: "_Walk", index: int):
        self.walk, self.index = walk, index

    def __repr__(self) -> str:
        return f"<feedline batch {self.index} of the epoch>"


class _Pinned(dict):
    """A batch the DataLoader pinned (and moved) already: the torch
    DataLoader that ``skip_first_batches`` builds with this one's
    ``pin_memory=True`` asks it for ``pin_memory()``, and gets it as it is
    (not a second page-locked copy; a tensor already moved to the device
    could not be pinned at all)."""

    def pin_memory(self, device=None) -> dict:
        return dict(self)


class _Walk:
    """One loop over ``DataLoader.batch_sampler``: batch `i` of the open (or
    next) epoch for each position `i` asked of ``DataLoader.dataset``. The
    first one asked says how many were skipped (Accelerate's
    ``skip_first_batches``, which the Hugging Face Trainer calls on resume):
    the batches the loader already consumed of the epoch (a restored
    ``state_dict()``) are not read again; any others before it are read
    and dropped."""

    def __init__(self, dl: "DataLoader"):
        self._dl = dl
        self._it: Optional[Iterator[dict]] = None
        self._next = 0

    def batch(self, index: int) -> dict:
        if self._it is None:
            consumed = _consumed_in_epoch(self._dl.state_dict())
            if index < consumed:
                raise ValueError(
                    f"feedline.torch.DataLoader: batch {index} of the epoch was asked for (a skip of "
                    f"{index} batches: skip_first_batches), but the loader had already consumed "
                    f"{consumed} batches of this epoch (a restored state_dict()): a skip goes on from "
                    f"where the loader is, so skip {consumed} (or none, and iterate the loader), "
                    "not fewer")
            self._it = iter(self._dl)
            self._next = consumed
            if index > consumed:
                warnings.warn(
                    f"feedline.torch.DataLoader: skipping {index} batches read and dropped "
                    f"{index - consumed} (the loader had consumed {consumed} of this epoch): with a "
                    "restored state_dict() the loader goes on where it stood without reading; "
                    "make sure the loader runs the trainer's epoch (set_epoch)",
                    UserWarning, stacklevel=2)
        if index < self._next:
            raise ValueError(f"feedline.torch.DataLoader: batch {index} of the epoch was asked for "
                             f"after batch {self._next - 1}: batches come in order, once")
        while True:
            b = next(self._it)  # StopIteration at the epoch's end ends the loop
            self._next += 1
            if self._next > index:
                return _Pinned(b) if self._dl.pin_memory else b


class _BatchSampler:
    """``DataLoader.batch_sampler``: ``sampler`` (whose ``set_epoch`` reaches
    the loader), ``batch_size``, ``len()``; iterated (by a torch DataLoader
    that Accelerate's ``skip_first_batches`` builds from this one's
    ``dataset`` and ``batch_sampler``) it numbers the epoch's batches, and
    ``dataset`` gives each (see ``_Walk``)."""

    def __init__(self, dl: "DataLoader", sampler: _EpochSampler):
        self._dl = dl
        self.sampler = sampler
        self.batch_size = dl.batch_size
        self.drop_last = False

    def __iter__(self):
        walk = _Walk(self._dl)
        i = 0
        while True:  # the epoch's end comes from the loader (see _Walk.batch)
            yield _Position(walk, i)
            i += 1

    def __len__(self) -> int:
        return len(self._dl)


class _Batches:
    """``DataLoader.dataset``: the batches of the epoch by position (what a
    torch DataLoader built on ``dataset`` and ``batch_sampler`` asks for,
    one ``_Position`` at a time); nothing else is indexable."""

    def __init__(self, dl: "DataLoader"):
        self._dl = dl

    def __getitems__(self, position):
        if not isinstance(position, _Position):
            raise TypeError(
                "feedline.torch.DataLoader.dataset gives the loader's batches by the positions its "
                f"batch_sampler yields, not {type(position).__name__}: iterate the DataLoader")
        return position.walk.batch(position.index)

    def __getitem__(self, index):
        return self.__getitems__(index)


class DataLoader:
    """Where a training loop used ``torch.utils.data.DataLoader``: batches
    of ``torch.Tensor`` from a ``feedline.Loader`` (every keyword of
    ``feedline.Loader`` is taken: ``shuffle``, ``seed``, ``passes``,
    ``readers``, ``workers``, ``rank``/``world_size``, ``resume``, ...).

    - ``pin_memory=True`` (the default): a background thread copies each
      batch once into page-locked memory, so that
      ``.to("cuda", non_blocking=True)`` overlaps the step; without CUDA it
      is a no-op (a ``UserWarning`` says so, as PyTorch's DataLoader
      warns) and the tensors view the batch's buffer, as with
      ``pin_memory=False`` (zero-copy: do not write to them).
    - ``device=``: each batch is moved there (``non_blocking`` when pinned).
    - ``len()``, ``set_epoch(n)``, ``state_dict()``/``load_state_dict(state)``
      (torchdata's ``StatefulDataLoader`` names; the state is a
      JSON-serialisable dict), and epochs by iteration: each loop is the
      next epoch; an epoch ends with its last batch (the next loop is the
      next epoch, whether or not the loop pulled the end).
    - ``mask``: every batch of a loader that may pad (``equalize="pad"``,
      ``pack=``) has ``"mask"``, a bool tensor ``[B]``, True for a real
      row (``mask=None``: from those settings; give ``mask=True`` with a
      ``loader=`` that pads).
    - ``sampler`` and ``batch_sampler.sampler`` (one object): its
      ``set_epoch(n)`` is the loader's, where PyTorch Lightning and
      Accelerate call it each epoch; ``dataset``, ``batch_sampler`` and
      ``collate_fn`` make Accelerate's ``skip_first_batches`` (the Hugging
      Face Trainer's on resume) go on from the loader's position: the
      batches a restored state consumed are not read again.
    """

    # Read by code that takes a torch DataLoader's settings (Accelerate's
    # skip_first_batches): batches are made in the loader's own threads.
    prefetch_factor = None
    collate_fn = staticmethod(_as_is)

    def __init__(
        self,
        files=None,
        batch_size: int = 256,
        transform: Optional[str] = None,
        pin_memory: bool = True,
        device=None,
        *,
        loader: Optional[Loader] = None,
        mask: Optional[bool] = None,
        **loader_kwargs,
    ):
        torch = _torch()
        if mask is not None and not isinstance(mask, bool):
            raise TypeError(f"feedline.torch.DataLoader: mask= takes True, False or None, not {mask!r}")
        made = loader is None
        if loader is None:
            if files is None:
                raise TypeError("feedline.torch.DataLoader: give files= (or loader=)")
            pads = loader_kwargs.get("equalize") == "pad" or loader_kwargs.get("pack") is not None
            if mask is False and pads:
                raise ValueError("feedline.torch.DataLoader: mask=False with a loader that pads "
                                 "(equalize=\"pad\" or pack=): a loss could not leave its padding "
                                 "rows out")
            loader = Loader(files=files, batch_size=batch_size, transform=transform,
                            **loader_kwargs)
        elif files is not None or loader_kwargs or transform is not None:
            raise TypeError("feedline.torch.DataLoader: give files= and the Loader's settings, "
                            "or loader=, not both")
        else:
            pads = None  # not known: a padded batch without mask=True raises
        self.loader = loader
        self.batch_size = batch_size
        self.device = torch.device(device) if device is not None else None
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not _accelerator(torch):
            warnings.warn(
                "feedline.torch.DataLoader: 'pin_memory' is set but no accelerator is found: "
                "page-locked memory is not used (the tensors view the batches, no copy)",
                UserWarning, stacklevel=2)
            self.pin_memory = False
        self._convert = _converter(torch)
        try:
            schema = loader.schema
            self._ragged = _ragged(schema)
        except FeedlineError:
            schema = {}
            self._ragged = []  # a map= whose schema comes with the first batch
        self.mask = bool(mask) if mask is not None else bool(pads)
        if self.mask and "mask" in schema:
            if made:
                loader.close()
            raise ValueError("feedline.torch.DataLoader: the data has a field named \"mask\", and the "
                             "batches of a loader that pads carry one: rename the field")
        if self.mask:
            self._mask_rows = _add_mask
        elif pads is None and mask is None:
            self._mask_rows = _no_mask
        else:
            self._mask_rows = _keep
        self._pinned: Optional[_PinnedEpoch] = None
        self.sampler = _EpochSampler(self)
        self.batch_sampler = _BatchSampler(self, self.sampler)
        self.dataset = _Batches(self)
        device = self.device
        ragged = self._ragged
        mask_rows = self._mask_rows

        def post(tensors, batch):
            if ragged:
                _add_ragged(torch, tensors, batch, ragged)
            tensors = mask_rows(torch, tensors, batch)
            if device is not None:
                tensors = _to_device(tensors, device, False)
            return tensors

        self._post = post if (ragged or device is not None or mask_rows is not _keep) else None

    def __iter__(self) -> Iterator[dict]:
        """The next epoch's batches (or the rest of one a loop left early)."""
        if self.pin_memory:
            pending = self._pinned.close() if self._pinned is not None else []
            self._pinned = _PinnedEpoch(self, pending)
            return self._pinned
        return self.loader._epoch(convert=self._convert, post=self._post)

    def __len__(self) -> int:
        """Batches in the epoch (a TypeError for pushed data and for a packing
        loader, whose batches are known only as the pass runs)."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The next loop runs epoch `epoch` (see ``feedline.Loader.set_epoch``);
        an iterator made by ``iter()`` that has given nothing yet runs it."""
        self._stop_pinned()
        self.loader.set_epoch(epoch)
        self.sampler.epoch = epoch

    def state_dict(self) -> dict:
        """Where the batches consumed so far leave off (JSON-serialisable)."""
        return self.loader.state_dict()

    def load_state_dict(self, state) -> None:
        """Go on from `state` (a ``state_dict()``); an iterator made by
        ``iter()`` that has given nothing yet goes on from there."""
        self._stop_pinned()
        self.loader.load_state_dict(state)

    def _stop_pinned(self):
        # An iterator that has fetched nothing is kept: the native iterator
        # it holds is bound to the epoch that the next loop runs.
        if self._pinned is not None and self._pinned.started:
            self._pinned.close()
            self._pinned = None

    @property
    def closed(self) -> bool:
        return self.loader.closed

    def close(self) -> None:
        if self._pinned is not None:
            self._pinned.close()
            self._pinned = None
        self.loader.close()

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def hf_trainer_callback(loader: "DataLoader"):
    """A ``transformers.TrainerCallback`` that keeps `loader` (a
    ``feedline.torch.DataLoader`` that ``Trainer.get_train_dataloader()``
    returns) with the Hugging Face Trainer's checkpoints: at each save it
    writes ``loader.state_dict()`` into the checkpoint's folder
    (``feedline-loader-rank{R}.json`` beside the model, one per rank), and
    when ``trainer.train(resume_from_checkpoint=...)`` begins at a saved
    step it loads it, so that the Trainer's ``skip_first_batches`` finds the
    loader where it stood (nothing read again) and in the epoch it was in.
    The Trainer saves no data-loader state of its own: without this a new
    process's loader runs its first epoch, and the skip reads and drops
    batches of it (a ``UserWarning`` says so). transformers is imported
    here."""
    import json
    import os

    import transformers
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not isinstance(loader, DataLoader):
        raise TypeError("feedline.torch.hf_trainer_callback: give the feedline.torch.DataLoader that "
                        f"get_train_dataloader() returns, not {type(loader).__name__}")

    class FeedlineLoaderCallback(transformers.TrainerCallback):
        def __init__(self):
            self.loader = loader

        def _path(self, args, state) -> str:
            folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            return os.path.join(folder, f"feedline-loader-rank{loader.loader.rank}.json")

        def on_save(self, args, state, control, **kwargs):
            path = self._path(args, state)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            loader.loader.checkpoint(path)

        def on_train_begin(self, args, state, control, **kwargs):
            if state.global_step == 0:
                return  # a run from the start
            path = self._path(args, state)
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"feedline.torch.hf_trainer_callback: the Trainer resumes at global step "
                    f"{state.global_step}, but {path} (the loader's state, written with that "
                    "checkpoint) is not there: resume from a checkpoint saved with this callback, "
                    "in args.output_dir")
            with open(path) as f:
                loader.load_state_dict(json.load(f))

    return FeedlineLoaderCallback()


def _worker_shard(rank: int, world_size: int):
    """(rank, world size) of this DataLoader worker: each rank's share split
    again between its workers (`get_worker_info()`)."""
    torch = _torch()
    info = torch.utils.data.get_worker_info()
    if info is None:
        return rank, world_size
    return rank * info.num_workers + info.id, world_size * info.num_workers


class IterableDataset:
    """For code that keeps its own ``torch.utils.data.DataLoader(dataset,
    batch_size=None, num_workers=N)``: each worker makes its own
    ``feedline.Loader`` when it starts iterating (never before the fork),
    reading its share of this rank's data — rank ``r`` of ``W``, worker
    ``i`` of ``N`` reads shard ``r * N + i`` of ``W * N`` — so every
    batch comes once across the workers. Each item is a dict of tensors
    (as ``feedline.torch.DataLoader`` gives, ``"mask"`` included when the
    loader pads).

    Epochs: the workers iterate epoch ``set_epoch(n)`` (default 0, then
    the next one each time a process iterates it again, whether or not the
    last iteration reached its end: with ``persistent_workers=True`` or
    ``num_workers=0``); workers made anew
    every epoch get the epoch from the dataset they are copied from, so call
    ``set_epoch(epoch)`` before each epoch there, as with
    ``DistributedSampler``.
    """

    def __init__(self, files, batch_size: int = 256, **loader_kwargs):
        self.files = files
        self.batch_size = batch_size
        self.loader_kwargs = dict(loader_kwargs)
        self.epoch = 0
        # The shard's one rule (each of rank and world_size not given from
        # RANK / WORLD_SIZE) is the Loader's: a mistake is refused here,
        # before any worker starts, with the Loader's sentence.
        _native._shard(self.loader_kwargs.get("rank"), self.loader_kwargs.get("world_size"))

    def __class_getitem__(cls, item):
        return cls

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _shard(self):
        kw = self.loader_kwargs
        rank, world, from_env = _native._shard(kw.get("rank"), kw.get("world_size"))
        if from_env and world > 1:
            msg = (f"feedline.torch.IterableDataset: rank={rank} and world_size={world} were "
                   f"taken from the environment (RANK, WORLD_SIZE): it reads 1/{world} of the "
                   f"data ({100 / world:.1f}%) -- pass rank=0, world_size=1 to read all of it")
            warnings.warn(msg, UserWarning, stacklevel=3)
        return rank, world

    def _loader(self, epoch: int) -> Loader:
        rank, world = self._shard()
        rank, world = _worker_shard(rank, world)
        kw = dict(self.loader_kwargs)
        kw.update(rank=rank, world_size=world)
        kw.setdefault("passes", None)
        loader = Loader(files=self.files, batch_size=self.batch_size, **kw)
        if epoch:
            loader.set_epoch(epoch)
        return loader

    def __iter__(self):
        torch = _torch()
        # The epoch is taken when the iteration begins: the next one runs
        # the next epoch whether or not this one is iterated to its end (a
        # trainer that stops at len() batches never pulls it).
        epoch = self.epoch
        self.epoch += 1
        loader = self._loader(epoch)
        convert = _converter(torch)
        try:
            ragged = _ragged(loader.schema)
        except FeedlineError:
            ragged = []
        kw = self.loader_kwargs
        pads = kw.get("equalize") == "pad" or kw.get("pack") is not None

        def post(tensors, batch):
            if ragged:
                _add_ragged(torch, tensors, batch, ragged)
            return _add_mask(torch, tensors, batch) if pads else tensors

        try:
            yield from loader._epoch(convert=convert, post=post if (ragged or pads) else None)
        finally:
            loader.close()

    def __len__(self) -> int:
        """Batches of one epoch over all the workers of this rank is not
        known before the workers start; len() is this rank's batches when
        read by one process."""
        rank, world = self._shard()
        kw = dict(self.loader_kwargs)
        kw.update(rank=rank, world_size=world)
        kw.setdefault("passes", None)
        with Loader(files=self.files, batch_size=self.batch_size, **kw) as loader:
            return len(loader)


def _register_iterable_dataset():
    """Make IterableDataset a torch.utils.data.IterableDataset (torch's
    DataLoader checks for it) once torch is importable."""
    global IterableDataset
    torch = _torch()
    base = torch.utils.data.IterableDataset
    if not issubclass(IterableDataset, base):
        IterableDataset = type("IterableDataset", (IterableDataset, base), {
            "__doc__": IterableDataset.__doc__, "__module__": __name__,
            "__qualname__": "IterableDataset"})


try:
    _register_iterable_dataset()
except ImportError as _e:  # torch not installed: the module still imports
    _IMPORT_ERROR = _e
