"""Tests of schema=, len(), stats(), DLPack, the push feed and Ctrl-C:
each generates its own data."""

import _thread
import ctypes
import os
import sys
import threading
import time

import numpy as np
import pytest

import feedline
from helpers import make_npz, threads, threads_back_to


SCHEMA = {"x": ("float32", [4]), "y": ("int64", [])}


# ---------------------------------------------------------------- schema=


def test_schema_given_is_used_and_reported(tmp_path):
    paths = make_npz(tmp_path)
    with feedline.Loader(files=paths, batch_size=10, shuffle=0, schema=SCHEMA,
                         rank=0, world_size=1) as loader:
        assert loader.schema == {"x": ("float32", [4]), "y": ("int64", [])}
        ys = []
        for b in loader:
            assert b["x"].dtype == np.float32 and b["x"].shape[1:] == (4,)
            assert b["y"].dtype == np.int64 and b["y"].ndim == 1
            ys.extend(b["y"].tolist())
    assert sorted(ys) == list(range(200))


def test_schema_accepts_numpy_dtypes_and_ragged_layouts():
    schema = {"x": (np.float32, (2,)), "t": (np.dtype("int32"), [None], "padded"),
              "u": ("uint8", [-1, 3]), "s": (bytes, [])}
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=2)
    with loader:
        assert loader.schema == {"x": ("float32", [2]), "t": ("int32", [None], "padded"),
                                 "u": ("uint8", [None, 3], "offsets"), "s": ("bytes", [])}
        feed.close()


@pytest.mark.parametrize("schema, words", [
    ({"x": ("float16", [4])}, ["`x`", "float16"]),
    ({"x": ("nonsense", [4])}, ["`x`", "nonsense"]),
    ({"x": ("float32", [4, None])}, ["`x`", "first dimension"]),
    ({"x": ("float32", [-3])}, ["`x`", "non-negative"]),
    ({"x": ("float32", 4)}, ["`x`", "list of dimensions"]),
    ({"x": "float32"}, ["`x`", "(dtype, shape)"]),
    ({"x": ("float32", [None], "zigzag")}, ["`x`", "zigzag"]),
    ({"x": ("float32", [3], "padded")}, ["`x`", "ragged"]),
    ({}, ["at least one field"]),
    ([("x", "float32")], ["dict"]),
])
def test_bad_schema_is_a_value_error_naming_the_field(tmp_path, schema, words):
    paths = make_npz(tmp_path, files=1)
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=paths, schema=schema, rank=0, world_size=1)
    for w in words:
        assert w in str(e.value)
    with pytest.raises(ValueError):
        feedline.Loader.with_feed(schema=schema)


def test_ragged_and_bytes_fields_from_a_file_in_both_layouts(tmp_path):
    import json
    p = tmp_path / "r.jsonl"
    with open(p, "w") as f:
        for i in range(10):
            f.write(json.dumps({"tok": list(range(i % 4)), "y": i, "name": "n%d" % i}) + "\n")
    common = dict(files=[str(p)], batch_size=4, shuffle=0, rank=0, world_size=1)
    with feedline.Loader(**common) as loader:  # inferred: offsets layout
        assert loader.schema["tok"] == ("int64", [None], "offsets")
        assert loader.schema["name"] == ("bytes", [])
        b = next(iter(loader))
        assert b["tok"].tolist() == [0, 0, 1, 0, 1, 2]
        assert b.offsets("tok").tolist() == [0, 0, 1, 3, 6]
        assert b["name"] == [b"n0", b"n1", b"n2", b"n3"]
    schema = {"tok": ("int64", [None], "padded"), "y": ("int64", []), "name": ("bytes", [])}
    with feedline.Loader(schema=schema, **common) as loader:
        b = next(iter(loader))
        assert b["tok"].tolist() == [[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 1, 2]]
        assert b.lengths("tok").tolist() == [0, 1, 2, 3]
        assert [v.tolist() for v in b.instance_values("tok")] == [[], [0], [0, 1], [0, 1, 2]]


