"""Epochs by iteration (passes=None: each loop is the next pass), set_epoch,
load_state_dict, closed and exhausted loaders, Ctrl-C, the environment's
shard warning, the library's log records in `logging`, dtype names, len()
for every format, equalize=, and a loader used after fork()."""

import _thread
import json
import logging
import os
import sys
import threading
import time

import numpy as np
import pytest

import feedline
from helpers import make_npz, write_tar, write_tfrecord

N = 200  # make_npz's 4 files x 50 rows, labels 0..199


def ys(batches):
    return [y for b in batches for y in b["y"].tolist()]


def loader(paths, **kw):
    s = dict(files=paths, batch_size=16, shuffle=40, seed=3, rank=0, world_size=1)
    s.update(kw)
    return feedline.Loader(**s)


# ------------------------------------------------------------------ epochs


@pytest.mark.parametrize("deterministic", [False, True])
def test_each_loop_is_the_next_epoch_exactly_once(tmp_path, deterministic):
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=deterministic) as l:
        epochs = []
        for epoch in range(3):
            got = [(b.pass_, y) for b in l for y in b["y"].tolist()]
            assert {p for p, _ in got} == {epoch}, "each loop is one pass, the next one"
            epochs.append([y for _, y in got])
        assert not l.closed  # passes=None: no last epoch
    for e in epochs:
        assert sorted(e) == list(range(N))
    assert epochs[0] != epochs[1] != epochs[2], "each epoch has its own order"


def test_set_epoch_gives_a_fresh_loaders_pass_n(tmp_path):
    """Deterministic mode: epoch n after set_epoch(n) is exactly pass n of a
    loader that ran from pass 0 — as the next loop, and out of order
    (backwards, forwards) — and pass n of passes=N."""
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=True) as l:
        by_iteration = [[b["y"].tolist() for b in l] for _ in range(4)]
    with loader(paths, deterministic=True, passes=4) as l:
        by_pass = {}
        for b in l:
            by_pass.setdefault(b.pass_, []).append(b["y"].tolist())
    assert [by_pass[p] for p in range(4)] == by_iteration
    with loader(paths, deterministic=True) as l:
        for n in (2, 0, 3, 3, 1):
            l.set_epoch(n)
            assert [b["y"].tolist() for b in l] == by_iteration[n], f"set_epoch({n})"
        # set_epoch to the epoch the next loop runs anyway: the same batches.
        l.set_epoch(2)
        assert [b["y"].tolist() for b in l] == by_iteration[2]
    with loader(paths, deterministic=True) as l:
        l.set_epoch(0)  # the DistributedSampler habit before each loop
        first = [b["y"].tolist() for b in l]
        l.set_epoch(1)
        second = [b["y"].tolist() for b in l]
    assert [first, second] == by_iteration[:2]


def test_set_epoch_mid_epoch_gives_up_the_rest(tmp_path):
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=True) as l:
        whole = [[b["y"].tolist() for b in l] for _ in range(2)]
    with loader(paths, deterministic=True) as l:
        it = iter(l)
        next(it)
        l.set_epoch(1)
        with pytest.raises(StopIteration):
            next(it)  # the loop of the epoch given up ends
        assert [b["y"].tolist() for b in l] == whole[1]


@pytest.mark.parametrize("deterministic", [False, True])
def test_an_epoch_ends_with_its_last_batch_pulled_or_not(tmp_path, deterministic):
    """As Lightning's fetcher does: take len() batches, never the end, then
    iter() again. Each iter() is the next whole epoch (not the finished one
    rejoined, empty), and a state_dict() taken between says the same as
    the live loader: it resumes with the next epoch."""
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=deterministic) as l:
        per_epoch, states = [], []
        for epoch in range(4):
            n = len(l)
            it = iter(l)
            got = [next(it) for _ in range(n)]
            per_epoch.append(got)
            states.append(json.loads(json.dumps(l.state_dict())))
            assert {b.pass_ for b in got} == {epoch}
            assert sorted(ys(got)) == list(range(N)), f"epoch {epoch} whole, by label"
    assert [len(e) for e in per_epoch] == [len(per_epoch[0])] * 4
    if deterministic:
        with loader(paths, deterministic=True) as fresh:
            assert [ys(b for b in fresh) for _ in range(4)] == [ys(e) for e in per_epoch]
    # The state taken after the len()-th batch resumes with the next epoch,
    # as the live loader went on.
    for epoch, state in enumerate(states[:3]):
        with loader(paths, deterministic=deterministic, resume=state) as l:
            nxt = list(l)
        assert {b.pass_ for b in nxt} == {epoch + 1}
        assert sorted(ys(nxt)) == list(range(N))
        if deterministic:
            assert ys(nxt) == ys(per_epoch[epoch + 1])


