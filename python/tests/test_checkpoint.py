"""Checkpoints from Python: loader.state_dict() (a JSON-serialisable dict),
Loader(..., resume=state) (one dict, or one per rank of the old job for an
elastic resume), loader.checkpoint(path) (the CLI's file, written
atomically): exactly once per pass across the stop, the uninterrupted run's
batches in deterministic mode, changed settings a ValueError naming them."""

import json
import os

import pytest

import feedline
from helpers import make_npz

N = 200  # instances in make_npz's 4 files × 50 rows (labels y = 0..199)


def settings(paths, **kw):
    s = dict(files=paths, batch_size=8, shuffle=30, seed=3, passes=2, readers=2,
             rank=0, world_size=1)
    s.update(kw)
    return s


def take(loader, n):
    """The first n batches as (pass, labels)."""
    out = []
    for b in loader:
        out.append((b.pass_, b["y"].tolist()))
        if len(out) == n:
            break
    return out


def per_pass(batches):
    seen = {}
    for p, ys in batches:
        seen.setdefault(p, []).extend(ys)
    return {p: sorted(ys) for p, ys in seen.items()}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("stop_after", [1, 7, 25, 31])  # pass 0, its end, into pass 1
def test_stop_and_resume_is_exactly_once_per_pass(tmp_path, seed, stop_after):
    paths = make_npz(tmp_path)
    with feedline.Loader(**settings(paths, seed=seed)) as loader:
        first = take(loader, stop_after)
        state = loader.state_dict()
    state = json.loads(json.dumps(state))  # as saved by the user: plain JSON
    with feedline.Loader(**settings(paths, seed=seed), resume=state) as loader:
        rest = [(b.pass_, b["y"].tolist()) for b in loader]
    got = per_pass(first + rest)
    assert got == {0: list(range(N)), 1: list(range(N))}


@pytest.mark.parametrize("seed", [5, 6])
def test_deterministic_resume_gives_the_uninterrupted_batches(tmp_path, seed):
    paths = make_npz(tmp_path)
    s = settings(paths, seed=seed, deterministic=True)
    with feedline.Loader(**s) as loader:
        whole = [(b.pass_, b["y"].tolist()) for b in loader]
    for stop_after in (3, 26):
        with feedline.Loader(**s) as loader:
            first = take(loader, stop_after)
            state = loader.state_dict()
        with feedline.Loader(**s, resume=state) as loader:
            rest = [(b.pass_, b["y"].tolist()) for b in loader]
        assert first + rest == whole, f"stopped after {stop_after}"


def test_checkpoint_file_is_the_state_dict_and_resumes(tmp_path):
    paths = make_npz(tmp_path)
    cp = tmp_path / "cp" / "state.json"
    cp.parent.mkdir()
    with feedline.Loader(**settings(paths)) as loader:
        first = take(loader, 10)
        loader.checkpoint(cp)
        loader.checkpoint(str(cp))  # over the previous one, atomically
        state = loader.state_dict()
    assert os.listdir(cp.parent) == ["state.json"]  # no temporary file left
    with open(cp) as f:
        saved = json.load(f)
    assert saved == state
    assert saved["batches"] == 10 and saved["rank"] == 0 and saved["world_size"] == 1
    with feedline.Loader(**settings(paths), resume=saved) as loader:
        rest = [(b.pass_, b["y"].tolist()) for b in loader]
    assert per_pass(first + rest) == {0: list(range(N)), 1: list(range(N))}


def test_elastic_resume_of_two_ranks_on_one(tmp_path):
    paths = make_npz(tmp_path)
    first, states = [], []
    for rank, stop_after in ((0, 4), (1, 9)):
        with feedline.Loader(**settings(paths, rank=rank, world_size=2, passes=1)) as loader:
            first += take(loader, stop_after)
            states.append(loader.state_dict())
    with feedline.Loader(**settings(paths, passes=1), resume=states) as loader:
        rest = [(b.pass_, b["y"].tolist()) for b in loader]
    assert per_pass(first + rest) == {0: list(range(N))}


@pytest.mark.parametrize("change, name", [
    ({"seed": 4}, "seed"),
    ({"shuffle": 31}, "shuffle"),
    ({"batch_size": 9}, "batch"),
    ({"deterministic": True}, "deterministic"),
])
def test_resume_with_changed_settings_is_a_value_error(tmp_path, change, name):
    paths = make_npz(tmp_path)
    with feedline.Loader(**settings(paths)) as loader:
        take(loader, 3)
        state = loader.state_dict()
    with pytest.raises(ValueError, match=f"setting `{name}` changed since the checkpoint"):
        feedline.Loader(**settings(paths, **change), resume=state)