def test_files_as_one_path_a_glob_or_path_objects(tmp_path):
    paths = make_npz(tmp_path)
    for files in (str(tmp_path / "part*.npz"), [tmp_path / "part0.npz", paths[1]],
                  tmp_path / "part2.npz"):
        with feedline.Loader(files=files, batch_size=50, shuffle=0, rank=0, world_size=1) as l:
            assert sum(b.size for b in l) == 50 * (4 if isinstance(files, str) else
                                                   2 if isinstance(files, list) else 1)
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[paths[0], 7], rank=0, world_size=1)
    assert "7" in str(e.value)


def test_start_up_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        feedline.Loader(files=[str(tmp_path / "missing.npz")], rank=0, world_size=1)
    assert "missing.npz" in str(e.value)
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[str(tmp_path / "*.nothing")], rank=0, world_size=1)
    assert "*.nothing" in str(e.value)
    (tmp_path / "noext").write_text("x")
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[str(tmp_path / "noext")], rank=0, world_size=1)
    assert "noext" in str(e.value) and "format" in str(e.value)


# ---------------------------------------------------------------- len()


@pytest.mark.parametrize("drop_last, rank, world, expected", [
    (False, 0, 1, 13),   # 200 records, batches of 16: 12 full + 1 partial
    (True, 0, 1, 12),
    (False, 1, 2, 7),    # 2 files of 50 per rank: 100 records
])
def test_len_is_batches_per_pass(tmp_path, drop_last, rank, world, expected):
    paths = make_npz(tmp_path)
    with feedline.Loader(files=paths, batch_size=16, shuffle=32, passes=2, drop_last=drop_last,
                         rank=rank, world_size=world) as loader:
        assert len(loader) == expected
        per_pass = {}
        for b in loader:
            per_pass[b.pass_] = per_pass.get(b.pass_, 0) + 1
    assert per_pass == {0: expected, 1: expected}


def test_len_is_a_type_error_only_for_pushed_data_and_streams(tmp_path):
    """Every file format has a len() (counted by framing where the header
    does not say: see test_epochs.py); a push-mode loader and a FIFO input
    (counting would read its data away) have none: TypeError, as for any
    unsized iterable, which list() takes as "no length hint"."""
    loader, feed = feedline.Loader.with_feed(schema={"y": ("int64", [])}, batch_size=4)
    with loader:
        with pytest.raises(TypeError) as e:
            len(loader)
        assert "pushed" in str(e.value)
        feed.close()
    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "w") as f:
            f.write("".join('{"y": %d}\n' % i for i in range(10)))

    t = threading.Thread(target=write)
    t.start()
    with feedline.Loader(files=[str(fifo)], batch_size=4, shuffle=0, schema={"y": ("int64", [])},
                         rank=0, world_size=1) as loader:
        with pytest.raises(TypeError) as e:
            len(loader)
        assert "stream.jsonl" in str(e.value) and "not a regular file" in str(e.value)
        # list() takes the TypeError as "no length hint".
        assert sum(b.size for b in list(loader)) == 10
    t.join(30)


# ---------------------------------------------------------------- stats()


def test_stats_are_a_dict_of_sane_numbers(tmp_path):
    paths = make_npz(tmp_path)
    with feedline.Loader(files=paths, batch_size=16, shuffle=32, passes=2,
                         rank=0, world_size=1) as loader:
        n = sum(b.size for b in loader)
    s = loader.stats()  # the final figures, after close too
    assert n == 400
    assert isinstance(s, dict)
    assert s["records"] == 400 and s["delivered_records"] == 400
    assert s["batches"] == 26 and s["delivered_batches"] == 26
    assert s["bytes"] >= 400 * (4 * 4 + 8)
    assert s["records_per_s"] > 0 and s["elapsed_s"] > 0
    assert s["passes_done"] == 2 and s["bad_records"] == 0
    assert s["bottleneck"] in {"devices", "readers", "shuffle", "batch maker", "feed queue"}
    assert set(s["stages"]) == {"readers", "shuffle_batch", "batch_maker", "consumer"}
    for name, st in s["stages"].items():
        for k in ("busy", "idle"):
            assert 0.0 <= st[k] <= 1.0 + 1e-6, (name, k, st[k])
    assert s["stages"]["readers"]["records"] == 400
    assert s["stages"]["readers"]["workers"] == 2
    assert s["stages"]["consumer"]["batches"] == 26
    assert s["feed_queue"]["capacity"] >= 1