def test_the_last_batch_then_state_dict_then_iter_agree(tmp_path):
    """The end not pulled: state_dict() before and after the next iter()
    say the same position — a resume from either gives exactly the live
    loader's next epoch (deterministic)."""
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=True) as l:
        n = len(l)
        it = iter(l)
        [next(it) for _ in range(n)]
        before = l.state_dict()
        it2 = iter(l)
        after = l.state_dict()
        live = [b["y"].tolist() for b in it2]
        with pytest.raises(StopIteration):
            next(it)  # the finished epoch's iterator stays finished
    for state in (before, after):
        with loader(paths, deterministic=True, resume=state) as l:
            resumed = list(l)
        assert {b.pass_ for b in resumed} == {1}
        assert [b["y"].tolist() for b in resumed] == live


ORDERS = [("load", "iter", "set"), ("load", "set", "iter"), ("iter", "load", "set"),
          ("iter", "set", "load"), ("set", "load", "iter"), ("set", "iter", "load")]


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
@pytest.mark.parametrize("where", ["mid-epoch", "epoch-end"])
def test_load_state_dict_iter_and_set_epoch_in_any_order_give_a_whole_epoch(
        tmp_path, order, where):
    """Lightning restores with load_state_dict(state), iter(), then
    set_epoch(n); other trainers in other orders. With n the epoch the state
    goes on with (the interrupted one, or the next after an epoch's end),
    every order gives an iterator that yields exactly the rest of that
    epoch (the uninterrupted run's batches, deterministic)."""
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=True) as l:
        whole = [[b["y"].tolist() for b in l] for _ in range(4)]
    stop = 5 if where == "mid-epoch" else len(whole[1])
    with loader(paths, deterministic=True) as l:
        list(l)  # epoch 0
        it = iter(l)
        [next(it) for _ in range(stop)]  # epoch 1, the end never pulled
        state = json.loads(json.dumps(l.state_dict()))
    want, epoch = ((whole[1][stop:], 1) if where == "mid-epoch" else (whole[2], 2))
    with loader(paths, deterministic=True) as l:
        it = None
        for step in order:
            if step == "load":
                l.load_state_dict(state)
            elif step == "set":
                l.set_epoch(epoch)
            else:
                it = iter(l)
        got = [b["y"].tolist() for b in it]
        assert got == want, f"{order}: {len(got)} batches, want {len(want)}"
        # Then the next loop is the next epoch, whole.
        assert [b["y"].tolist() for b in l] == whole[epoch + 1]
    with loader(paths, deterministic=True, resume=state) as l:
        l.set_epoch(epoch)
        assert [b["y"].tolist() for b in l] == want


def test_an_iterator_not_yet_taken_from_follows_set_epoch(tmp_path):
    """iter(), then set_epoch(n) to another epoch: the iterator yields
    epoch n whole (it is rebound, not emptied); once it has taken a batch,
    set_epoch gives its epoch up (see the next test)."""
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=True) as l:
        whole = [[b["y"].tolist() for b in l] for _ in range(4)]
    with loader(paths, deterministic=True) as l:
        for n in (3, 1, 1, 0):
            it = iter(l)
            l.set_epoch(n)
            assert [b["y"].tolist() for b in it] == whole[n], f"set_epoch({n}) after iter()"


def test_a_loop_left_early_goes_on_when_iterated_again(tmp_path):
    paths = make_npz(tmp_path)
    with loader(paths) as l:
        first = []
        for b in l:
            first.append(b)
            if len(first) == 3:
                break
        rest = list(l)
        assert sorted(ys(first + rest)) == list(range(N))
        assert {b.pass_ for b in first + rest} == {0}
        assert sorted(ys(l)) == list(range(N))  # then the next epoch


def test_passes_n_runs_all_in_one_loop_then_raises(tmp_path):
    paths = make_npz(tmp_path)
    l = loader(paths, passes=2)
    got = [(b.pass_, y) for b in l for y in b["y"].tolist()]
    assert sorted(got) == [(p, y) for p in range(2) for y in range(N)]
    assert l.closed
    for use in (iter, next):
        with pytest.raises(feedline.FeedlineError, match="all 2 passes delivered"):
            use(l)
    with pytest.raises(feedline.FeedlineError, match="all 1 pass delivered"):
        with loader(paths, passes=1) as one:
            list(one)
            list(one)


