"""Checks feedline from outside on dataset directories that other tools
write at check time: Hugging Face `datasets` (`Dataset.save_to_disk`: ints,
floats, strings, lists, a fixed-length list, a list of lists, images as
bytes — PNG and JPEG made with PIL, as `datasets.Image()` and as plain
binary) and Mosaic Streaming (`streaming.MDSWriter`: every encoding the
format reads, once uncompressed and once with compression='zstd').

Each dataset is read through `feedline cat` (every record, in order, with
the writer's values), `feedline run --trace` (two passes, two readers, two
devices, shuffled: every record exactly once per pass) and the Python
package (feedline.Loader: every record once, each value the writer's); its
images decoded by feedline's `decode` transform and compared with PIL's
decode of the same bytes (equal arrays). Then copies are damaged — a shard
truncated, bytes flipped in a shard, an index.json / state.json broken or
disagreeing with its shards — and each must be refused by `feedline cat`
and by the Python package with an error naming the damaged file. (A flip
inside an Arrow record batch's data cannot be detected — Arrow IPC has no
checksums — so there feedline must either refuse naming the file or give
what pyarrow itself reads from the damaged file.)

Not run by the tests or CI (mosaicml-streaming pulls torch): run it in a
venv of its own, with the `feedline` command built and the wheel installed:

    cargo build --release -p feedline-cli
    python/build-wheel.sh target/py-venv/bin/python
    python3 -m venv /work/venv-check
    /work/venv-check/bin/pip install datasets "mosaicml-streaming==0.13.*" pillow
    /work/venv-check/bin/pip install --force-reinstall --no-deps target/wheels/feedline-*.whl
    /work/venv-check/bin/python python/examples/check_datasets_dirs.py --feedline target/release/feedline

It prints one line per check and a summary (`N passed, M failed`), and
exits 1 on any failure.
"""

import argparse
import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

import numpy as np
from PIL import Image

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def attempt(name, fn):
    """Run a check function; an exception is a failed check."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
        check(name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")


# ------------------------------------------------------------------ values


def picture(i, size):
    """An RGB image with detail (so that JPEG's DCT has work to do)."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * 17 + i * 31) % 256, (y * 23 + x * 5) % 256, (x * y + 7 * i) % 256], -1)
    return Image.fromarray(a.astype(np.uint8), "RGB")


def encoded(img, fmt, **kw):
    out = io.BytesIO()
    img.save(out, format=fmt, **kw)
    return out.getvalue()


def pil_rgb(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


# A field's kind says how feedline gives it and how it is compared:
# int / f64 exactly; f32 / f16 as the writer's value rounded to that type;
# bytes exactly; json as the parsed object; image-bytes exactly (and
# decoded against PIL); pil as PNG bytes whose pixels are the image's.


def flat(x):
    return np.asarray(x).ravel().tolist()


def expect_value(kind, v):
    """The writer's value `v` as the flat list (or object) to compare."""
    if kind in ("int", "f64"):
        return flat(v)
    if kind == "f32":
        return [float(np.float32(x)) for x in flat(v)]
    if kind == "f16":
        return [float(np.float16(x)) for x in flat(v)]
    if kind in ("bytes", "image"):
        return [v]
    if kind == "str":
        return [v.encode()]
    if kind == "json":
        return v
    if kind == "pil":
        return np.asarray(v.convert("RGB"))
    raise AssertionError(kind)


def same(kind, want, got_values):
    """Compare feedline's values (a flat list: numbers, or bytes) with the
    writer's; (ok, detail)."""
    if kind == "json":
        if len(got_values) != 1:
            return False, f"{len(got_values)} values"
        obj = json.loads(got_values[0])
        return obj == want, f"{obj!r} != {want!r}"
    if kind == "pil":
        if len(got_values) != 1:
            return False, f"{len(got_values)} values"
        px = pil_rgb(got_values[0])
        return px.shape == want.shape and np.array_equal(px, want), f"pixels {px.shape} vs {want.shape}"
    if kind in ("f32", "f16"):
        a = np.asarray(got_values, np.float32)
        b = np.asarray(want, np.float32)
        return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32)), f"{a} != {b}"
    ok = list(got_values) == list(want)
    return ok, f"{list(got_values)[:8]!r} != {list(want)[:8]!r}"