# ---------------------------------------------------------------- DLPack


def test_numpy_from_dlpack_shares_memory_and_outlives_everything(tmp_path):
    paths = make_npz(tmp_path)
    loader = feedline.Loader(files=paths, batch_size=8, shuffle=0, rank=0, world_size=1)
    b = next(iter(loader))
    x = b["x"]
    assert isinstance(x, np.ndarray) and isinstance(x, feedline.FeedArray)
    assert x.__dlpack_device__() == (1, 0)
    d = np.from_dlpack(x)
    assert np.shares_memory(d, x)
    assert d.ctypes.data == x.ctypes.data
    assert d.dtype == np.float32 and d.shape == (8, 4)
    # A slice exports its own window of the same buffer.
    s = np.from_dlpack(x[2:6, 1:3])
    assert np.shares_memory(s, x) and (s == x[2:6, 1:3]).all()
    y = np.from_dlpack(b["y"])
    expected = b["y"].astype(np.float32).copy()
    del b, x
    loader.close()
    assert (d[:, 0] == expected).all() and (y.astype(np.float32) == expected).all()


class LegacyConsumer:
    """Asks for a DLPack 0.8 capsule, as torch.from_dlpack does."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None, **_):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_legacy_dlpack_capsule(tmp_path):
    paths = make_npz(tmp_path)
    with feedline.Loader(files=paths, batch_size=8, shuffle=0, rank=0, world_size=1) as loader:
        b = next(iter(loader))
        x = b["x"]
        cap = x.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        ptr = get(cap, b"dltensor")
        # DLTensor: data, device (2 × i32), ndim (i32), dtype (u8, u8, u16), shape*, strides*.
        data = ctypes.c_void_p.from_address(ptr).value
        ndim = ctypes.c_int32.from_address(ptr + 16).value
        code, bits = ctypes.c_uint8.from_address(ptr + 20).value, ctypes.c_uint8.from_address(ptr + 21).value
        shape_p = ctypes.c_void_p.from_address(ptr + 24).value
        shape = [ctypes.c_int64.from_address(shape_p + 8 * i).value for i in range(ndim)]
        assert (data, ndim, code, bits, shape) == (x.ctypes.data, 2, 2, 32, [8, 4])
        del cap  # not consumed: its destructor frees the tensor
        d = np.from_dlpack(LegacyConsumer(x))
        assert np.shares_memory(d, x) and (d == x).all()
        t = np.from_dlpack(LegacyConsumer(b["y"]))
        assert t.dtype == np.int64 and (t == b["y"]).all()


def test_computed_arrays_are_plain_numpy(tmp_path):
    paths = make_npz(tmp_path, files=1)
    with feedline.Loader(files=paths, batch_size=8, shuffle=0, rank=0, world_size=1) as loader:
        x = next(iter(loader))["x"]
        assert not x.flags.writeable
        assert type(x[1:]) is feedline.FeedArray  # a view of the batch stays one
        z = x * 2
        assert type(z) is np.ndarray and not np.shares_memory(z, x)
        assert isinstance(x.sum(), np.float32)
        d = np.from_dlpack(z)
        assert (d == x * 2).all() and np.shares_memory(d, z)


# ---------------------------------------------------------------- the push feed


def test_push_exactly_once_with_a_producer_thread():
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=8, capacity=2)
    n = 500
    errors = []

    def produce():
        try:
            for i in range(n):
                feed.push({"x": np.full(4, i, np.float32), "y": i})
            feed.close()
        except Exception as e:  # reported below
            errors.append(e)
            feed.close()

    t = threading.Thread(target=produce)
    t.start()
    ys = []
    with loader:
        for b in loader:
            assert b["x"].shape[1:] == (4,)
            assert (b["x"][:, 0] == b["y"].astype(np.float32)).all()
            ys.extend(b["y"].tolist())
    t.join()
    assert not errors
    assert sorted(ys) == list(range(n))
    assert feed.closed


def test_push_batch_arrives_as_pushed():
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=4, capacity=4)
    with loader:
        xs = np.arange(12, dtype=np.float32).reshape(3, 4)
        feed.push_batch({"x": xs, "y": np.array([7, 8, 9])})
        feed.push({"x": np.zeros(4, np.float32), "y": 10})
        feed.close()
        got = list(loader)
    assert [b.size for b in got] == [3, 1]
    assert (got[0]["x"] == xs).all() and got[0]["y"].tolist() == [7, 8, 9]
    assert got[1]["y"].tolist() == [10]


@pytest.mark.parametrize("item, words", [
    ({"x": np.ones(3, np.float32), "y": 1}, ["`x`", "[4] float32", "[3] float32"]),
    ({"x": np.ones(4, np.float64), "y": 1}, ["`x`", "[4] float32", "[4] float64"]),
    ({"x": np.ones((4, 1), np.float32), "y": 1}, ["`x`", "[4, 1] float32"]),
    ({"x": np.ones(4, np.float32), "y": 1.5}, ["`y`", "[] int64", "[] float64"]),
    ({"x": np.ones(4, np.float32), "y": [1, 2]}, ["`y`", "[2] int64"]),
    ({"x": np.ones(4, np.float32)}, ["`y`", "missing"]),
    ({"x": np.ones(4, np.float32), "y": 1, "z": 2}, ["`z`", "no field"]),
])
def test_push_wrong_fields_raise_and_push_nothing(item, words):
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=4)
    with loader:
        with pytest.raises(ValueError) as e:
            feed.push(item)
        for w in words:
            assert w in str(e.value), str(e.value)
        with pytest.raises(ValueError) as e:
            feed.push_batch({"x": np.ones((2, 4), np.float32), "y": np.array([1, 2, 3])})
        assert "`y`" in str(e.value)
        with pytest.raises(ValueError) as e:
            feed.push_batch({"x": np.ones((2, 5), np.float32), "y": np.array([1, 2])})
        assert "`x`" in str(e.value) and "[n, 4] float32" in str(e.value)
        feed.push({"x": [1, 2, 3, 4], "y": 42})  # plain Python values convert
        feed.close()
        got = [y for b in loader for y in b["y"].tolist()]
    assert got == [42]


def test_push_converts_plain_values_but_never_wraps_or_truncates():
    schema = {"i": ("int32", []), "u": ("uint8", [2]), "f": ("float32", []), "b": ("bool", [])}
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=8)
    with loader:
        feed.push({"i": 7, "u": [1, 255], "f": 2, "b": True})
        feed.push({"i": np.int32(-3), "u": np.array([0, 9], np.uint8), "f": 0.5,
                   "b": np.bool_(False)})
        for bad, words in [({"i": 2**40}, ["`i`", "out of the range"]),
                           ({"u": [1, 256]}, ["`u`", "out of the range"]),
                           ({"i": 1.5}, ["`i`", "float64"]),
                           ({"i": np.int64(3)}, ["`i`", "int64"])]:
            item = {"i": 1, "u": [0, 0], "f": 0.0, "b": False}
            item.update(bad)
            with pytest.raises(ValueError) as e:
                feed.push(item)
            for w in words:
                assert w in str(e.value), str(e.value)
        feed.close()
        (b,) = list(loader)
    assert b["i"].tolist() == [7, -3] and b["i"].dtype == np.int32
    assert b["u"].tolist() == [[1, 255], [0, 9]]
    assert b["f"].tolist() == [2.0, 0.5] and b["b"].tolist() == [True, False]


def test_ragged_and_bytes_fields_through_the_feed():
    schema = {"tok": ("int64", [None]), "pad": ("float32", [None, 2], "padded"),
              "name": ("bytes", []), "tags": ("bytes", [None])}
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=3)
    items = [
        {"tok": [1, 2, 3], "pad": np.ones((1, 2), np.float32), "name": b"a", "tags": [b"x"]},
        {"tok": np.array([], np.int64), "pad": np.zeros((3, 2), np.float32), "name": b"bb",
         "tags": []},
        {"tok": [4], "pad": np.full((2, 2), 5, np.float32), "name": b"", "tags": [b"y", b"zz"]},
    ]
    with loader:
        for it in items:
            feed.push(it)
        feed.close()
        (b,) = list(loader)
        # offsets layout: values concatenated + batch+1 offsets
        assert b["tok"].tolist() == [1, 2, 3, 4]
        assert b.offsets("tok").tolist() == [0, 3, 3, 4]
        assert b.lengths("tok") is None
        assert [v.tolist() for v in b.instance_values("tok")] == [[1, 2, 3], [], [4]]
        # padded layout: [batch, max, 2] + lengths
        assert b["pad"].shape == (3, 3, 2)
        assert b.lengths("pad").tolist() == [1, 3, 2]
        assert b.offsets("pad") is None
        assert (b["pad"][0, 1:] == 0).all() and (b["pad"][2, :2] == 5).all()
        assert [v.shape for v in b.instance_values("pad")] == [(1, 2), (3, 2), (2, 2)]
        # bytes: a list of bytes per instance; ragged bytes: a list of lists
        assert b["name"] == [b"a", b"bb", b""]
        assert b["tags"] == [[b"x"], [], [b"y", b"zz"]]
        # zero-copy: the strings' bytes concatenated, and where each starts
        data, off = b.bytes_buffer("tags")
        assert data.dtype == np.uint8 and not data.flags.writeable
        assert bytes(data) == b"xyzz" and off.tolist() == [0, 1, 2, 4]
        assert np.shares_memory(np.from_dlpack(data), data)
        assert np.shares_memory(np.from_dlpack(LegacyConsumer(data)), data)
        with pytest.raises(ValueError) as e:
            b.bytes_buffer("tok")
        assert "`tok`" in str(e.value)


def test_push_batch_with_ragged_and_bytes_fields():
    schema = {"tok": ("int32", [None]), "name": ("bytes", [])}
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=8)
    with loader:
        feed.push_batch({"tok": [[1], [2, 3]], "name": [b"p", b"q"]})
        feed.close()
        (b,) = list(loader)
    assert b["tok"].tolist() == [1, 2, 3] and b.offsets("tok").tolist() == [0, 1, 3]
    assert b["name"] == [b"p", b"q"]


def test_push_after_close_and_after_loader_close():
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=4)
    feed.close()
    with pytest.raises(feedline.FeedlineError):
        feed.push({"x": np.ones(4, np.float32), "y": 1})
    loader.close()
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=4)
    loader.close()
    with pytest.raises(feedline.FeedlineError) as e:
        feed.push({"x": np.ones(4, np.float32), "y": 1})
    assert "stopped" in str(e.value)
    assert feed.closed


# ---------------------------------------------------------------- Ctrl-C


def interrupt_when(event):
    """Interrupt the main thread once `event` is set and the calling test's
    frame stays on top of the main thread's stack (blocked in the native
    call that follows `event.set()`), again every 0.2 s while it does, until
    the returned event is set: an interrupt taken by Python code the main
    thread runs on its way into the call (a finalizer swallows it) was lost
    once, and the call then waited for ever."""
    test = sys._getframe(1).f_code
    main = threading.main_thread().ident
    done = threading.Event()

    def on_top():
        f = sys._current_frames().get(main)
        return f is not None and f.f_code is test

    def run():
        event.wait(30)
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            if on_top():
                time.sleep(0.02)
                if on_top() and not done.is_set():
                    _thread.interrupt_main()
            done.wait(0.2)

    threading.Thread(target=run, daemon=True).start()
    return done


def test_keyboard_interrupt_while_waiting_for_a_batch_stops_the_loader():
    before = threads()
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=4)
    assert threads() > before
    waiting = threading.Event()
    done = interrupt_when(waiting)
    it = iter(loader)
    with pytest.raises(KeyboardInterrupt):
        waiting.set()
        next(it)  # no data ever comes: only the interrupt ends this
    done.set()
    assert loader.closed
    feed.close()
    del feed
    assert threads_back_to(before), (threads(), before)


def test_keyboard_interrupt_while_a_push_waits_for_room():
    before = threads()
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=1, capacity=1)
    item = {"x": np.ones(4, np.float32), "y": 0}

    def interrupt_once_a_push_waits():
        # "waiting" counts the pushes waiting for room: the main thread's.
        while feed.stats()["waiting"] == 0:
            threading.Event().wait(0.01)
        _thread.interrupt_main()

    t = threading.Thread(target=interrupt_once_a_push_waits, daemon=True)
    t.start()
    pushed = 0
    with pytest.raises(KeyboardInterrupt):
        for _ in range(1_000_000):
            feed.push(item)
            pushed += 1
    t.join(5)
    assert 0 < pushed < 1_000_000
    s = feed.stats()
    assert s["waiting"] == 0 and s["refused"] == 0 and s["blocked_s"] > 0
    assert s["instances"] == pushed
    feed.close()
    loader.close()
    assert threads_back_to(before), (threads(), before)


def test_other_threads_use_the_loader_while_next_waits():
    """stats() and close() from another thread while the main thread waits
    in next() on a feed that never gets data: close() ends the iteration."""
    before = threads()
    loader, feed = feedline.Loader.with_feed(schema=SCHEMA, batch_size=4)
    waiting = threading.Event()
    seen = {}

    def other():
        waiting.wait(30)
        seen["stats"] = loader.stats()
        loader.close()

    it = iter(loader)
    t = threading.Thread(target=other)
    t.start()
    waiting.set()
    # close() ends a next() that waits; one that lands before next() began
    # makes that call say the loader is closed (the threads race for it).
    try:
        assert list(it) == []
    except feedline.FeedlineError as e:
        assert "closed" in str(e)
    t.join(30)
    assert seen["stats"]["records"] == 0 and loader.closed
    feed.close()
    assert threads_back_to(before), (threads(), before)


def test_a_fifo_without_a_schema_is_refused_at_once_not_hung(tmp_path):
    """A FIFO nobody writes: inferring its schema would consume its first
    records (and, before issue 28, blocked at its open until Ctrl-C): it is
    refused at once, naming `schema=`. (Mutation tried in the Rust test
    `a_stream_input_without_a_schema_is_refused_not_hung`: the refusal
    dropped, inference gives up on the FIFO with "reader stuck".)"""
    fifo = tmp_path / "never.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(feedline.FeedlineError, match="schema="):
        feedline.Loader(files=[str(fifo)], batch_size=4, rank=0, world_size=1)


# ---------------------------------------------------------------- map=


def test_python_map_transforms_every_instance_once(tmp_path):
    paths = make_npz(tmp_path)

    def double(inst, rng):
        assert isinstance(rng, np.random.Generator)
        assert inst["x"].shape == (4,) and inst["x"].flags.writeable
        inst["x"] *= 2  # the instance's arrays are the map's own copies
        return {"x2": inst["x"], "y": inst["y"], "tag": b"t%d" % int(inst["y"])}

    with feedline.Loader(files=paths, batch_size=16, shuffle=64, passes=2, map=double,
                         workers=2, rank=0, world_size=1) as loader:
        with pytest.raises(feedline.FeedlineError) as e:
            loader.schema  # inferred from the map's first output: not known yet
        assert "map_schema" in str(e.value)
        per_pass = {}
        for b in loader:
            assert set(b) == {"x2", "y", "tag"}
            assert b["x2"].dtype == np.float32
            assert (b["x2"][:, 0] == 2 * b["y"]).all()
            assert b["tag"] == [b"t%d" % y for y in b["y"].tolist()]
            per_pass.setdefault(b.pass_, []).extend(b["y"].tolist())
        assert loader.schema == {"x2": ("float32", [4]), "y": ("int64", []),
                                 "tag": ("bytes", [])}
    assert {p: sorted(v) for p, v in per_pass.items()} == {0: list(range(200)),
                                                          1: list(range(200))}


def test_python_map_rng_is_per_record_and_deterministic(tmp_path):
    paths = make_npz(tmp_path, files=2)

    def noise(inst, rng):
        return {"y": inst["y"], "r": rng.integers(0, 1 << 30)}

    def run(workers):
        with feedline.Loader(files=paths, batch_size=10, shuffle=20, seed=3, map=noise,
                             workers=workers, rank=0, world_size=1) as loader:
            return {y: r for b in loader for y, r in zip(b["y"].tolist(), b["r"].tolist())}

    a, b = run(1), run(3)
    assert a == b and len(a) == 100 and len(set(a.values())) > 90


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_python_map_keeps_each_worker_threads_python_state(tmp_path, workers):
    """A worker thread keeps one Python thread state across its map calls:
    what a call leaves in a `threading.local` (a per-worker cache, say) is
    there at the worker's next call. (Each call used to make the thread's
    state anew and drop it after, and the local with it.)"""
    paths = make_npz(tmp_path, files=3, rows=40)
    local = threading.local()
    calls = {}  # worker thread id -> calls seen by its local, the last one

    def count(inst, rng):
        local.calls = getattr(local, "calls", 0) + 1
        calls[threading.get_ident()] = local.calls
        return {"y": inst["y"]}

    with feedline.Loader(files=paths, batch_size=8, shuffle=16, seed=workers, passes=2,
                         map=count, workers=workers, rank=0, world_size=1) as loader:
        ys = sorted(y for b in loader for y in b["y"].tolist())
    assert ys == sorted(list(range(120)) * 2)
    assert threading.get_ident() not in calls and 1 <= len(calls) <= workers
    # Every call on a thread saw all the earlier ones there.
    assert sum(calls.values()) == 240, calls


def test_python_map_errors_are_bad_records(tmp_path):
    paths = make_npz(tmp_path, files=1)

    def picky(inst, rng):
        if int(inst["y"]) == 7:
            raise RuntimeError("no sevens")
        return {"y": inst["y"]}

    common = dict(files=paths, batch_size=8, shuffle=0, map=picky, rank=0, world_size=1)
    with feedline.Loader(on_error="skip", **common) as loader:
        ys = sorted(y for b in loader for y in b["y"].tolist())
    assert ys == [i for i in range(50) if i != 7]
    with feedline.Loader(on_error="fail", **common) as loader:
        with pytest.raises(feedline.FeedlineError) as e:
            list(loader)
    assert "no sevens" in str(e.value) and "RuntimeError" in str(e.value)
    assert "record 7" in str(e.value)
    schema = {"y": ("int32", [])}
    with feedline.Loader(map_schema=schema, **common) as loader:
        assert loader.schema == schema
        with pytest.raises(feedline.FeedlineError) as e:
            list(loader)
    assert "`y`" in str(e.value) and "int32" in str(e.value)
    with pytest.raises(ValueError):
        feedline.Loader(files=paths, map=42, rank=0, world_size=1)
    with pytest.raises(ValueError):
        feedline.Loader(files=paths, workers=2, rank=0, world_size=1)


def test_exit_with_a_live_map_loader_is_clean(tmp_path):
    """Leaving the interpreter with a loader whose workers run a Python map:
    it is closed at exit (atexit), before the finalization would kill a
    worker inside the map (which aborted the process)."""
    import subprocess
    import sys
    paths = make_npz(tmp_path, files=2, rows=2000)
    script = f"""
import feedline
def slow(inst, rng):
    s = 0
    for i in range(1000):
        s += i
    return {{"x": inst["x"], "y": inst["y"]}}
loader = feedline.Loader(files={paths!r}, batch_size=8, passes=3, map=slow, workers=3,
                         rank=0, world_size=1)
it = iter(loader)
for _ in range(5):
    next(it)
print("leaving")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "leaving"