def test_a_closed_loader_raises_when_iterated(tmp_path):
    paths = make_npz(tmp_path)
    l = loader(paths)
    it = iter(l)
    next(it)
    l.close()
    assert l.closed
    for use in (lambda: next(it), lambda: iter(l), lambda: next(l), lambda: list(l)):
        with pytest.raises(feedline.FeedlineError, match="closed"):
            use()


def test_an_error_closes_the_loader_and_says_why(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text("".join('{"y": %d}\n' % i for i in range(10)) + '{"y": "x"}\n')
    l = feedline.Loader(files=[str(p)], batch_size=4, shuffle=0, schema={"y": ("int64", [])},
                        rank=0, world_size=1)
    with pytest.raises(feedline.FeedlineError, match="bad.jsonl"):
        list(l)
    assert l.closed
    with pytest.raises(feedline.FeedlineError, match="failed"):
        iter(l)


def test_ctrl_c_in_the_loop_body_closes_the_loader(tmp_path):
    """A KeyboardInterrupt raised in the body of `for batch in loader` (the
    usual Ctrl-C: the loop is training, not waiting) closes the loader; its
    state_dict() still says where it stood."""
    paths = make_npz(tmp_path, files=4, rows=500)
    l = loader(paths, batch_size=8)
    seen = 0
    with pytest.raises(KeyboardInterrupt):
        for b in l:
            seen += 1
            if seen == 5:
                _thread.interrupt_main()
                # The interrupt lands in this Python code, not in next().
                for _ in range(10_000_000):
                    pass
    assert l.closed
    state = l.state_dict()
    assert state["batches"] == 5
    with pytest.raises(feedline.FeedlineError, match="interrupted"):
        iter(l)
    # (break, by contrast, leaves it open.)
    l2 = loader(paths, batch_size=8)
    for b in l2:
        break
    assert not l2.closed
    l2.close()


# ------------------------------------------------------------ state_dict


@pytest.mark.parametrize("stop_after", [1, 6, 13])
def test_load_state_dict_is_resume(tmp_path, stop_after):
    """load_state_dict(state) on a new loader gives what resume=state gives
    (deterministic: the same batches), the state JSON-serialisable; the
    epoch left off is finished, then the next epochs as usual."""
    paths = make_npz(tmp_path)
    with loader(paths, deterministic=True) as l:
        whole = [[b["y"].tolist() for b in l] for _ in range(2)]
    with loader(paths, deterministic=True) as l:
        it = iter(l)
        first = [next(it)["y"].tolist() for _ in range(stop_after)]
        state = json.loads(json.dumps(l.state_dict()))
    with loader(paths, deterministic=True, resume=state) as l:
        by_resume = [[b["y"].tolist() for b in l] for _ in range(2)]
    with loader(paths, deterministic=True) as l:
        l.load_state_dict(state)
        by_load = [[b["y"].tolist() for b in l] for _ in range(2)]
    assert by_load == by_resume
    if stop_after < len(whole[0]):
        assert first + by_load[0] == whole[0]
        assert by_load[1] == whole[1]
    else:  # taken after the epoch's last batch: the next loop is epoch 1
        assert first == whole[0] and by_load[0] == whole[1]


def test_state_at_the_end_of_an_epoch_resumes_with_the_next(tmp_path):
    paths = make_npz(tmp_path)
    for when in ("in the loop", "after the loop"):
        with loader(paths) as l:
            for b in l:
                state = l.state_dict() if when == "in the loop" else None
            if state is None:
                state = l.state_dict()
        with loader(paths, resume=state) as l:
            nxt = [(b.pass_, y) for b in l for y in b["y"].tolist()]
        assert {p for p, _ in nxt} == {1}, when
        assert sorted(y for _, y in nxt) == list(range(N)), when


# --------------------------------------------------- environment, logging


def test_rank_from_the_environment_warns_once_naming_both_and_the_share(tmp_path, monkeypatch,
                                                                          caplog):
    paths = make_npz(tmp_path)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING, logger="feedline"):
        with pytest.warns(UserWarning) as w:
            l = feedline.Loader(files=paths, batch_size=16, shuffle=0)
    mine = [str(x.message) for x in w if "environment" in str(x.message)]
    assert len(mine) == 1, mine
    for words in ("rank=1", "world_size=2", "1/2 of the data", "50.0%"):
        assert words in mine[0], (words, mine[0])
    assert any("world_size=2" in r.getMessage() and r.name == "feedline" for r in caplog.records)
    assert (l.rank, l.world_size) == (1, 2)
    with l:
        assert len(ys(l)) == N // 2
        l.set_epoch(3)  # a restart keeps the shard and does not warn again
        assert len(ys(l)) == N // 2
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with feedline.Loader(files=paths, batch_size=16, rank=0, world_size=1) as l:
            assert (l.rank, l.world_size) == (0, 1)
            assert len(ys(l)) == N


