"""feedline.torch: the DataLoader-shaped adapter (dicts of tensors, zero-copy
without pinned memory, len(), epochs, set_epoch, state_dict /
load_state_dict, pin_memory without CUDA, device=) and the IterableDataset
under torch's own DataLoader with workers. Runs where torch is installed
(./test.sh installs it)."""

import json
import warnings

import numpy as np
import pytest

import feedline
from helpers import make_npz, write_tar, write_tfrecord

torch = pytest.importorskip("torch")
import feedline.torch as ft  # noqa: E402

N = 200


def dl(paths, **kw):
    s = dict(files=paths, batch_size=16, shuffle=40, seed=3, rank=0, world_size=1,
             pin_memory=False)
    s.update(kw)
    return ft.DataLoader(**s)


def wait_until(cond, deadline_s=30.0):
    """Poll `cond` until it holds (True) or `deadline_s` passes (False)."""
    import time
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def labels(batches):
    return [y for b in batches for y in b["y"].tolist()]


def test_import_feedline_does_not_import_torch():
    import subprocess
    import sys
    code = ("import sys, feedline; assert 'torch' not in sys.modules and 'jax' not in sys.modules;"
            "feedline.torch; assert 'torch' in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_batches_are_dicts_of_tensors_viewing_the_batch(tmp_path):
    paths = make_npz(tmp_path)
    with dl(paths) as loader:
        assert len(loader) == 13
        got = []
        for b in loader:
            assert set(b) == {"x", "y"}
            x, y = b["x"], b["y"]
            assert isinstance(x, torch.Tensor) and x.dtype == torch.float32
            assert y.dtype == torch.int64 and x.shape == (y.shape[0], 4)
            assert torch.equal(x[:, 0], y.to(torch.float32))
            # Zero-copy: the storage is the batch buffer torch was handed
            # (DLPack), not one torch allocated (those are resizable).
            assert not x.untyped_storage().resizable()
            assert x.data_ptr() % 64 == 0
            got.append(b)
        assert len(got) == 13
    assert sorted(labels(got)) == list(range(N))
    # The tensors outlive the loader and keep their values.
    assert sorted(labels(got)) == list(range(N))


def test_to_tensors_shares_the_batch_memory(tmp_path):
    paths = make_npz(tmp_path)
    with feedline.Loader(files=paths, batch_size=16, rank=0, world_size=1) as loader:
        for b in loader:
            t = ft.to_tensors(b)
            assert t["x"].data_ptr() == b["x"].ctypes.data
            assert t["y"].data_ptr() == b["y"].ctypes.data
            assert np.array_equal(t["x"].numpy(), b["x"])


def test_epochs_set_epoch_and_len(tmp_path):
    paths = make_npz(tmp_path)
    with dl(paths, deterministic=True) as loader:
        epochs = [[b["y"].tolist() for b in loader] for _ in range(3)]
        assert all(len(e) == len(loader) for e in epochs)
    for e in epochs:
        assert sorted(y for ys in e for y in ys) == list(range(N))
    assert epochs[0] != epochs[1]
    with dl(paths, deterministic=True) as loader:
        loader.set_epoch(2)
        assert [b["y"].tolist() for b in loader] == epochs[2]


@pytest.mark.parametrize("stop_after", [3, 13])
def test_state_dict_and_load_state_dict(tmp_path, stop_after):
    """StatefulDataLoader's names: the state is JSON-serialisable, and a new
    adapter that loads it goes on exactly once (deterministic: the same
    batches as the uninterrupted run)."""
    paths = make_npz(tmp_path)
    with dl(paths, deterministic=True) as loader:
        whole = [[b["y"].tolist() for b in loader] for _ in range(2)]
    with dl(paths, deterministic=True) as loader:
        it = iter(loader)
        first = [next(it)["y"].tolist() for _ in range(stop_after)]
        state = json.loads(json.dumps(loader.state_dict()))
    with dl(paths, deterministic=True) as loader:
        loader.load_state_dict(state)
        rest = [[b["y"].tolist() for b in loader] for _ in range(2)]
    with dl(paths, deterministic=True, resume=state) as loader:  # resume= (the Loader's keyword)
        assert [[b["y"].tolist() for b in loader] for _ in range(2)] == rest
    flat = first + rest[0] + rest[1]
    if stop_after == 13:  # the epoch's last batch: the next loop is epoch 1
        assert flat[:26] == whole[0] + whole[1]
    else:
        assert first + rest[0] == whole[0] and rest[1] == whole[1]


def test_pin_memory_without_cuda_is_a_documented_no_op(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: pinned memory is used")
    paths = make_npz(tmp_path)
    with pytest.warns(UserWarning, match="pin_memory"):
        loader = ft.DataLoader(files=paths, batch_size=16, rank=0, world_size=1)
    with loader:
        assert loader.pin_memory is False
        b = next(iter(loader))
        assert not b["x"].is_pinned() and not b["x"].untyped_storage().resizable()


def test_device_cpu_and_ragged_fields(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text("".join(f'{{"id": {i}, "tok": {list(range(i % 4 + 1))}}}\n' for i in range(30)))
    schema = {"id": ("int64", []), "tok": ("int64", [None])}
    with ft.DataLoader(files=[str(p)], batch_size=8, schema=schema, shuffle=0, device="cpu",
                       pin_memory=False, rank=0, world_size=1) as loader:
        seen = []
        for b in loader:
            off = b["tok.offsets"]
            assert off.dtype == torch.int64 and off.shape == (b["id"].shape[0] + 1,)
            for k, i in enumerate(b["id"].tolist()):
                assert b["tok"][off[k]:off[k + 1]].tolist() == list(range(i % 4 + 1))
            seen.extend(b["id"].tolist())
    assert sorted(seen) == list(range(30))


def test_pinned_path_checkpoints_only_what_was_consumed(tmp_path, monkeypatch):
    """The pinned-memory thread fetches ahead; state_dict() must cover the
    batches the loop got, not those fetched ahead (exactly once on resume).
    Page-locking itself needs CUDA: here it is replaced by a copy, the
    thread and the bookkeeping are the real ones."""
    monkeypatch.setattr(ft, "_pin", lambda tensors: {k: (v.clone() if hasattr(v, "clone") else v)
                                                     for k, v in tensors.items()})
    paths = make_npz(tmp_path)
    for stop_after in (2, 12, 13):
        with dl(paths, seed=stop_after, passes=2) as loader:
            loader.pin_memory = True
            it = iter(loader)
            first = [next(it)["y"].tolist() for _ in range(stop_after)]
            # The thread has fetched ahead (its queue is full, or the passes
            # are all fetched) before the state is taken.
            assert wait_until(lambda: it._queue.full() or not it._thread.is_alive())
            assert it._queue.qsize() > 0 or stop_after == 2 * 13
            state = loader.state_dict()
        with dl(paths, seed=stop_after, passes=2, resume=state) as loader:
            rest = [b["y"].tolist() for b in loader]
        got = sorted(y for ys in first + rest for y in ys)
        assert got == sorted(list(range(N)) * 2), stop_after


def test_pinned_path_loop_left_early_goes_on_with_nothing_skipped(tmp_path, monkeypatch):
    """A loop left early (break) while the pinned-memory thread has batches
    fetched ahead: the next loop yields them first, then the rest of the
    epoch — every record once, in the order one loop would have given —
    and an iter() alone fetches nothing (set_epoch right after it loses
    nothing)."""
    monkeypatch.setattr(ft, "_pin", lambda tensors: {k: (v.clone() if hasattr(v, "clone") else v)
                                                     for k, v in tensors.items()})
    paths = make_npz(tmp_path)
    with dl(paths, deterministic=True) as loader:
        whole = [b["y"].tolist() for b in loader]
    with dl(paths, deterministic=True) as loader:
        loader.pin_memory = True
        got = []
        for stop_at in (3, 7):
            it = iter(loader)
            for b in it:
                got.append(b["y"].tolist())
                if len(got) == stop_at:
                    break
            assert wait_until(lambda: it._queue.full() or not it._thread.is_alive())
            assert it._queue.qsize() > 0
        got.extend(b["y"].tolist() for b in loader)
        assert got == whole
        idle = iter(loader)  # the next epoch: nothing fetched before next()
        assert idle._thread is None
        loader.set_epoch(1)
        assert sorted(y for b in loader for y in b["y"].tolist()) == list(range(N))
    with pytest.raises(feedline.FeedlineError, match="closed"):
        iter(loader)  # closed: iter() raises, as the plain Loader's does


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (page-locked memory)")
def test_pin_memory_with_cuda_pins_each_batch_and_device_moves_it(tmp_path):
    """With CUDA: no warning, each batch's tensors page-locked (a copy made
    by the background thread), device="cuda" gives the batches the plain
    adapter gives, on the GPU; and a checkpoint taken while the thread has
    fetched ahead resumes exactly once (real page-locking here)."""
    paths = make_npz(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = dl(paths, pin_memory=True)
    with loader:
        assert loader.pin_memory is True
        got = []
        for b in loader:
            assert b["x"].is_pinned() and b["y"].is_pinned()
            got.append(b)
    assert sorted(labels(got)) == list(range(N))
    with dl(paths, pin_memory=True, device="cuda", deterministic=True) as on_gpu, \
            dl(paths, deterministic=True) as plain:
        for _ in range(2):
            a, p = list(on_gpu), list(plain)
            assert len(a) == len(p) == len(on_gpu)
            for ta, tp in zip(a, p):
                assert ta["x"].device.type == "cuda" and ta["y"].device.type == "cuda"
                assert torch.equal(ta["x"].cpu(), tp["x"]) and torch.equal(ta["y"].cpu(), tp["y"])
    for stop_after in (2, 12):
        with dl(paths, seed=stop_after, passes=2, pin_memory=True) as loader:
            it = iter(loader)
            first = [next(it)["y"].tolist() for _ in range(stop_after)]
            assert wait_until(lambda: it._queue.full() or not it._thread.is_alive())
            state = loader.state_dict()
        with dl(paths, seed=stop_after, passes=2, resume=state) as loader:
            rest = [b["y"].tolist() for b in loader]
        got = sorted(y for ys in first + rest for y in ys)
        assert got == sorted(list(range(N)) * 2), stop_after


def test_iterable_dataset_under_torch_workers_gives_each_batch_once(tmp_path):
    paths = make_npz(tmp_path, files=6, rows=40)
    ds = ft.IterableDataset(files=paths, batch_size=8, shuffle=20, rank=0, world_size=1)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    for workers in (0, 2):
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
        got = labels(loader)
        assert sorted(got) == list(range(240)), workers


def test_iterable_dataset_shards_across_ranks_and_workers(tmp_path):
    paths = make_npz(tmp_path, files=6, rows=40)
    seen = []
    for rank in range(2):
        ds = ft.IterableDataset(files=paths, batch_size=8, shuffle=0, rank=rank, world_size=2)
        seen.extend(labels(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)))
    assert sorted(seen) == list(range(240))


DTYPES = {"f": ("float32", [3], torch.float32), "d": ("float64", [], torch.float64),
          "i": ("int32", [2], torch.int32), "u": ("uint8", [5], torch.uint8),
          "b": ("bool", [], torch.bool), "y": ("int64", [], torch.int64)}


def test_every_dtype_is_its_torch_dtype_and_views_the_batch():
    """Each numeric dtype comes as the torch dtype of the same name, with
    the values pushed, in a tensor whose memory is the batch's field (the
    address numpy's view of the same batch has: no copy); bytes fields stay
    lists of bytes."""
    rng = np.random.default_rng(1)
    schema = {k: (d, s) for k, (d, s, _) in DTYPES.items()}
    schema["s"] = ("bytes", [])
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=8, capacity=16)
    adapter = ft.DataLoader(loader=loader, pin_memory=False)
    addresses = []

    def post(tensors, batch):  # the adapter's hook: here to see the batch beside the tensors
        addresses.append({k: batch[k].ctypes.data for k in DTYPES})
        return tensors

    adapter._post = post
    pushed = []
    for k in range(3):
        b = {"f": rng.random((8, 3)).astype(np.float32), "d": rng.random(8),
             "i": rng.integers(-9, 9, (8, 2)).astype(np.int32),
             "u": rng.integers(0, 255, (8, 5)).astype(np.uint8), "b": rng.random(8) < 0.5,
             "y": np.arange(k * 8, k * 8 + 8), "s": [bytes([k, j]) for j in range(8)]}
        feed.push_batch(b)
        pushed.append(b)
    feed.close()
    with adapter:
        got = list(adapter)
    assert len(got) == 3 == len(addresses)
    for p, t, addr in zip(pushed, got, addresses):
        for name, (_, _, want) in DTYPES.items():
            assert isinstance(t[name], torch.Tensor) and t[name].dtype == want, name
            assert t[name].data_ptr() == addr[name], f"{name}: a copy, not the batch's memory"
            assert np.array_equal(t[name].numpy(), np.asarray(p[name])), name
        assert t["s"] == p["s"]


@pytest.mark.parametrize("fmt", ["tfrecord", "tar"])
def test_len_on_tfrecord_and_webdataset(tmp_path, fmt):
    """len() of the adapter is the batches each epoch delivers, for the
    formats counted by framing (TFRecord records, WebDataset samples)."""
    labels_ = [list(range(f * 37, (f + 1) * 37)) for f in range(3)]
    if fmt == "tfrecord":
        files = [write_tfrecord(tmp_path / f"p{f}.tfrecord", ls) for f, ls in enumerate(labels_)]
        key = "y"
    else:
        files = [write_tar(tmp_path / f"p{f}.tar", ls) for f, ls in enumerate(labels_)]
        key = "cls"
    with dl(files) as loader:
        n = len(loader)
        assert n == -(-111 // 16)
        for _ in range(2):
            got = list(loader)
            assert len(got) == n
            assert sum(len(b[key]) for b in got) == 111