# ------------------------------------------------------------------ writers


def write_hf(out, n=23, shards=3):
    import datasets

    def listof(t, length=-1):
        if hasattr(datasets, "List"):
            return datasets.List(t, length=length)
        return datasets.Sequence(t, length=length)

    rows = []
    for i in range(n):
        # one size per column: the decode transform's output is one shape
        # per loader (docs/transforms.md); the pixels differ per record
        png = encoded(picture(i, (7, 5)), "PNG")
        jpg = encoded(picture(i, (19, 11)), "JPEG", quality=90)
        rows.append({
            "id": i * 1001 - 5000,
            "score": i / 7 - 1.0,
            "ratio": float(np.float32(i * 0.3)),
            "text": f"row {i}: caf\u00e9 \u2713" * (1 + i % 3),
            "tokens": [i * 10 + j for j in range(i % 5)],
            "vec": [float(np.float32(i + 0.25 * j)) for j in range(3)],
            "grid": [[i, -i], [i + 1, i * i]],
            "flag": i % 3 == 0,
            "png": png,
            "jpg": jpg,
            "raw_jpg": jpg,
        })
    features = datasets.Features({
        "id": datasets.Value("int64"),
        "score": datasets.Value("float64"),
        "ratio": datasets.Value("float32"),
        "text": datasets.Value("string"),
        "tokens": listof(datasets.Value("int64")),
        "vec": listof(datasets.Value("float32"), length=3),
        "grid": listof(listof(datasets.Value("int32"))),
        "flag": datasets.Value("bool"),
        "png": datasets.Image(),
        "jpg": datasets.Image(),
        "raw_jpg": datasets.Value("binary"),
    })
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cols["png"] = [{"bytes": b, "path": None} for b in cols["png"]]
    cols["jpg"] = [{"bytes": b, "path": None} for b in cols["jpg"]]
    ds = datasets.Dataset.from_dict(cols, features=features)
    ds.save_to_disk(out, num_shards=shards)
    kinds = {"id": "int", "score": "f64", "ratio": "f32", "text": "str", "tokens": "int", "vec": "f32",
             "grid": "int", "flag": "bool", "png": "image", "jpg": "image", "raw_jpg": "image"}
    expected = [{k: (True if kinds[k] == "bool" and r[k] else r[k]) for k in r} for r in rows]
    # the records' files, in state.json's order, and their record counts
    state = json.load(open(os.path.join(out, "state.json")))
    import pyarrow as pa
    files = []
    for f in state["_data_files"]:
        p = os.path.join(out, f["filename"])
        with pa.memory_map(p) as src:
            files.append((p, pa.ipc.open_stream(src).read_all().num_rows))
    return {"kinds": kinds, "rows": expected, "files": files, "images": ["png", "jpg", "raw_jpg"]}


MDS_COLUMNS = {
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64",
    "s": "str", "b": "bytes", "n": "int", "j": "json",
    "arr": "ndarray", "arr_t": "ndarray:int16", "arr_ts": "ndarray:float32:2,3",
    "jpg": "jpeg", "pngc": "png", "pil": "pil",
}
MDS_KINDS = {
    "i8": "int", "i16": "int", "i32": "int", "i64": "int", "u8": "int", "u16": "int", "u32": "int",
    "u64": "int", "f16": "f16", "f32": "f32", "f64": "f64", "s": "str", "b": "bytes", "n": "int",
    "j": "json", "arr": "f64", "arr_t": "int", "arr_ts": "f32", "jpg": "image", "pngc": "image",
    "pil": "pil",
}


