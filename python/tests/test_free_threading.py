"""Several Python threads on one loader, and free-threaded CPython.

./test.sh runs the whole suite twice: on the machine's python3 (with the
GIL) and on a free-threaded CPython 3.13t (python/free-threaded-python.sh),
where these threads run Python code truly at once. The module declares
`gil_used = false`, so importing it must not turn the GIL back on there.
"""

import sys
import sysconfig
import threading

import numpy as np
import pytest

import feedline
from helpers import make_npz

FREE_THREADED = sysconfig.get_config_var("Py_GIL_DISABLED") == 1


@pytest.mark.skipif(not FREE_THREADED, reason="a CPython built with the GIL")
def test_the_gil_stays_off_on_a_free_threaded_build(tmp_path):
    # CPython turns the GIL back on at the import of a module that does not
    # declare it safe without it (and warns); feedline declares it.
    assert sys._is_gil_enabled() is False
    paths = make_npz(tmp_path, files=2, rows=20)
    with feedline.Loader(files=paths, batch_size=8, shuffle=0, rank=0, world_size=1,
                         map=lambda inst, rng: inst, workers=2) as loader:
        assert sum(len(b["y"]) for b in loader) == 40
    assert sys._is_gil_enabled() is False


def take_all(loader, threads):
    """`threads` threads pull batches from one loader until it ends: the
    (pass, label) pairs each thread got, and any exception raised."""
    got = [[] for _ in range(threads)]
    errors = []
    start = threading.Barrier(threads)

    def pull(k):
        try:
            # Each thread's loop joins the one epoch before any batch is
            # taken (a loop begun after the last pass would raise: the
            # loader is exhausted).
            epoch = iter(loader)
            start.wait(timeout=30)
            for b in epoch:
                got[k].extend((b.pass_, y) for y in b["y"].tolist())
        except Exception as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    ts = [threading.Thread(target=pull, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread still waits for a batch after the end"
    return got, errors


@pytest.mark.parametrize("seed", [1, 6, 23])
def test_threads_sharing_one_loader_get_each_record_once_per_pass(tmp_path, seed):
    paths = make_npz(tmp_path, files=4, rows=50)
    with feedline.Loader(files=paths, batch_size=7, shuffle=32, seed=seed, passes=2,
                         readers=2, rank=0, world_size=1) as loader:
        got, errors = take_all(loader, threads=4)
    assert errors == []
    every = sorted(x for g in got for x in g)
    assert every == sorted((p, y) for p in range(2) for y in range(200)), seed


@pytest.mark.parametrize("seed", [2, 11])
def test_threads_reading_one_batch_get_views_of_the_same_buffer(tmp_path, seed):
    paths = make_npz(tmp_path, files=2, rows=40)
    threads = 8
    with feedline.Loader(files=paths, batch_size=16, shuffle=16, seed=seed,
                         rank=0, world_size=1) as loader:
        for b in loader:
            seen = [None] * threads
            start = threading.Barrier(threads)

            def read(k):
                start.wait(timeout=30)
                x = b["x"]
                seen[k] = (x.__array_interface__["data"][0], x.copy(), b["y"].copy())

            ts = [threading.Thread(target=read, args=(k,)) for k in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=60)
            assert all(s is not None for s in seen), "a reader failed"
            ptrs = {p for p, _, _ in seen}
            assert len(ptrs) == 1, ptrs
            for _, x, y in seen:
                assert (x[:, 0] == y).all() and (x == seen[0][1]).all()