def test_resume_with_changed_inputs_is_a_value_error(tmp_path):
    paths = make_npz(tmp_path)
    with feedline.Loader(**settings(paths)) as loader:
        take(loader, 3)
        state = loader.state_dict()
    with pytest.raises(ValueError, match="the inputs changed since the checkpoint"):
        feedline.Loader(**settings(paths[:3]), resume=state)


@pytest.mark.parametrize("resume, words", [
    ({"version": 1}, ["resume", "not a valid checkpoint"]),
    ({"version": 999}, ["resume", "version 999"]),
    ([], ["empty list"]),
    ([{"version": 1}], ["resume", "not a valid checkpoint"]),
    (object(), ["JSON-serialisable"]),
])
def test_bad_resume_values_are_value_errors(tmp_path, resume, words):
    paths = make_npz(tmp_path)
    with pytest.raises(ValueError) as e:
        feedline.Loader(**settings(paths), resume=resume)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_state_dict_after_close_and_of_a_push_loader(tmp_path):
    paths = make_npz(tmp_path)
    loader = feedline.Loader(**settings(paths))
    loader.close()
    with pytest.raises(ValueError, match="closed"):
        loader.state_dict()
    pushed, feed = feedline.Loader.with_feed(schema={"x": ("float32", [2])}, batch_size=2)
    with pushed, feed:
        with pytest.raises(ValueError, match="push-mode"):
            pushed.state_dict()


def _identity(path):
    """What is at path, without following a link: inode, kind, size, a link's
    target, a regular file's bytes."""
    st = os.lstat(path)
    link = os.readlink(path) if os.path.islink(path) else None
    data = open(path, "rb").read() if os.path.isfile(path) and link is None else None
    return st.st_ino, st.st_mode, st.st_size, link, data


def test_checkpoint_refuses_what_it_would_destroy_and_touches_nothing(tmp_path):
    """Issue 39: loader.checkpoint(path) replaced whatever was at path. A FIFO,
    a symbolic link to /dev/null, a directory, one of the loader's input files
    (by its path, a hard link, a list file given) are refused with a ValueError
    naming the path and what it is; nothing there is touched; a previous
    checkpoint is replaced as before."""
    paths = make_npz(tmp_path)
    lst = tmp_path / "train.list"
    lst.write_text("".join(p + "\n" for p in paths))
    fifo = tmp_path / "cp.fifo"
    os.mkfifo(fifo)
    null = tmp_path / "null.json"
    os.symlink("/dev/null", null)
    sub = tmp_path / "sub"
    sub.mkdir()
    hard = tmp_path / "hard.npz"
    os.link(paths[2], hard)
    cases = [
        (fifo, "that is a FIFO, not a regular file"),
        (null, "that is a character device, not a regular file"),
        (sub, "that is a directory, not a regular file"),
        (paths[0], f"that is one of this loader's input files ({paths[0]})"),
        (hard, f"that is one of this loader's input files ({paths[2]})"),
        (lst, f"that is one of this loader's input files ({lst})"),
    ]
    with feedline.Loader(**settings(["@" + str(lst)])) as loader:
        take(loader, 3)
        for path, what in cases:
            before = _identity(path)
            with pytest.raises(ValueError) as e:
                loader.checkpoint(path)
            assert str(e.value).startswith(f"{path}: {what}"), str(e.value)
            assert _identity(path) == before, path
        cp = tmp_path / "cp.json"
        cp.write_text("old")
        loader.checkpoint(cp)
        state = loader.state_dict()
    with open(cp) as f:
        assert json.load(f) == state
    assert not [n for n in os.listdir(tmp_path) if ".tmp." in n]


def test_checkpoint_in_a_missing_directory_names_it(tmp_path):
    """Issue 39: a path in a missing directory was reported under the temporary
    file's name. FileNotFoundError naming the path given and its directory; a
    file on the way is a NotADirectoryError naming it."""
    paths = make_npz(tmp_path)
    with feedline.Loader(**settings(paths)) as loader:
        take(loader, 1)
        missing = tmp_path / "nonexistent" / "dir" / "c.json"
        with pytest.raises(FileNotFoundError) as e:
            loader.checkpoint(missing)
        assert str(e.value) == (f"{missing}: cannot save a checkpoint there: the directory "
                                f"{missing.parent} does not exist")
        under = tmp_path / "part0.npz" / "c.json"
        with pytest.raises(NotADirectoryError) as e:
            loader.checkpoint(under)
        assert str(e.value) == (f"{under}: cannot save a checkpoint there: "
                                f"{tmp_path / 'part0.npz'} is not a directory")
    assert not [n for n in os.listdir(tmp_path) if ".tmp." in n]