def mds_sample(i):
    return {
        "i8": -128 + (i * 37) % 256, "i16": -32768 + i * 999, "i32": -(2**31) + i * 77777,
        "i64": -(2**63) + i * 10**15, "u8": (i * 53) % 256, "u16": 65535 - i, "u32": 2**32 - 1 - i * 3,
        "u64": 2**63 - 1 - i,
        "f16": 0.125 * i - 2, "f32": 1.1 * i - 3.3, "f64": 1 / 3 + i * 1e-7,
        "s": f"sample {i} \u00fc\u00df" * (1 + i % 4), "b": bytes((i * k) % 256 for k in range(i % 9)),
        "n": -(10**17) + i, "j": {"k": [i, "x", None], "f": 0.5 * i, "nested": {"t": i % 2 == 0}},
        "arr": np.arange(2 * (1 + i % 4), dtype=np.float64).reshape(-1, 2) * (i + 0.5),
        "arr_t": (np.arange(i % 6 + 1) - 3).astype(np.int16),
        "arr_ts": np.arange(6, dtype=np.float32).reshape(2, 3) * (i - 0.5),
        "jpg": picture(i, (13, 9)),
        "pngc": picture(i + 1, (5, 4)),
        "pil": picture(i + 2, (3, 3)),
    }


def write_mds(out, n=29, compression=None):
    from streaming import MDSWriter
    from streaming.base.format.mds.encodings import mds_encode

    samples = [mds_sample(i) for i in range(n)]
    with MDSWriter(out=out, columns=MDS_COLUMNS, size_limit=6000, compression=compression,
                   hashes=["sha1", "xxh64"]) as w:
        for s in samples:
            w.write(s)
    rows = []
    for s in samples:
        r = {}
        for k, enc in MDS_COLUMNS.items():
            v = s[k]
            r[k] = mds_encode(enc, v) if enc in ("jpeg", "png") else v
        rows.append(r)
    index = json.load(open(os.path.join(out, "index.json")))
    files = []
    for sh in index["shards"]:
        raw = os.path.join(out, sh["raw_data"]["basename"])
        z = sh.get("zip_data")
        p = raw if os.path.exists(raw) or not z else os.path.join(out, z["basename"])
        files.append((p, sh["samples"]))
    return {"kinds": MDS_KINDS, "rows": rows, "files": files, "images": ["jpg", "pngc", "pil"]}


# ------------------------------------------------------------------ readers


def compare_records(tag, data, got):
    """`got`: global index -> {field: flat values}; every record once, each
    field the writer's."""
    rows, kinds = data["rows"], data["kinds"]
    bad = []
    if sorted(got) != list(range(len(rows))):
        bad.append(f"records {sorted(set(range(len(rows))) - set(got))[:5]} missing, "
                   f"{sorted(set(got) - set(range(len(rows))))[:5]} extra")
    for i, rec in sorted(got.items()):
        if i >= len(rows):
            continue
        if set(rec) != set(kinds):
            bad.append(f"record {i}: fields {sorted(rec)} != {sorted(kinds)}")
            continue
        for k, kind in kinds.items():
            want = rows[i][k]
            if kind == "bool":
                ok, det = [bool(x) for x in rec[k]] == [want], f"{rec[k]} != {want}"
            else:
                ok, det = same(kind, expect_value(kind, want), rec[k])
            if not ok:
                bad.append(f"record {i} field {k}: {det}")
    return check(tag, not bad, f"{len(got)} records" if not bad else "; ".join(bad[:5]))


def global_index(data):
    """(file path, record) -> the record's index in the writer's order."""
    out, base = {}, 0
    for p, n in data["files"]:
        for r in range(n):
            out[(os.path.realpath(p), r)] = base + r
        base += n
    return out


def origin_key(name, record):
    if ":" in name and not os.path.exists(name):
        name = name.split(":", 1)[1]
    return (os.path.realpath(name), int(record))


def via_cat(tag, exe, d, data):
    p = subprocess.run([exe, "cat", d], capture_output=True, text=True)
    if not check(f"{tag}: feedline cat exits 0", p.returncode == 0, p.stderr.strip()[-400:]):
        return
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    got = {}
    for i, obj in enumerate(lines):
        rec = {}
        for k, v in obj.items():
            kind = data["kinds"].get(k)
            if kind in ("bytes", "str", "json", "image", "pil"):
                rec[k] = [base64.b64decode(x) for x in v]
            else:
                rec[k] = v
        got[i] = rec
    compare_records(f"{tag}: feedline cat gives every record in order with the writer's values", data, got)