def test_the_librarys_log_records_reach_python_logging(tmp_path, caplog):
    p = tmp_path / "bad.jsonl"
    p.write_text("".join('{"y": %d}\n' % i for i in range(10)) + '{"y": "x"}\n')
    with caplog.at_level(logging.WARNING, logger="feedline"):
        with feedline.Loader(files=[str(p)], batch_size=4, shuffle=0, on_error="skip",
                             schema={"y": ("int64", [])}, rank=0, world_size=1) as l:
            assert len(ys(l)) == 10
    skipped = [r for r in caplog.records if r.getMessage().startswith("skipping ")]
    assert skipped, [r.getMessage() for r in caplog.records]
    assert skipped[0].name.startswith("feedline.") and skipped[0].levelno == logging.WARNING
    assert "bad.jsonl" in skipped[0].getMessage()


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("bad", ["float", "int", float, int])
def test_ambiguous_dtypes_are_refused(tmp_path, bad):
    paths = make_npz(tmp_path)
    with pytest.raises(ValueError) as e:
        loader(paths, schema={"x": (bad, [4]), "y": ("int64", [])})
    msg = str(e.value)
    assert "`x`" in msg and "ambiguous" in msg
    assert "float32" in msg and "float64" in msg


@pytest.mark.parametrize("name, want", [
    ("float32", "float32"), ("double", "float64"), ("torch.float32", "float32"),
    ("torch.float64", "float64"), ("torch.int64", "int64"), ("long", "int64"),
    (np.float32, "float32"), ("f4", "float32"), ("int32", "int32"), ("uint8", "uint8"),
])
def test_numpy_and_torch_dtype_names(name, want):
    l, feed = feedline.Loader.with_feed(schema={"x": (name, [4])}, batch_size=2)
    with l, feed:
        assert l.schema == {"x": (want, [4])}


def test_torch_dtype_objects(tmp_path):
    torch = pytest.importorskip("torch")
    paths = make_npz(tmp_path)
    with loader(paths, schema={"x": (torch.float32, [4]), "y": (torch.int64, [])}) as l:
        assert l.schema == {"x": ("float32", [4]), "y": ("int64", [])}
        b = next(iter(l))
        assert b["x"].dtype == np.float32 and b["y"].dtype == np.int64
    with pytest.raises(ValueError, match="torch.float16"):
        loader(paths, schema={"x": (torch.float16, [4]), "y": ("int64", [])})


# ------------------------------------------------------------------- len()


def formats(tmp_path):
    """The same 4 x 23 labels as TFRecord, WebDataset tar, JSON Lines, CSV."""
    out = {}
    labels = [list(range(f * 23, (f + 1) * 23)) for f in range(4)]
    out["tfrecord"] = [write_tfrecord(tmp_path / f"p{f}.tfrecord", ys) for f, ys in enumerate(labels)]
    out["tar"] = [write_tar(tmp_path / f"p{f}.tar", ys) for f, ys in enumerate(labels)]
    out["jsonl"] = []
    out["csv"] = []
    for f, ls in enumerate(labels):
        j = tmp_path / f"p{f}.jsonl"
        j.write_text("".join('{"y": %d}\n' % y for y in ls))
        c = tmp_path / f"p{f}.csv"
        c.write_text("y\n" + "".join(f"{y}\n" for y in ls))
        out["jsonl"].append(str(j))
        out["csv"].append(str(c))
    return out


@pytest.mark.parametrize("fmt", ["tfrecord", "tar", "jsonl", "csv"])
@pytest.mark.parametrize("drop_last, rank, world", [(False, 0, 1), (True, 0, 1), (False, 1, 2),
                                                    (False, 2, 3)])
def test_len_for_every_format_is_the_batches_delivered(tmp_path, fmt, drop_last, rank, world):
    files = formats(tmp_path)[fmt]
    with feedline.Loader(files=files, batch_size=5, shuffle=7, seed=2, drop_last=drop_last,
                         rank=rank, world_size=world) as l:
        n = len(l)
        label = "cls" if fmt == "tar" else "y"
        for epoch in range(2):
            got = list(l)
            assert len(got) == n, (fmt, epoch)
            assert len(l) == len(got)
        assert sum(len(b[label]) for b in got) <= 92


