"""Batches handed to the frameworks without a copy: every field's buffer is
64-byte aligned (what JAX asks of a buffer it takes over), and — where torch
or JAX is installed (the tests skip otherwise; nothing here needs them) —
torch.from_dlpack and jax.dlpack.from_dlpack share the batch's memory."""

import gc

import numpy as np
import pytest

import feedline
from helpers import make_npz


def fields(batch):
    """Every array field of a batch, with its name."""
    return [(name, batch[name]) for name in batch]


@pytest.mark.parametrize("batch_size", [1, 3, 8, 50, 200])
def test_every_field_of_every_batch_is_64_byte_aligned(tmp_path, batch_size):
    paths = make_npz(tmp_path, files=4, rows=50)
    seen, checked = [], 0
    for seed in (1, 2):
        with feedline.Loader(files=paths, batch_size=batch_size, shuffle=37, seed=seed,
                             readers=2, rank=0, world_size=1) as loader:
            for b in loader:
                for name, arr in fields(b):
                    assert arr.ctypes.data % 64 == 0, (
                        f"seed {seed}, batch size {batch_size}: field {name} "
                        f"at {arr.ctypes.data:#x}")
                    checked += 1
                seen.extend(b["y"].tolist())
    assert checked == 2 * 2 * -(-200 // batch_size)
    assert sorted(seen) == sorted(list(range(200)) * 2)


def test_ragged_values_are_64_byte_aligned(tmp_path):
    """Ragged fields (values + offsets, and padded) from a JSON-lines file."""
    p = tmp_path / "r.jsonl"
    p.write_text("".join(f'{{"id": {i}, "tok": {list(range(i % 5 + 1))}}}\n' for i in range(90)))
    for layout in ("offsets", "padded"):
        schema = {"id": ("int64", []), "tok": ("int64", [None], layout)}
        with feedline.Loader(files=[str(p)], batch_size=7, shuffle=20, seed=3, schema=schema,
                             rank=0, world_size=1) as loader:
            ids = []
            for b in loader:
                tok = b["tok"]
                assert tok.ctypes.data % 64 == 0, (layout, hex(tok.ctypes.data))
                assert b["id"].ctypes.data % 64 == 0
                ids.extend(b["id"].tolist())
        assert sorted(ids) == list(range(90)), layout


def test_torch_from_dlpack_shares_memory(tmp_path):
    torch = pytest.importorskip("torch")
    paths = make_npz(tmp_path)
    loader = feedline.Loader(files=paths, batch_size=16, shuffle=30, seed=5,
                             rank=0, world_size=1)
    seen, kept = [], []
    for b in loader:
        x = b["x"]
        t = torch.from_dlpack(x)
        assert t.data_ptr() == x.ctypes.data
        assert t.dtype == torch.float32 and tuple(t.shape) == x.shape
        y = torch.from_dlpack(b["y"])
        assert y.data_ptr() == b["y"].ctypes.data and y.dtype == torch.int64
        seen.extend(y.tolist())
        kept.append((t, x.copy()))
    loader.close()
    del b, x
    # The tensors outlive the batches and the loader, and still hold the data.
    for t, want in kept:
        assert np.array_equal(t.numpy(), want)
    assert sorted(seen) == list(range(200))


def test_jax_from_dlpack_is_zero_copy_for_every_batch(tmp_path):
    jax = pytest.importorskip("jax")
    paths = make_npz(tmp_path)
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # int64 stays int64 (else JAX converts: a copy)
    try:
        seen, copies = [], []
        for batch_size in (1, 7, 16, 64):
            with feedline.Loader(files=paths, batch_size=batch_size, shuffle=30, seed=batch_size,
                                 rank=0, world_size=1) as loader:
                for b in loader:
                    for name, arr in fields(b):
                        j = jax.dlpack.from_dlpack(arr)
                        if j.unsafe_buffer_pointer() != arr.ctypes.data:
                            copies.append((batch_size, name, hex(arr.ctypes.data)))
                        assert np.array_equal(np.asarray(j), arr)
                    seen.extend(b["y"].tolist())
        assert copies == [], f"JAX copied these (batch size, field, address): {copies[:5]}"
        assert sorted(seen) == sorted(list(range(200)) * 4)
    finally:
        jax.config.update("jax_enable_x64", old)


def misaligned(values, dtype, shift):
    """`values` as a C-contiguous numpy array of `dtype` whose data starts
    `shift` elements past a 64-byte boundary (what a slice of a caller's
    buffer often is)."""
    a = np.asarray(values, dtype)
    size = a.dtype.itemsize
    raw = np.zeros(a.nbytes + 64 + shift * size + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + shift * size
    out = raw[start:start + a.nbytes].view(dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == shift * size % 64
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_push_batch_fields_are_64_byte_aligned(seed):
    """feed.push_batch copies each field once, into a 64-byte-aligned batch
    buffer, whatever the alignment of the pushed arrays (numpy arrays on the
    fast path, lists and strided arrays on the general one)."""
    rng = np.random.default_rng(seed)
    schema = {"f": ("float32", [3]), "d": ("float64", []), "i": ("int32", [2]),
              "u": ("uint8", [5]), "b": ("bool", []), "y": ("int64", [])}
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=8, capacity=64)
    pushed = []
    with loader:
        for k in range(12):
            n = int(rng.integers(1, 40))
            shift = int(rng.integers(1, 8))
            b = {"f": misaligned(rng.random((n, 3)), np.float32, shift),
                 "d": misaligned(rng.random(n), np.float64, shift % 3 + 1),
                 "i": misaligned(rng.integers(-9, 9, (n, 2)), np.int32, shift),
                 "u": misaligned(rng.integers(0, 255, (n, 5)), np.uint8, shift),
                 "b": misaligned(rng.random(n) < 0.5, np.bool_, shift),
                 "y": np.arange(k * 100, k * 100 + n)}
            if k % 3 == 1:  # the general path: a list, and a strided array
                b["y"] = b["y"].tolist()
                b["f"] = np.asfortranarray(b["f"])
            feed.push_batch(b)
            pushed.append(b)
        feed.close()
        got = list(loader)
    assert len(got) == len(pushed)
    for k, (p, g) in enumerate(zip(pushed, got)):
        for name in schema:
            arr = g[name]
            assert arr.ctypes.data % 64 == 0, (seed, k, name, hex(arr.ctypes.data))
            assert np.array_equal(arr, np.asarray(p[name], arr.dtype)), (seed, k, name)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_view_is_one_read_only_array_over_the_batch_buffer(seed):
    """Each field of each dtype comes as one FeedArray of the schema's dtype
    whose base is the batch buffer's owner (no intermediate array: the view
    is made by numpy's C API straight over the buffer), read-only, and its
    values stay right after the batch object and the loader are gone."""
    rng = np.random.default_rng(seed)
    schema = {"f": ("float32", [3]), "d": ("float64", []), "i": ("int32", [2]),
              "u": ("uint8", [5]), "b": ("bool", []), "y": ("int64", [])}
    loader, feed = feedline.Loader.with_feed(schema=schema, batch_size=8, capacity=64)
    pushed, kept = [], []
    with loader:
        for k in range(5):
            n = int(rng.integers(1, 20))
            b = {"f": rng.random((n, 3)).astype(np.float32), "d": rng.random(n),
                 "i": rng.integers(-9, 9, (n, 2)).astype(np.int32),
                 "u": rng.integers(0, 255, (n, 5)).astype(np.uint8),
                 "b": rng.random(n) < 0.5, "y": np.arange(k * 100, k * 100 + n)}
            feed.push_batch(b)
            pushed.append(b)
        feed.close()
        for batch in loader:
            kept.append({name: batch[name] for name in schema})
            del batch
    gc.collect()
    assert len(kept) == len(pushed)
    for k, (p, g) in enumerate(zip(pushed, kept)):
        for name, (dtype, _) in schema.items():
            arr = g[name]
            assert type(arr) is feedline.FeedArray, (seed, k, name)
            assert type(arr.base).__name__ == "FieldBuffer", (seed, k, name, type(arr.base))
            assert arr.dtype == np.dtype("bool" if dtype == "bool" else dtype), (seed, k, name)
            assert not arr.flags.writeable and arr.flags.c_contiguous, (seed, k, name)
            with pytest.raises(ValueError):
                arr.reshape(-1)[0] = 0
            assert np.array_equal(arr, p[name]), (seed, k, name)


class Spy:
    """A loader seen by feedline.jax.iterator: the field addresses of each
    batch it hands out (through the hook the iterator gives `_epoch`)."""

    def __init__(self, loader):
        self.loader = loader
        self.addresses = []

    def _epoch(self, post):
        def spy(value, batch):
            self.addresses.append({k: batch[k].ctypes.data for k in batch})
            return post(value, batch)
        return self.loader._epoch(post=spy)


def test_feedline_jax_iterator_epochs_zero_copy_and_sharding(tmp_path):
    jax = pytest.importorskip("jax")
    import feedline.jax as fj
    paths = make_npz(tmp_path)
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        with feedline.Loader(files=paths, batch_size=16, shuffle=30, seed=2, rank=0,
                             world_size=1) as loader:
            step = jax.jit(lambda x, y: (x[:, 0] - y.astype(x.dtype)).sum())
            spy = Spy(loader)
            for epoch in range(2):
                seen = []
                for b in fj.iterator(spy):
                    assert isinstance(b["x"], jax.Array) and b["x"].dtype == np.float32
                    # Zero-copy: each array's buffer is the batch's field.
                    for name in ("x", "y"):
                        assert b[name].unsafe_buffer_pointer() == spy.addresses[-1][name], name
                    assert float(step(b["x"], b["y"])) == 0.0
                    seen.extend(np.asarray(b["y"]).tolist())
                assert sorted(seen) == list(range(200)), epoch
            device = jax.devices()[0]
            b = next(iter(fj.iterator(loader, sharding=device)))
            assert b["x"].devices() == {device}
    finally:
        jax.config.update("jax_enable_x64", old)


def test_the_type_stubs_match_the_module():
    """feedline/_native.pyi (installed with the package) names every public
    class and method the module has, and Loader's keywords and defaults
    are the constructor's."""
    import ast
    import inspect
    import os
    stub = os.path.join(os.path.dirname(feedline.__file__), "_native.pyi")
    tree = ast.parse(open(stub).read())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in ("Loader", "Batch", "Feed", "FeedArray", "FeedlineError", "EpochIterator"):
        assert name in classes and hasattr(feedline, name), name
    for cname in ("Loader", "Batch", "Feed", "EpochIterator"):
        runtime = getattr(feedline, cname)
        stubbed = {f.name for f in classes[cname].body if isinstance(f, ast.FunctionDef)}
        public = {m for m in dir(runtime) if not m.startswith("_")}
        if cname == "Batch":  # keys/items/values: the stub's base, Mapping
            from collections.abc import Mapping
            public -= set(dir(Mapping))
        assert public <= stubbed, (cname, public - stubbed)
        for m in stubbed - {"__new__", "__init__"}:
            assert hasattr(runtime, m), (cname, m)
    new = next(f for f in classes["Loader"].body
               if isinstance(f, ast.FunctionDef) and f.name == "__new__")
    args = new.args.args[1:]
    defaults = [None] * (len(args) - len(new.args.defaults)) + new.args.defaults
    stubbed = {a.arg: (ast.literal_eval(d) if d is not None else inspect.Parameter.empty)
               for a, d in zip(args, defaults)}
    sig = inspect.signature(feedline.Loader)
    real = {k: p.default for k, p in sig.parameters.items()}
    assert stubbed == real