def via_trace(tag, exe, d, data, workdir):
    trace = os.path.join(workdir, f"trace-{abs(hash(d))}.jsonl")
    cmd = [exe, "run", d, "--trace", trace, "--passes", "2", "--readers", "2", "--devices", "2",
           "--batch", "4", "--shuffle", "16", "--seed", "3", "--step-ms", "0"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if not check(f"{tag}: feedline run --trace exits 0", p.returncode == 0, p.stderr.strip()[-400:]):
        return
    index = global_index(data)
    per_pass = {}
    for line in open(trace):
        b = json.loads(line)
        for name, rec in b["records"]:
            per_pass.setdefault(b["pass"], []).append(origin_key(name, rec))
    bad = []
    for ps in (0, 1):
        got = per_pass.get(ps, [])
        if len(got) != len(set(got)):
            bad.append(f"pass {ps}: {len(got) - len(set(got))} records twice")
        if set(got) != set(index):
            bad.append(f"pass {ps}: {len(set(index) - set(got))} missing, {len(set(got) - set(index))} "
                       f"unknown (e.g. {sorted(set(got) - set(index))[:2]})")
    check(f"{tag}: feedline run --trace: every record exactly once in each of 2 passes", not bad,
          f"{len(index)} records x 2 passes" if not bad else "; ".join(bad))


def via_python(tag, d, data):
    import feedline
    index = global_index(data)
    got = {}
    dupes = 0
    with feedline.Loader(files=d, batch_size=5, shuffle=7, seed=2, passes=1, readers=2) as loader:
        for b in loader:
            per_field = {k: b.instance_values(k) for k in b}
            for j, o in enumerate(b.origins):
                i = index.get(origin_key(*o))
                if i is None:
                    raise AssertionError(f"origin {o} is no record the writer wrote")
                if i in got:
                    dupes += 1
                rec = {}
                for k, vals in per_field.items():
                    v = vals[j]
                    rec[k] = [v] if isinstance(v, bytes) else (list(v) if isinstance(v, list) else flat(v))
                got[i] = rec
    check(f"{tag}: Python Loader gives no record twice", dupes == 0, f"{dupes} twice")
    compare_records(f"{tag}: Python Loader gives every record once with the writer's values", data, got)


def images(tag, d, data, only_images=True):
    """The decode transform's pixels against PIL's decode of the bytes the
    writer stored (for `pil`: the image written). only_images: a schema of
    the image fields alone (else every field, as inferred, passes through
    the transform)."""
    import feedline
    index = global_index(data)
    names = data["images"]
    bad, n = [], 0
    schema = {k: ("bytes", []) for k in names} if only_images else None
    with feedline.Loader(files=d, batch_size=1, shuffle=0, passes=1, transform="decode",
                         deterministic=True, schema=schema) as loader:
        for b in loader:
            i = index[origin_key(*b.origins[0])]
            for k in names:
                px = np.asarray(b.instance_values(k)[0])
                src = data["rows"][i][k]
                want = np.asarray(src.convert("RGB")) if data["kinds"][k] == "pil" else pil_rgb(src)
                n += 1
                if px.size != want.size or not np.array_equal(px.reshape(want.shape), want):
                    diff = (np.abs(px.reshape(want.shape).astype(int) - want.astype(int)).max()
                            if px.size == want.size else f"{px.shape} vs {want.shape}")
                    bad.append(f"record {i} {k}: max diff {diff}")
    check(f"{tag}: the decode transform's pixels equal PIL's decode ({', '.join(names)})"
          f"{'' if only_images else ', every other field passing through'}", not bad and n,
          f"{n} images" if not bad else "; ".join(bad[:5]))


# ------------------------------------------------------------------ damage


def refused(tag, exe, d, culprit):
    """`feedline cat` and the Python Loader both fail on `d`, naming `culprit`."""
    import feedline
    p = subprocess.run([exe, "cat", d], capture_output=True, text=True)
    name = os.path.basename(culprit)
    check(f"{tag}: feedline cat refuses it naming {name}", p.returncode != 0 and culprit in p.stderr,
          f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
    try:
        with feedline.Loader(files=d, batch_size=4, shuffle=0, passes=1) as loader:
            for _ in loader:
                pass
        check(f"{tag}: the Python Loader refuses it naming {name}", False, "no error")
    except Exception as e:  # noqa: BLE001
        check(f"{tag}: the Python Loader refuses it naming {name}", culprit in str(e),
              f"{type(e).__name__}: {str(e)[:300]}")


def copy(src, workdir, name):
    dst = os.path.join(workdir, name)
    shutil.copytree(src, dst)
    return dst


def mds_damage(tag, exe, d, workdir):
    index = json.load(open(os.path.join(d, "index.json")))
    shard = index["shards"][1]
    zipped = shard.get("zip_data") is not None and not os.path.exists(
        os.path.join(d, shard["raw_data"]["basename"]))
    base = shard["zip_data"]["basename"] if zipped else shard["raw_data"]["basename"]

    c = copy(d, workdir, f"{tag}-truncated")
    p = os.path.join(c, base)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 2])
    refused(f"{tag}, shard truncated", exe, c, p)

    c = copy(d, workdir, f"{tag}-flipped")
    p = os.path.join(c, base)
    data = bytearray(open(p, "rb").read())
    for at in (len(data) // 3, len(data) // 2, 2 * len(data) // 3):
        data[at] ^= 0xA5
    open(p, "wb").write(bytes(data))
    refused(f"{tag}, bytes flipped in a shard (its hashes listed)", exe, c, p)

    c = copy(d, workdir, f"{tag}-index-cut")
    p = os.path.join(c, "index.json")
    text = open(p).read()
    open(p, "w").write(text[: len(text) // 2])
    refused(f"{tag}, index.json cut short", exe, c, p)

    c = copy(d, workdir, f"{tag}-index-samples")
    p = os.path.join(c, "index.json")
    idx = json.load(open(p))
    idx["shards"][1]["samples"] += 1
    json.dump(idx, open(p, "w"))
    refused(f"{tag}, index.json states one sample more for a shard", exe, c, os.path.join(c, base))

    c = copy(d, workdir, f"{tag}-index-size")
    p = os.path.join(c, "index.json")
    idx = json.load(open(p))
    key = "zip_data" if zipped else "raw_data"
    idx["shards"][1][key]["bytes"] += 7
    json.dump(idx, open(p, "w"))
    refused(f"{tag}, index.json states another size for a shard", exe, c, os.path.join(c, base))

    c = copy(d, workdir, f"{tag}-index-pkl")
    p = os.path.join(c, "index.json")
    idx = json.load(open(p))
    for sh in idx["shards"]:
        sh["column_encodings"][sh["column_names"].index("b")] = "pkl"
    json.dump(idx, open(p, "w"))
    import feedline
    pr = subprocess.run([exe, "cat", c], capture_output=True, text=True)
    check(f"{tag}, a pkl column: feedline cat refuses it naming the column",
          pr.returncode != 0 and "pkl" in pr.stderr and "`b`" in pr.stderr, pr.stderr.strip()[-300:])


def hf_damage(tag, exe, d, data, workdir):
    import pyarrow as pa
    files = [p for p, _ in data["files"]]
    victim = os.path.basename(files[1])

    c = copy(d, workdir, f"{tag}-truncated")
    p = os.path.join(c, victim)
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[: len(raw) // 2])
    refused(f"{tag}, an Arrow file truncated", exe, c, p)

    # The first message's length prefix (the schema's header) flipped.
    c = copy(d, workdir, f"{tag}-header")
    p = os.path.join(c, victim)
    raw = bytearray(open(p, "rb").read())
    raw[5] ^= 0x7F
    open(p, "wb").write(bytes(raw))
    refused(f"{tag}, bytes flipped in an Arrow file's message header", exe, c, p)

    # A flip in the middle of a record batch's data: no checksum can see
    # it; feedline must refuse naming the file or give pyarrow's values.
    c = copy(d, workdir, f"{tag}-data")
    p = os.path.join(c, victim)
    raw = bytearray(open(p, "rb").read())
    raw[len(raw) // 2] ^= 0x01
    open(p, "wb").write(bytes(raw))
    pr = subprocess.run([exe, "cat", "arrow:" + p], capture_output=True, text=True)
    try:
        with pa.memory_map(p) as src:
            ref = pa.ipc.open_stream(src).read_all().to_pylist()
    except Exception as e:  # noqa: BLE001
        ref = e
    if pr.returncode != 0:
        check(f"{tag}, a bit flipped in Arrow record data: refused naming the file", p in pr.stderr,
              pr.stderr.strip()[-300:])
    elif isinstance(ref, Exception):
        check(f"{tag}, a bit flipped in Arrow record data: feedline reads what pyarrow refuses", False,
              f"pyarrow: {ref}")
    else:
        lines = [json.loads(x) for x in pr.stdout.splitlines() if x.strip()]
        check(f"{tag}, a bit flipped in Arrow record data (no checksum in the format): feedline gives "
              f"the {len(lines)} records pyarrow reads", len(lines) == len(ref), f"{len(lines)} vs {len(ref)}")

    c = copy(d, workdir, f"{tag}-state-cut")
    p = os.path.join(c, "state.json")
    text = open(p).read()
    open(p, "w").write(text[: len(text) // 2])
    refused(f"{tag}, state.json cut short", exe, c, p)

    c = copy(d, workdir, f"{tag}-state-missing")
    p = os.path.join(c, "state.json")
    st = json.load(open(p))
    st["_data_files"].append({"filename": "data-00009-of-00009.arrow"})
    json.dump(st, open(p, "w"))
    refused(f"{tag}, state.json naming a file that is not there", exe, c,
            os.path.join(c, "data-00009-of-00009.arrow"))


# ------------------------------------------------------------------ main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--feedline", default="target/release/feedline", help="the feedline command")
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = ap.parse_args()
    exe = os.path.abspath(args.feedline)
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe}: no feedline command there (cargo build --release -p feedline-cli)")
    import datasets
    import feedline
    import streaming
    print(f"feedline {getattr(feedline, '__version__', '?')} ({feedline.__file__}), datasets "
          f"{datasets.__version__}, mosaicml-streaming {streaming.__version__}, numpy {np.__version__}, "
          f"Pillow {Image.__version__}")
    workdir = args.dir or tempfile.mkdtemp(prefix="feedline-check-")
    os.makedirs(workdir, exist_ok=True)

    sets = []
    hf = os.path.join(workdir, "hf")
    shutil.rmtree(hf, ignore_errors=True)
    sets.append(("datasets save_to_disk", hf, write_hf(hf)))
    for comp in (None, "zstd"):
        d = os.path.join(workdir, f"mds-{comp or 'plain'}")
        shutil.rmtree(d, ignore_errors=True)
        sets.append((f"MDS {comp or 'uncompressed'}", d, write_mds(d, compression=comp)))

    for tag, d, data in sets:
        shards = ", ".join(f"{os.path.basename(p)} ({n})" for p, n in data["files"])
        print(f"-- {tag}: {d}: {sum(n for _, n in data['files'])} records in {shards}")
        attempt(f"{tag}: feedline cat", lambda: via_cat(tag, exe, d, data))
        attempt(f"{tag}: feedline run --trace", lambda: via_trace(tag, exe, d, data, workdir))
        attempt(f"{tag}: Python Loader", lambda: via_python(tag, d, data))
        attempt(f"{tag}: decode transform", lambda: images(tag, d, data))
        attempt(f"{tag}: decode transform, every field", lambda: images(tag, d, data, only_images=False))
    damage = os.path.join(workdir, "damaged")
    shutil.rmtree(damage, ignore_errors=True)
    os.makedirs(damage)
    for tag, d, data in sets:
        print(f"-- {tag}: damaged copies")
        if tag.startswith("MDS"):
            short = "mds-" + tag.split()[1]
            attempt(f"{tag}: damage", lambda: mds_damage(short, exe, d, damage))
        else:
            attempt(f"{tag}: damage", lambda: hf_damage("hf", exe, d, data, damage))

    failed = [r for r in RESULTS if not r[1]]
    print(f"\nsummary: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    for name, _, detail in failed:
        print(f"  FAILED {name}: {detail.splitlines()[0] if detail else ''}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