def test_len_counts_are_cached_by_path_size_and_mtime(tmp_path):
    p = tmp_path / "a.tfrecord"
    write_tfrecord(p, range(20))
    with feedline.Loader(files=[str(p)], batch_size=4, rank=0, world_size=1) as l:
        assert len(l) == 5
    write_tfrecord(p, range(36))  # another size (and mtime): counted again
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 10**9))
    with feedline.Loader(files=[str(p)], batch_size=4, rank=0, world_size=1) as l:
        assert len(l) == 9 == len(list(l))


def test_list_of_a_loader_uses_len(tmp_path):
    files = formats(tmp_path)["tfrecord"]
    with feedline.Loader(files=files, batch_size=10, rank=0, world_size=1) as l:
        assert len(list(l)) == len(l) == 10


# --------------------------------------------------------------- equalize


@pytest.mark.parametrize("how", ["drop", "pad"])
def test_equalize_gives_every_rank_the_min_or_max(tmp_path, how):
    """3 files of 10, 30 and 90 rows over 2 ranks by file: whatever the
    split, the ranks' batches differ; equalize="drop" gives every rank the
    smaller count, "pad" the larger (and len() says so)."""
    paths = []
    for f, rows in enumerate((10, 30, 90)):
        ids = np.arange(f * 1000, f * 1000 + rows, dtype=np.int64)
        np.savez(tmp_path / f"e{f}.npz", x=np.zeros((rows, 4), np.float32), y=ids)
        paths.append(str(tmp_path / f"e{f}.npz"))
    counts = []
    for rank in range(2):
        with feedline.Loader(files=paths, batch_size=16, shuffle=0, rank=rank, world_size=2,
                             equalize=how, passes=1) as l:
            got = list(l)
            counts.append((len(got), len(l)))
    plain = []
    for rank in range(2):
        with feedline.Loader(files=paths, batch_size=16, shuffle=0, rank=rank, world_size=2,
                             passes=1) as l:
            plain.append(len(list(l)))
    assert plain[0] != plain[1], plain
    expect = min(plain) if how == "drop" else max(plain)
    assert counts == [(expect, expect), (expect, expect)], (counts, plain)
    with pytest.raises(ValueError, match="equalize"):
        feedline.Loader(files=paths, equalize="even", rank=0, world_size=1)


# ------------------------------------------------------------------- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
def test_a_loader_used_after_fork_raises_and_one_made_in_the_child_works(tmp_path):
    """The child of a fork() (multiprocessing's fork method, torch
    DataLoader workers) gets a copy of the loader but none of its threads:
    every use raises at once; a loader made in the child works; the child
    exits without touching the parent's threads; the parent's loader goes
    on."""
    paths = make_npz(tmp_path)
    l = loader(paths)
    it = iter(l)
    first = next(it)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        report = {}
        try:
            for name, use in (("next", lambda: next(it)), ("iter", lambda: iter(l)),
                              ("len", lambda: len(l)), ("state_dict", l.state_dict),
                              ("set_epoch", lambda: l.set_epoch(1))):
                t0 = time.monotonic()
                try:
                    use()
                    report[name] = "no error"
                except feedline.FeedlineError as e:
                    report[name] = str(e) if time.monotonic() - t0 < 5 else "slow"
            report["closed"] = l.closed
            with loader(paths) as mine:
                report["child"] = sorted(ys(mine))
        except BaseException as e:  # noqa: BLE001
            report["error"] = repr(e)
        os.write(w, json.dumps(report).encode())
        os.close(w)
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    report = json.loads(data)
    assert "error" not in report, report
    for name in ("next", "iter", "len", "state_dict", "set_epoch"):
        assert report[name].startswith(
            "this loader was created in another process; create it after fork"), (name, report)
    assert report["closed"] is True
    assert report["child"] == list(range(N))
    rest = list(it)
    assert sorted(ys([first] + rest)) == list(range(N))
    l.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
def test_a_forked_child_that_exits_normally_leaves_the_parents_loader_alone(tmp_path):
    """A plain os.fork() child that returns and exits through the
    interpreter's exit (atexit: close_all, the loader's finalizer) must
    neither hang nor stop anything of the parent's."""
    paths = make_npz(tmp_path)
    code = f"""
import os, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import feedline
from helpers import make_npz
l = feedline.Loader(files={paths!r}, batch_size=16, rank=0, world_size=1)
it = iter(l)
next(it)
pid = os.fork()
if pid == 0:
    sys.exit(0)   # the interpreter's exit: atexit hooks, finalizers
os.waitpid(pid, 0)
print(sum(b.size for b in it) + 16)
"""
    import subprocess
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(N)
