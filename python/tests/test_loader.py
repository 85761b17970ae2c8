"""Tests of the feedline Python binding: each generates its own data."""

import os
import threading
import time

import numpy as np
import pytest

import feedline
from helpers import make_npz, threads, threads_back_to


def labels(loader):
    per_pass = {}
    for b in loader:
        per_pass.setdefault(b.pass_, []).extend(b["y"].tolist())
    return per_pass


def test_exactly_once_per_pass_by_label(tmp_path):
    paths = make_npz(tmp_path)
    for seed in range(5):
        with feedline.Loader(files=paths, batch_size=16, shuffle=64, seed=seed,
                             passes=3, readers=2, rank=0, world_size=1) as loader:
            per_pass = labels(loader)
        assert sorted(per_pass) == [0, 1, 2]
        for p, ys in per_pass.items():
            assert sorted(ys) == list(range(200)), f"seed {seed} pass {p}"


def test_dtypes_shapes_and_mapping(tmp_path):
    from collections.abc import Mapping
    paths = make_npz(tmp_path)
    with feedline.Loader(files=paths, batch_size=16, shuffle=0, drop_last=True,
                         rank=0, world_size=1) as loader:
        for b in loader:
            assert isinstance(b, Mapping)
            assert set(b.keys()) == {"x", "y"}
            assert len(b) == 2 and "x" in b and "z" not in b
            x, y = b["x"], b["y"]
            assert x.dtype == np.float32 and x.shape == (16, 4)
            assert y.dtype == np.int64 and y.shape == (16,)
            assert (x == y[:, None].astype(np.float32)).all()
            assert len(b.origins) == 16
            with pytest.raises(KeyError):
                b["z"]


def test_zero_copy_view_outlives_loader(tmp_path):
    paths = make_npz(tmp_path)
    loader = feedline.Loader(files=paths, batch_size=8, shuffle=0, rank=0, world_size=1)
    b = next(iter(loader))
    x = b["x"]
    assert not x.flags.owndata
    assert x.base is not None
    again = b["x"]
    assert np.shares_memory(x, again)
    expected = b["y"].astype(np.float32)
    loader.close()
    del b
    assert (x[:, 0] == expected).all()


def test_determinism(tmp_path):
    paths = make_npz(tmp_path)

    def run(readers):
        with feedline.Loader(files=paths, batch_size=16, shuffle=64, seed=11, passes=2,
                             readers=readers, deterministic=True,
                             rank=0, world_size=1) as loader:
            return [b["y"].tolist() for b in loader]

    first = run(1)
    assert first == run(1) == run(3)


def test_rank_sharding(tmp_path):
    paths = make_npz(tmp_path)
    seen = []
    for rank in range(2):
        with feedline.Loader(files=paths, batch_size=16, shuffle=0,
                             rank=rank, world_size=2) as loader:
            seen.append(sorted(y for ys in labels(loader).values() for y in ys))
    assert seen[0] and seen[1]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(200))


def write_jsonl(path, rows, bad_at=None):
    with open(path, "w") as f:
        for i in range(rows):
            if i == bad_at:
                f.write('{"y": null}\n')
            else:
                f.write('{"y": %d}\n' % i)


def test_fail_policy_raises_feedline_error(tmp_path):
    p = tmp_path / "bad.jsonl"
    write_jsonl(p, 20, bad_at=7)
    with feedline.Loader(files=[str(p)], batch_size=4, shuffle=0,
                         rank=0, world_size=1, on_error="fail") as loader:
        with pytest.raises(feedline.FeedlineError) as e:
            list(loader)
    msg = str(e.value)
    assert "bad.jsonl" in msg and "record 7" in msg
    assert issubclass(feedline.FeedlineError, Exception)


def test_skip_policy_skips_the_bad_record(tmp_path):
    p = tmp_path / "bad.jsonl"
    write_jsonl(p, 20, bad_at=7)
    with feedline.Loader(files=[str(p)], batch_size=4, shuffle=0,
                         rank=0, world_size=1, on_error="skip", max_bad=1) as loader:
        ys = sorted(y for ys in labels(loader).values() for y in ys)
    assert ys == [i for i in range(20) if i != 7]


@pytest.mark.parametrize("kwargs", [
    dict(batch_size=0),
    dict(on_error="ignore"),
    dict(on_error="fail", max_bad=3),
    dict(rank=1),
    dict(rank=2, world_size=2),
    dict(readers=0),
])
def test_invalid_settings_raise_value_error(tmp_path, kwargs):
    paths = make_npz(tmp_path, files=1)
    kw = dict(files=paths)
    kw.update(kwargs)
    with pytest.raises(ValueError):
        feedline.Loader(**kw)


def test_close_and_early_break_leave_no_threads(tmp_path):
    paths = make_npz(tmp_path, files=4, rows=500)
    before = threads()
    loader = feedline.Loader(files=paths, batch_size=8, shuffle=100, passes=5,
                             rank=0, world_size=1)
    for i, _ in enumerate(loader):
        if i == 3:
            break
    assert threads() > before
    loader.close()
    assert threads_back_to(before), (threads(), before)
    with feedline.Loader(files=paths, batch_size=8, passes=5, rank=0, world_size=1) as loader:
        next(iter(loader))
    assert threads_back_to(before), (threads(), before)


def test_gil_released_while_waiting(tmp_path):
    """The data come through a FIFO written only after a Python thread has
    counted to TARGET: the loader's start-up and first next() can finish only
    if the GIL was released while they waited."""
    fifo = tmp_path / "slow.jsonl"
    os.mkfifo(fifo)
    target = 20_000
    count = [0]
    counted_before_write = [None]
    stop = threading.Event()

    def worker():
        deadline = time.monotonic() + 30
        while count[0] < target and time.monotonic() < deadline:
            count[0] += 1
        counted_before_write[0] = count[0]
        while not stop.is_set():
            fd = os.open(fifo, os.O_WRONLY)  # blocks until the loader opens it
            try:
                with os.fdopen(fd, "w") as f:
                    for i in range(10):
                        f.write('{"y": %d}\n' % i)
            except BrokenPipeError:
                pass  # the reader closed its end (start-up reads only the head)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    # The schema is given: the FIFO is opened once, by the reader (inferring
    # it would open the FIFO first and race the writer's next open).
    with feedline.Loader(files=[str(fifo)], batch_size=5, shuffle=0,
                         schema={"y": ("int64", [])}, rank=0, world_size=1) as loader:
        b = next(iter(loader))
        assert b["y"].shape == (5,)
    stop.set()
    # Unblock the writer if it waits on an open with no reader.
    try:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t.join(5)
        os.close(fd)
    except OSError:
        pass
    assert counted_before_write[0] == target
