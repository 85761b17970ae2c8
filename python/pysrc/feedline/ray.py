"""feedline on Ray: feedline's readers and transforms run in Ray actors on
CPU nodes and feed trainer ranks through Ray's object store, every record
exactly once per pass, deterministic, resumable; and a Ray Data source.

    import ray, feedline.ray
    service = feedline.ray.Service(files=[...], batch_size=256, shuffle=10_000, seed=7,
                                   transform="imagenet-train", deterministic=True,
                                   workers=8, resources_per_worker={"CPU": 4}, world_size=4)
    loader = service.loader(rank)            # in each trainer rank (a Ray task/actor, or not)
    for epoch in range(3):
        for batch in loader: ...             # batch["jpg"]: numpy, batch.origins: (file, record)
    state = loader.state_dict()              # Service(..., resume=[states]) goes on from there

    ds = feedline.ray.read(files, transform="imagenet-eval")   # a ray.data.Dataset

Ray is imported when a Service is made or read() is called: `import
feedline.ray` alone does not import it. docs/ray.md has the design: the pass
plan (every rank an equal share of the records, cut into a fixed number of
groups, each made by an ordinary feedline.Loader in a worker actor; whole
batches but each rank's last), what is guaranteed, and the numbers.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Mapping

import numpy as np

import feedline
from feedline import _native

__all__ = ["Service", "ServiceLoader", "RayBatch", "read", "output_steps", "pass_plan"]

STATE_FORMAT = "feedline.ray/3"

# Loader keywords the Service sets itself (per group); the rest of
# loader_options goes to every group's feedline.Loader as given.
_RESERVED = {"files", "batch_size", "shuffle", "seed", "passes", "deterministic", "drop_last",
             "rank", "world_size", "resume", "equalize", "transform", "workers", "readers",
             "schema"}


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("feedline.ray needs Ray: pip install 'feedline[ray]' (or ray[data])") from e
    return ray


# ------------------------------------------------------------------ the pass plan


def _expand(files):
    """`files` (a path, glob or URL, path-like, or a list of them) as the
    file specs feedline.Loader(files=...) reads: the extension's own
    expansion (globs, brace ranges, @list files, FORMAT: prefixes kept on
    every spec, remote globs listed), with the Loader's errors."""
    if isinstance(files, (str, bytes)) or hasattr(files, "__fspath__"):
        files = [files]
    try:
        items = list(files)
    except TypeError:
        raise ValueError(f"files must be a path, a glob or a list of them, not {type(files).__name__}") from None
    inputs = []
    for f in items:
        if not isinstance(f, str) and not hasattr(f, "__fspath__"):
            raise ValueError(f"files: {f!r} is not a path")
        f = os.fspath(f)
        if not isinstance(f, str):
            raise ValueError(f"files: {f!r} is not a str path")
        inputs.append(f)
    return _native._expand_inputs(inputs)


def _rank_groups(groups, rank, world_size):
    return [g for g in range(groups) if g % world_size == rank]


class _Plan:
    """The plan of one pass: `specs[g]` is group g's list of parts (each one
    feedline.Loader: files, ids (indices into the Service's files), shard,
    shards, ranges (per file None, or the (lo, hi) of its records the group
    keeps), seed); `group_records[g]` its records; `rank_records[r]` rank
    r's; `world` the world size it is made for (group g is rank g % world's)."""

    __slots__ = ("specs", "group_records", "rank_records", "world", "by_record")

    def __init__(self, specs, group_records, world, by_record):
        self.specs = specs
        self.group_records = group_records
        self.world = world
        self.by_record = by_record
        self.rank_records = [sum(group_records[g] for g in _rank_groups(len(specs), r, world))
                             for r in range(world)]


def _make_plan(files, counts, seed, pass_, groups, world, shuffle):
    """Pass `pass_`'s plan (see pass_plan) from the files' record counts: the
    extension's (feedline._native._group_plan), its file order the
    Loader's own of (seed, pass); here only made into dicts."""
    nf = len(files)
    if len(counts) != nf:
        raise ValueError(f"counts: {len(counts)} record counts for {nf} files")
    parts, records, by_record = _native._group_plan([int(c) for c in counts], seed, pass_, groups, world,
                                                    bool(shuffle))
    specs = [[{"files": [files[i] for i in ids], "ids": list(ids), "shard": shard, "shards": shards,
               "ranges": [None if rg is None else tuple(rg) for rg in ranges], "seed": part_seed}
              for ids, shard, shards, ranges, part_seed in group]
             for group in parts]
    return _Plan(specs, list(records), world, by_record)


def _file_ids(files, ids):
    """The file id of the name a record's origin gives: a file's spec, and
    for a FORMAT:-prefixed spec (`npz:dir/a.bin`) the path without the
    prefix too, which its records name (as feedline.Loader's do)."""
    out = dict(zip(files, ids))
    for f, i in zip(files, ids):
        if ":" in f:
            out.setdefault(f.split(":", 1)[1], i)
    return out


def _count_records(files, options):
    """Each file's records (feedline's record counting: headers, or framing),
    in the order of `files`."""
    kw = {k: v for k, v in options.items() if k in ("schema", "on_error", "max_bad")}
    out = []
    for f in files:
        with feedline.Loader([f], batch_size=1, shuffle=0, passes=1, readers=1, rank=0, world_size=1,
                             deterministic=True, **kw) as l:
            try:
                out.append(len(l))
            except TypeError as e:
                raise ValueError(f"the Service plans each pass by record: {f!r} cannot be counted ({e})") from None
            except feedline.FeedlineError as e:
                raise feedline.FeedlineError(f"counting the records of {f!r}: {e}") from None
    return out


def pass_plan(files, seed, pass_, groups, shuffle=True, counts=None, world_size=1):
    """The groups of pass `pass_` for `world_size` ranks: a list of `groups`
    groups (group g is read by rank g % world_size), each a list of parts
    (files, shard, shards, ranges), each part one feedline.Loader(files,
    rank=shard, world_size=shards) of which the group keeps, per file, the
    records in range (lo, hi) (None: all). `counts`: the files' record
    counts (default: counted here).

    The files are taken in the order of feedline.Loader's own file
    permutation of (seed, pass) (kept as given when `shuffle` is false),
    end to end (the plan is the extension's, _native._group_plan). Rank r's
    share is the records [N*r//world_size, N*(r+1)//world_size) of them (N
    records in all): the ranks' shares differ by at most one record. Its
    files (the first and the last may be cut with a neighbour rank, each
    part read by both) are cut into its groups, contiguous. With more
    groups than files, every group reads every file (one part a file) and
    keeps the records at the places c (in the same order) with c % (world_size x
    the rank's groups) == g: again a share of N // world_size or one more
    per rank. The batches are a function of these arguments and the Loader
    settings only -- not of the worker count, the ranks' timing or the
    placement."""
    files = list(files)
    if counts is None:
        counts = _count_records(files, {})
    plan = _make_plan(files, counts, seed, pass_, groups, world_size, shuffle)
    return [[(p["files"], p["shard"], p["shards"], p["ranges"]) for p in spec] for spec in plan.specs]


# ------------------------------------------------------------------ batches


class RayBatch(Mapping):
    """A batch from a Service: field name -> numpy array (read-only, in
    Ray's object store: no copy on the node that holds it) or list of
    bytes. `origins` is the (file, record) of every instance; `group` and
    `index` say which group's batch it is (both None for a batch put
    together from the last rows of several groups); `padded` is True for a
    batch that equalize="pad" repeats."""

    __slots__ = ("_fields", "_offsets", "_lengths", "origins", "pass_", "seq", "group", "index",
                 "padded")

    def __init__(self, fields, offsets, lengths, origins, pass_, seq, group, index, padded=False):
        self._fields = fields
        self._offsets = offsets
        self._lengths = lengths
        self.origins = origins
        self.pass_ = pass_
        self.seq = seq
        self.group = group
        self.index = index
        self.padded = padded

    @property
    def size(self):
        return len(self.origins)

    def __getitem__(self, key):
        return self._fields[key]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self):
        return len(self._fields)

    def offsets(self, name):
        """Ragged field, offsets layout: batch + 1 offsets (None otherwise)."""
        if name not in self._fields:
            raise KeyError(name)
        return self._offsets.get(name)

    def lengths(self, name):
        """Ragged field, padded layout: each instance's length (None otherwise)."""
        if name not in self._fields:
            raise KeyError(name)
        return self._lengths.get(name)

    def __repr__(self):
        return (f"RayBatch(pass={self.pass_}, seq={self.seq}, group={self.group}, index={self.index}, "
                f"size={self.size}, fields={list(self._fields)}{', padded' if self.padded else ''})")


def _export(batch):
    """A feedline.Batch as plain picklable parts (numpy base arrays viewing
    the batch: Ray's serialiser copies them once into the object store)."""
    fields, offsets, lengths = {}, {}, {}
    for name in batch:
        v = batch[name]
        fields[name] = np.asarray(v) if isinstance(v, np.ndarray) else v
        o = batch.offsets(name)
        if o is not None:
            offsets[name] = np.asarray(o)
        ln = batch.lengths(name)
        if ln is not None:
            lengths[name] = np.asarray(ln)
    return fields, offsets, lengths


def _rows(data, rows):
    """The rows `rows` (a sorted int array) of exported batch parts, copied
    (fields, offsets, lengths as _export gives them)."""
    fields, offsets, lengths = data
    f2, o2, l2 = {}, {}, {}
    for name, v in fields.items():
        o = offsets.get(name)
        if o is not None:
            o = np.asarray(o)
            starts, stops = o[rows], o[rows + 1]
            take = np.concatenate([np.arange(a, b) for a, b in zip(starts.tolist(), stops.tolist())]) \
                if len(rows) else np.zeros(0, dtype=np.int64)
            f2[name] = np.asarray(v)[take.astype(np.int64)]
            o2[name] = np.concatenate([[0], np.cumsum(stops - starts)]).astype(o.dtype)
        elif isinstance(v, np.ndarray):
            f2[name] = v[rows]
            if name in lengths:
                l2[name] = np.asarray(lengths[name])[rows]
        else:
            f2[name] = [v[i] for i in rows.tolist()]
    return f2, o2, l2


def _concat(datas):
    """Exported batch parts end to end (a field padded to another width in
    each is padded with zeros to the widest)."""
    if len(datas) == 1:
        return datas[0]
    fields, offsets, lengths = {}, {}, {}
    for name, first in datas[0][0].items():
        vs = [d[0][name] for d in datas]
        if name in datas[0][1]:
            os_ = [np.asarray(d[1][name]) for d in datas]
            fields[name] = np.concatenate(vs)
            shift = np.cumsum([0] + [o[-1] for o in os_[:-1]])
            offsets[name] = np.concatenate([os_[0][:1]] + [o[1:] + s for o, s in zip(os_, shift)]).astype(os_[0].dtype)
        elif isinstance(first, np.ndarray):
            if name in datas[0][2]:
                width = max(v.shape[1] for v in vs)
                vs = [np.pad(v, [(0, 0), (0, width - v.shape[1])] + [(0, 0)] * (v.ndim - 2))
                      if v.shape[1] < width else v for v in vs]
                lengths[name] = np.concatenate([np.asarray(d[2][name]) for d in datas])
            fields[name] = np.concatenate(vs)
        else:
            fields[name] = [x for v in vs for x in v]
    return fields, offsets, lengths


# ------------------------------------------------------------------ worker actor


class _Group:
    """One group's pipeline in a worker: a thread runs the group's parts
    (each a feedline.Loader) one after the other, keeps the records of each
    file's range and not in the state's `skip`, and cuts them into batches
    of exactly batch_size rows but the group's last (rows left over from
    one Loader batch are carried into the next batch), each with the
    group's state after it, into a queue of at most `prefetch` batches;
    take() hands them out in order.

    The group's state: {"part", "loader", "skip"}: part `part` goes on from
    its Loader's state `loader` (None: from its start), the records in
    `skip` ([file id, record]: handed out already) left out. A batch's
    state points before the oldest Loader batch whose rows are still
    carried, with the rows of it handed out in `skip`: a resume makes the
    same rows again."""

    def __init__(self, key, spec, opts, state, prefetch, stats):
        self.key = key
        self.cv = threading.Condition()
        self.queue = []
        self.prefetch = prefetch
        self.done = False
        self.error = None
        self.closed = False
        self.stats = stats
        self.thread = threading.Thread(target=self._run, args=(spec, opts, state), daemon=True,
                                       name=f"feedline-ray-group-{key[:8]}")
        self.thread.start()

    def _put(self, item, t0):
        made = time.perf_counter()
        fields = item[0]
        nbytes = sum(v.nbytes for v in fields.values() if isinstance(v, np.ndarray))
        with self.cv:
            self.stats["busy_s"] += made - t0
            self.stats["batches"] += 1
            self.stats["records"] += len(item[3])
            self.stats["bytes"] += nbytes
            while len(self.queue) >= self.prefetch and not self.closed:
                self.cv.wait()
            self.stats["blocked_s"] += time.perf_counter() - made
            if self.closed:
                return False
            self.queue.append(item)
            self.cv.notify_all()
        return True

    def _run(self, spec, opts, state):
        loader = None
        try:
            size = opts["batch_size"]
            parts = spec
            part_of = {fid: i for i, p in enumerate(parts) for fid in p["ids"]}
            first = state["part"] if state is not None else 0
            skip = {}  # (file id, record) -> where it was seen again ((part, batch) or None)
            if state is not None:
                skip = {(int(f), int(r)): None for f, r in state["skip"]}
            # carried rows: [part, Loader batch, state before it, data, origins, ids, handed out]
            carry = []
            seq = 0
            image_fields = ()
            t0 = time.perf_counter()

            def state_after(part, batch, before_next):
                # the state after the rows handed out so far
                if carry:
                    p, m, before, _, _, ids, out = carry[0]
                    handed = [list(x) for x in ids[:out]]
                else:
                    p, m, before, handed = part, batch + 1, before_next, []
                keep = [list(x) for x, seen in skip.items()
                        if part_of.get(x[0], -1) >= p and (seen is None or seen >= (p, m))]
                return {"part": p, "loader": before, "skip": keep + handed}

            def emit(part, batch, before_next, final=False):
                nonlocal seq, t0
                while carry and (final or sum(len(c[4]) - c[6] for c in carry) >= size):
                    want, datas, origins = size, [], []
                    while carry and want:
                        c = carry[0]
                        n = min(want, len(c[4]) - c[6])
                        whole = c[6] == 0 and n == len(c[4])
                        datas.append(c[3] if whole else _rows(c[3], np.arange(c[6], c[6] + n)))
                        origins.extend(c[4][c[6]:c[6] + n])
                        c[6] += n
                        want -= n
                        if c[6] == len(c[4]):
                            carry.pop(0)
                    fields, offsets, lengths = _concat(datas)
                    st = state_after(part, batch, before_next)
                    # skipped records behind the state are not read again
                    front = (carry[0][0], carry[0][1]) if carry else (part, batch + 1)
                    for x in [x for x, seen in skip.items()
                              if (seen is not None and seen < front) or part_of.get(x[0], -1) < front[0]]:
                        del skip[x]
                    last = final and not carry  # the group's last batch (the rank holds it back if short)
                    if not self._put((fields, offsets, lengths, origins, seq, st, image_fields, last), t0):
                        return False
                    seq += 1
                    t0 = time.perf_counter()
                return True

            for pi in range(first, len(parts)):
                part = parts[pi]
                kw = dict(opts, seed=part["seed"])
                before = None
                if state is not None and pi == first and state["loader"] is not None:
                    kw["resume"] = before = state["loader"]
                loader = feedline.Loader(part["files"], passes=1, rank=part["shard"],
                                         world_size=part["shards"], **kw)
                fid = _file_ids(part["files"], part["ids"])
                ranges = {i: rg for i, rg in zip(part["ids"], part["ranges"]) if rg is not None}
                it = iter(loader)
                m = 0
                while True:
                    try:
                        b = next(it)
                    except StopIteration:
                        break
                    after = loader.state_dict()
                    image_fields = loader.image_fields
                    origins = [tuple(o) for o in b.origins]
                    try:
                        ids = [(fid[f], r) for f, r in origins]
                    except KeyError as e:
                        raise feedline.FeedlineError(
                            f"a record's origin names the file {e.args[0]!r}, not one of the part's files "
                            f"{part['files'][:3]}{'...' if len(part['files']) > 3 else ''}") from None
                    keep = None
                    if ranges or skip:
                        keep = []
                        for i, ((f, r), x) in enumerate(zip(origins, ids)):
                            rg = ranges.get(x[0])
                            if rg is not None and not rg[0] <= r < rg[1]:
                                continue
                            if x in skip:
                                if skip[x] is None:
                                    skip[x] = (pi, m)
                                continue
                            keep.append(i)
                        if len(keep) == len(origins):
                            keep = None
                    data = _export(b)
                    if keep is not None:
                        rows = np.asarray(keep, dtype=np.int64)
                        data = _rows(data, rows)
                        origins = [origins[i] for i in keep]
                        ids = [ids[i] for i in keep]
                    if origins:
                        carry.append([pi, m, before, data, origins, ids, 0])
                    if not emit(pi, m, after):
                        return
                    before = after
                    m += 1
                loader.close()
                loader = None
            emit(len(parts), 0, None, final=True)
        except BaseException as e:  # noqa: BLE001 - handed to the rank by take()
            with self.cv:
                self.error = f"{type(e).__name__}: {e}"
                self.error_type = type(e).__name__
        finally:
            if loader is not None:
                loader.close()
            with self.cv:
                self.done = True
                self.cv.notify_all()

    def take(self):
        with self.cv:
            while not self.queue and not self.done:
                self.cv.wait()
            if self.queue:
                item = self.queue.pop(0)
                self.cv.notify_all()
                return ("batch", item)
            if self.error is not None:
                return ("error", (self.error_type, self.error))
            return ("end", None)

    def close(self):
        with self.cv:
            self.closed = True
            self.queue.clear()
            self.cv.notify_all()


class _Worker:
    """A worker actor: runs the groups the ranks open on it."""

    def __init__(self, index):
        self.index = index
        self.groups = {}
        self.gone = set()  # keys closed (maybe before their open() ran: a threaded actor keeps no call order)
        self.lock = threading.Lock()
        self.opened = threading.Condition(self.lock)
        self.stats = {"batches": 0, "records": 0, "bytes": 0, "busy_s": 0.0, "blocked_s": 0.0}
        self.started = time.monotonic()

    def ready(self):
        import ray
        return {"index": self.index, "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid()}

    def open(self, key, spec, opts, state, prefetch):
        with self.lock:
            if key in self.gone:
                return False
            self.groups[key] = _Group(key, spec, opts, state, prefetch, self.stats)
            self.opened.notify_all()
        return True

    def take(self, key):
        # open() and take() are sent one after the other, but a threaded
        # actor may run them in either order: wait for the open.
        with self.lock:
            end = time.monotonic() + 300
            while key not in self.groups and key not in self.gone and time.monotonic() < end:
                self.opened.wait(1.0)
            g = self.groups.get(key)
        if g is None:
            return ("error", ("RuntimeError", f"group {key} was never opened on worker {self.index}"))
        kind, item = g.take()
        if kind != "batch":
            with self.lock:
                self.groups.pop(key, None)
        return (kind, item)

    def close(self, key):
        with self.lock:
            g = self.groups.pop(key, None)
            self.gone.add(key)
            self.opened.notify_all()
        if g is not None:
            g.close()
        return True

    def report(self):
        import ray
        up = time.monotonic() - self.started
        s = dict(self.stats)
        with self.lock:
            s["groups_open"] = len(self.groups)
        s["index"] = self.index
        s["node_id"] = ray.get_runtime_context().get_node_id()
        s["uptime_s"] = up
        s["records_per_s"] = s["records"] / up if up > 0 else 0.0
        s["busy_fraction"] = s["busy_s"] / up if up > 0 else 0.0
        return s


# ------------------------------------------------------------------ coordinator actor


class _Coordinator:
    """Holds the worker actors (and replaces dead ones), places groups on
    the least loaded worker, counts batches per group for len() and
    equalize, and gathers the ranks' statistics."""

    def __init__(self, config):
        import ray
        self.config = config
        self.lock = threading.Lock()
        self.worker_cls = ray.remote(_Worker)
        self.workers = [self._start(i) for i in range(config["workers"])]
        self.load = [0] * config["workers"]
        self.ready = [True] * config["workers"]
        self.replacing = [False] * config["workers"]
        self.replaced = 0
        self.counts = None
        self.count_lock = threading.Lock()
        self.ranks = {}
        self.error = None
        try:
            ray.get([w.ready.remote() for w in self.workers], timeout=config["start_timeout_s"])
        except ray.exceptions.GetTimeoutError:
            for w in self.workers:
                ray.kill(w)
            self.error = (f"the {config['workers']} worker actor(s) were not all placed within "
                          f"{config['start_timeout_s']} s: resources_per_worker asks for "
                          f"{config['resources_per_worker']!r} each; the cluster has "
                          f"{ray.cluster_resources()!r}")

    def start_error(self):
        return self.error

    def _start(self, index):
        o = self.config["actor_options"]
        c = self.config
        conc = max(16, 2 * c["world_size"] * c["interleave"] + 8)
        self.started_actors = getattr(self, "started_actors", 0) + 1
        name = f"feedline-worker-{c['service_id']}-{index}-{self.started_actors}"
        return self.worker_cls.options(max_concurrency=conc, name=name, **o).remote(index)

    def assign(self):
        """The least loaded worker that is up (a replacement still being
        placed is passed over while another worker is up)."""
        end = time.monotonic() + self.config["start_timeout_s"]
        while True:
            with self.lock:
                up = [j for j in range(len(self.load)) if self.ready[j]]
                if up:
                    i = min(up, key=lambda j: (self.load[j], j))
                    self.load[i] += 1
                    return i, self.workers[i]
            if time.monotonic() > end:
                raise RuntimeError(f"no worker actor is up: replacements not placed within "
                                   f"{self.config['start_timeout_s']} s (resources_per_worker "
                                   f"{self.config['resources_per_worker']!r})")
            time.sleep(0.05)

    def release(self, i, actor_id):
        with self.lock:
            if self.workers[i]._actor_id.hex() == actor_id:
                self.load[i] = max(0, self.load[i] - 1)

    def worker(self, i):
        return self.workers[i]

    def replace(self, i, dead_actor_id):
        """A rank saw worker i fail: if it is dead, start a replacement with
        the same resources (once, whoever asks first). Not waited for: the
        ranks go on with the workers that are up (a worker on a lost node
        may have no place to come back to)."""
        import ray
        with self.lock:
            current = self.workers[i]
            if current._actor_id.hex() != dead_actor_id or self.replacing[i]:
                return
            self.replacing[i] = True
        try:
            ray.get(current.ready.remote(), timeout=30)
            alive = True
        except Exception:  # noqa: BLE001 - any failure: it is gone
            alive = False
        with self.lock:
            self.replacing[i] = False
            if alive:
                return
            new = self._start(i)
            self.workers[i] = new
            self.ready[i] = False
            self.load[i] = 0
            self.replaced += 1
        threading.Thread(target=self._await_ready, args=(i, new), daemon=True).start()

    def _await_ready(self, i, w):
        import ray
        try:
            ray.get(w.ready.remote())
        except Exception:  # noqa: BLE001 - it died too: the next failure replaces it
            return
        with self.lock:
            if self.workers[i] is w:
                self.ready[i] = True

    def file_counts(self):
        """Each file's records (feedline's record counting: headers, or
        framing), counted once: ("ok", counts) or ("error", (type, message))."""
        with self.count_lock:  # once, whichever rank asks first
            if self.counts is None:
                c = self.config
                try:
                    self.counts = ("ok", _count_records(c["files"], c["loader_options"]))
                except Exception as e:  # noqa: BLE001 - handed to the rank
                    self.counts = ("error", (type(e).__name__, str(e)))
            return self.counts

    def rank_report(self, rank, stats):
        with self.lock:
            self.ranks[rank] = stats

    def stats(self):
        import ray
        workers = []
        with self.lock:
            ready = list(self.ready)
        for i, w in enumerate(list(self.workers)):
            if not ready[i]:
                workers.append({"index": i, "error": "starting (a replacement not yet placed)"})
                continue
            try:
                workers.append(ray.get(w.report.remote(), timeout=30))
            except Exception as e:  # noqa: BLE001 - a dead worker is reported as such
                workers.append({"index": i, "error": f"{type(e).__name__}: {e}"})
        with self.lock:
            ranks = {r: dict(s) for r, s in self.ranks.items()}
            replaced = self.replaced
        return {"workers": workers, "ranks": ranks, "workers_replaced": replaced}

    def shutdown(self):
        import ray
        for w in self.workers:
            ray.kill(w)
        return True


# ------------------------------------------------------------------ the service


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, not {type(v).__name__}")
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, not {v}")
    return int(v)


def _actor_options(resources):
    if not isinstance(resources, Mapping):
        raise ValueError(f"resources_per_worker must be a dict such as {{'CPU': 4}}, not {type(resources).__name__}")
    opts, custom = {}, {}
    for k, v in resources.items():
        if not isinstance(k, str):
            raise ValueError(f"resources_per_worker: the key {k!r} is not a resource name")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
            raise ValueError(f"resources_per_worker[{k!r}] must be a non-negative number, not {v!r}")
        if k == "CPU":
            opts["num_cpus"] = v
        elif k == "GPU":
            opts["num_gpus"] = v
        elif k == "memory":
            opts["memory"] = v
        else:
            custom[k] = v
    opts.setdefault("num_cpus", 1)
    if custom:
        opts["resources"] = custom
    return opts


class Service:
    """feedline's pipelines in `workers` Ray actors, feeding `world_size`
    trainer ranks (service.loader(rank)). Picklable: send it to the Ray
    tasks or actors that train. Made on the driver (it starts the actors);
    the actors live as long as the process that made the Service.

    files: every input form feedline.Loader takes (paths, URLs, globs,
    brace ranges, @list files, FORMAT: prefixes), expanded as it expands
    them, each file named planned on its own. Each pass gives every rank an
    equal share of the records (N // world_size, or one more), in batches of batch_size
    rows but its last (pass_plan, docs/ray.md). groups: each pass's shares
    are cut into this many groups (default max(min(len(files), 64),
    world_size); more groups than files share the files by record); the
    batches depend on it, not on `workers`. service.worker_actors() gives the worker actors'
    handles (named feedline-worker-<service>-<index>-<n>). interleave: groups a rank reads side by side (default
    4: a rank gets at most interleave workers' throughput). prefetch:
    batches queued ahead per open group: a rank that stops taking stops the
    workers after at most interleave x (prefetch + 2) batches made ahead of
    it. equalize: None, "drop" or "pad".
    resume: a rank's state_dict(), or a list of them (one per old rank);
    under another world_size every old rank's state is needed.
    ship_pixels (default True): when the transform ends in output steps
    (to-f32, normalize, chw), the workers run its pixel steps and ship
    uint8 [H, W, 3] images (a quarter of float32's bytes through the object
    store) and the rank runs the output steps: the same batches, to the bit.
    False ships the transform's output as made.
    loader_options: other feedline.Loader keywords for each group's loader
    (on_error, max_bad, max_pixels, capacity, batches_in_flight, map, ...)."""

    def __init__(self, files, batch_size=256, shuffle=10_000, seed=0, transform=None,
                 deterministic=False, workers=1, resources_per_worker=None, world_size=1,
                 equalize=None, resume=None, drop_last=False, groups=None, interleave=4,
                 prefetch=2, readers=2, threads_per_worker=None, schema=None, start_timeout_s=300,
                 ship_pixels=True, **loader_options):
        files = _expand(files)
        batch_size = _check_int("batch_size", batch_size, 1)
        shuffle = _check_int("shuffle", shuffle, 0)
        seed = _check_int("seed", seed, 0)
        workers = _check_int("workers", workers, 1)
        world_size = _check_int("world_size", world_size, 1)
        interleave = _check_int("interleave", interleave, 1)
        prefetch = _check_int("prefetch", prefetch, 1)
        readers = _check_int("readers", readers, 1)
        if groups is None:
            groups = max(min(len(files), 64), world_size)
        groups = _check_int("groups", groups, 1)
        if groups < world_size:
            raise ValueError(f"world_size={world_size} ranks need at least as many groups, not groups={groups}")
        if equalize not in (None, "drop", "pad"):
            raise ValueError(f"equalize must be None, 'drop' or 'pad', not {equalize!r}")
        if not isinstance(deterministic, bool):
            raise ValueError(f"deterministic must be True or False, not {deterministic!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last must be True or False, not {drop_last!r}")
        if not isinstance(ship_pixels, bool):
            raise ValueError(f"ship_pixels must be True or False, not {ship_pixels!r}")
        if transform is not None and not isinstance(transform, str):
            raise ValueError(f"transform must be a spec string such as 'imagenet-train', not {transform!r}")
        # the transform's pixel steps, when the workers ship pixels (None:
        # they ship the output); a bad spec is a ValueError here
        pixel_steps = _native._pixel_steps(transform) if transform is not None and ship_pixels else None
        if isinstance(start_timeout_s, bool) or not isinstance(start_timeout_s, (int, float)) \
                or not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be a positive number of seconds, not {start_timeout_s!r}")
        if resources_per_worker is None:
            resources_per_worker = {"CPU": 1}
        actor_options = _actor_options(resources_per_worker)
        bad = sorted(set(loader_options) & _RESERVED)
        if bad:
            raise ValueError(f"{bad[0]!r} is set by the Service itself")
        if loader_options.get("pack") is not None:
            raise ValueError(f"pack={loader_options['pack']!r}: the Service plans each pass by record and "
                             f"cuts batches of batch_size records; packed rows (documents cut and joined) "
                             f"are not records: pack with feedline.Loader")
        if threads_per_worker is None:
            threads_per_worker = max(1, int(math.ceil(actor_options.get("num_cpus", 1) or 1)))
        threads_per_worker = _check_int("threads_per_worker", threads_per_worker, 1)
        opts = dict(loader_options)
        opts.update(batch_size=batch_size, shuffle=shuffle, deterministic=deterministic,
                    drop_last=False, readers=readers)  # drop_last: the rank's last batch
        if transform is not None:
            opts.update(transform=pixel_steps or transform, workers=threads_per_worker)
        elif "map" in opts:
            opts.update(workers=threads_per_worker)
        if schema is not None:
            opts["schema"] = schema
        self._config = {
            "files": files, "batch_size": batch_size, "shuffle": shuffle, "seed": seed,
            "transform": transform, "deterministic": deterministic, "workers": workers,
            "world_size": world_size, "equalize": equalize, "drop_last": drop_last,
            "groups": groups, "interleave": interleave, "prefetch": prefetch,
            "actor_options": actor_options, "loader_options": opts,
            "resources_per_worker": dict(resources_per_worker),
            "service_id": uuid.uuid4().hex[:12],
            "start_timeout_s": start_timeout_s,
            "ship_pixels": pixel_steps is not None,
        }
        self._resume = _check_resume(resume, self._config)
        ray = _ray()
        if not ray.is_initialized():
            ray.init()
        coord_cls = ray.remote(_Coordinator)
        # On the driver's node: the service lives and dies with the driver,
        # never with a CPU node that is lost.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self._coordinator = coord_cls.options(num_cpus=0, max_concurrency=64,
                                              scheduling_strategy=here).remote(self._config)
        err = ray.get(self._coordinator.start_error.remote())  # once the workers are up, or not
        if err is not None:
            ray.kill(self._coordinator)
            raise ValueError(err)

    @property
    def world_size(self):
        return self._config["world_size"]

    @property
    def workers(self):
        return self._config["workers"]

    @property
    def groups(self):
        return self._config["groups"]

    def loader(self, rank, state=None):
        """The iterable of rank `rank`: epochs by iteration, state_dict(), len().
        `state` (a state_dict() of this rank) starts it there instead of
        where Service(resume=...) says."""
        rank = _check_int("rank", rank, 0)
        if rank >= self._config["world_size"]:
            raise ValueError(f"rank {rank} is out of range for world_size={self._config['world_size']}")
        if state is not None:
            start = _check_resume(state, self._config)
        else:
            start = self._resume
        return ServiceLoader(self._config, self._coordinator, rank, start)

    def stats(self):
        """Per worker (node, batches, records, records_per_s, busy/blocked
        seconds) and per rank (batches, records, records_per_s, wait_s), and
        the bottleneck: "workers" when the ranks wait for batches more than
        the workers wait for room, else "ranks"."""
        ray = _ray()
        s = ray.get(self._coordinator.stats.remote())
        ranks = s["ranks"]
        live = [w for w in s["workers"] if "error" not in w]
        rank_wait = sum(r["wait_s"] for r in ranks.values()) / max(1, len(ranks))
        rank_time = sum(r["elapsed_s"] for r in ranks.values()) / max(1, len(ranks))
        worker_blocked = sum(w["blocked_s"] for w in live) / max(1, len(live))
        worker_up = sum(w["uptime_s"] for w in live) / max(1, len(live))
        wait_frac = rank_wait / rank_time if rank_time > 0 else 0.0
        blocked_frac = worker_blocked / worker_up if worker_up > 0 else 0.0
        s["bottleneck"] = "workers" if wait_frac >= blocked_frac else "ranks"
        s["rank_wait_fraction"] = wait_frac
        s["worker_blocked_fraction"] = blocked_frac
        s["records_per_s"] = sum(r["records_per_s"] for r in ranks.values())
        return s

    def shutdown(self):
        """Kill the worker actors and the coordinator."""
        ray = _ray()
        try:
            ray.get(self._coordinator.shutdown.remote())
        finally:
            ray.kill(self._coordinator)

    def worker_actors(self):
        """The worker actors' handles now (replacements included)."""
        ray = _ray()
        return [ray.get(self._coordinator.worker.remote(i)) for i in range(self._config["workers"])]

    def __reduce__(self):
        return (_rebuild_service, (self._config, self._resume, self._coordinator))


def _rebuild_service(config, resume, coordinator):
    s = Service.__new__(Service)
    s._config = config
    s._resume = resume
    s._coordinator = coordinator
    return s


def _fingerprint(config):
    c = config
    return {"files": list(c["files"]), "batch_size": c["batch_size"], "shuffle": c["shuffle"],
            "seed": c["seed"], "transform": c["transform"], "deterministic": c["deterministic"],
            "drop_last": c["drop_last"], "groups": c["groups"], "equalize": c["equalize"],
            "ship_pixels": c.get("ship_pixels", False)}


def _check_resume(resume, config):
    """The old ranks' states by rank, checked against these settings."""
    if resume is None:
        return None
    states = [resume] if isinstance(resume, Mapping) else resume
    try:
        states = list(states)
    except TypeError:
        raise ValueError("resume must be a state_dict() or a list of them") from None
    if not states:
        raise ValueError("resume: an empty list")
    fp = _fingerprint(config)
    by_rank = {}
    for s in states:
        if isinstance(s, Mapping) and s.get("format") == "feedline.ray/1":
            raise ValueError(f"resume: a state of format 'feedline.ray/1' (groups cut by file, batches cut "
                             f"per group), not this version's {STATE_FORMAT!r} (each pass planned by "
                             f"record): its positions name other groups; start the pass again")
        if isinstance(s, Mapping) and s.get("format") == "feedline.ray/2":
            raise ValueError(f"resume: a state of format 'feedline.ray/2' (files ordered by numpy's "
                             f"permutation), not this version's {STATE_FORMAT!r} (files ordered by the "
                             f"Loader's permutation of (seed, pass), planned by the extension): its "
                             f"positions name other groups; start the pass again")
        if not isinstance(s, Mapping) or s.get("format") != STATE_FORMAT:
            raise ValueError(f"resume: not a feedline.ray state_dict() (format {STATE_FORMAT!r})")
        for k, v in fp.items():
            # (a state from before ship_pixels existed was taken shipping the output)
            old = s["settings"].get(k, False if k == "ship_pixels" else None)
            if old != v:
                if k == "files":
                    raise ValueError("resume: the file set changed since the state was taken")
                if k == "ship_pixels":
                    raise ValueError(f"resume: the state was taken with ship_pixels={old!r} (its groups' "
                                     f"checkpoints name the transform the workers ran): give "
                                     f"ship_pixels={old!r}")
                raise ValueError(f"resume: setting {k!r} changed since the state was taken: {old!r} -> {v!r}")
        r = s["rank"]
        if r in by_rank:
            raise ValueError(f"resume: two states of rank {r}")
        by_rank[r] = s
    old_world = {s["world_size"] for s in states}
    if len(old_world) != 1:
        raise ValueError(f"resume: states of different world sizes {sorted(old_world)}")
    old_world = old_world.pop()
    if old_world == config["world_size"] and config["interleave"] != states[0]["interleave"]:
        raise ValueError(f"resume: setting 'interleave' changed since the state was taken: "
                         f"{states[0]['interleave']!r} -> {config['interleave']!r}")
    if old_world == config["world_size"]:
        return {"mode": "same", "states": by_rank}
    if sorted(by_rank) != list(range(old_world)):
        missing = sorted(set(range(old_world)) - set(by_rank))
        raise ValueError(f"resume under another world_size ({old_world} -> {config['world_size']}) needs "
                         f"every old rank's state: missing rank(s) {missing}")
    passes = {s["pass"] for s in states}
    if len(passes) != 1:
        raise ValueError(f"resume under another world_size: the old ranks' states are in different passes "
                         f"{sorted(passes)}; take them at the same point of the same pass")
    p = passes.pop()
    if all(s["finished"] for s in states):  # every rank at the end of pass p: the next pass
        return {"mode": "elastic", "pass": p + 1, "plan_world": config["world_size"], "groups": {}}
    plan_world = {s["plan_world"] for s in states}.pop()
    merged = {}
    for s in states:
        el = s.get("elastic")
        if el is not None:  # taken in a pass that was itself resumed under another world size
            for g in el["done"]:
                merged[int(g)] = None
        for g in s["done"]:
            merged[int(g)] = None
        # groups open, with rows in the pool, or partly read and not yet opened again
        for g, taken, st, n in list(s["active"]) + list(s["pool"]) + list(s["pending"]):
            merged[int(g)] = (taken, st, n)
    return {"mode": "elastic", "pass": p, "plan_world": plan_world, "groups": merged}


# ------------------------------------------------------------------ a rank's loader


class _Cursor:
    __slots__ = ("group", "taken", "state", "records", "key", "slot", "worker", "pending")

    def __init__(self, group, taken=0, state=None, records=0):
        self.group = group
        self.taken = taken
        self.state = state
        self.records = records
        self.key = None
        self.slot = None
        self.worker = None
        self.pending = None


class _Tail:
    """A group's last batch, short of batch_size, held by the rank until
    rows of other groups' last batches make a whole batch with it (or the
    pass ends). `state` is the group's state before it, `out` its rows
    handed out; data None until fetched again after a resume."""

    __slots__ = ("group", "taken", "state", "records", "data", "origins", "out")

    def __init__(self, group, taken, state, records, data=None, origins=None):
        self.group = group
        self.taken = taken
        self.state = state
        self.records = records
        self.data = data
        self.origins = origins
        self.out = 0

    def left(self):
        return len(self.origins) - self.out

    def resume_state(self, ids):
        """The group's state after the rows handed out: the state before its
        last batch, those rows skipped."""
        handed = [[ids[f], r] for f, r in self.origins[:self.out]] if self.out else []
        s = self.state or {"part": 0, "loader": None, "skip": []}
        return {"part": s["part"], "loader": s["loader"], "skip": list(s["skip"]) + handed}


class ServiceLoader:
    """A rank's batches from a Service: `for batch in loader` runs the next
    pass (a loop left early goes on with the same pass when iterated again),
    len() is this rank's batches of a whole pass, state_dict() the position
    after the batches taken.

    Every batch has batch_size rows but the rank's last of the pass: a
    group's last batch, short, is held back until the last batches of the
    rank's next groups fill a batch with it (`group` None: rows of several
    groups), and what is left when every group has ended is the pass's
    last batch (dropped with drop_last=True). The state covers the rows
    held back: a resume makes them again."""

    def __init__(self, config, coordinator, rank, start):
        self._c = config
        self._coord = coordinator
        self.rank = rank
        self.world_size = config["world_size"]
        self._closed = False
        self._stats = {"batches": 0, "records": 0, "bytes": 0, "wait_s": 0.0, "padded": 0,
                       "worker_failures": 0, "output_steps_s": 0.0, "merged": 0}
        self._t0 = time.monotonic()
        self._last_report = 0.0
        self._pass = None
        self._group_list = []
        self._counts = None
        self._plans = {}
        self._ids = _file_ids(config["files"], range(len(config["files"])))
        self._pool = []
        self._active = []
        if start is not None and start["mode"] == "same" and rank in start["states"]:
            self._restore(start["states"][rank])
        elif start is not None and start["mode"] == "elastic":
            self._begin_elastic(start)
        else:
            self._begin(0)

    # ---- pass bookkeeping

    def _plan_for(self, p, world):
        key = (p, world)
        if key not in self._plans:
            if self._counts is None:
                ray = _ray()
                kind, v = ray.get(self._coord.file_counts.remote())
                if kind == "error":
                    etype, msg = v
                    raise (ValueError if etype == "ValueError" else feedline.FeedlineError)(msg)
                self._counts = v
            c = self._c
            self._plans[key] = _make_plan(c["files"], self._counts, c["seed"], p, c["groups"], world,
                                          c["shuffle"] > 0)
            for k in [k for k in self._plans if k[0] < p - 1]:
                del self._plans[k]
        return self._plans[key]

    def _reset(self, p, world):
        self._pass = p
        self._plan = self._plan_for(p, world)
        self._next_group = 0
        self._active = []
        self._pool = []
        self._pos = 0
        self._done = []
        self._delivered = 0
        self._target = None
        self._restored_target = None
        self._first = None
        self._finished = False
        self._elastic = {}
        self._elastic_start = None

    def _mine(self, plan):
        """This rank's groups of `plan` that have records to read."""
        return [g for g in _rank_groups(self._c["groups"], self.rank, self.world_size) if plan.specs[g]]

    def _begin(self, p):
        self._reset(p, self.world_size)
        self._group_list = self._mine(self._plan)
        self._fill()

    def _restore(self, s):
        self._reset(s["pass"], s["plan_world"])
        self._group_list = list(s["group_list"])
        self._next_group = s["next_group"]
        self._active = [_Cursor(int(g), taken, st, n) for g, taken, st, n in s["active"]]
        self._pool = [_Tail(int(g), taken, st, n) for g, taken, st, n in s["pool"]]
        self._elastic = {int(g): (taken, st, n) for g, taken, st, n in s["pending"]}
        self._elastic_start = s.get("elastic")
        self._pos = s["pos"]
        self._done = list(s["done"])
        self._delivered = s["delivered"]
        self._restored_target = s.get("target")
        self._finished = s["finished"]
        if self._finished:
            self._begin(self._pass + 1)

    def _begin_elastic(self, start):
        self._reset(start["pass"], start["plan_world"])
        merged = start["groups"]
        plan = self._plan
        mine = self._mine(plan)
        partial = [g for g in mine if g in merged and merged[g] is not None]
        fresh = [g for g in mine if g not in merged]
        self._group_list = partial + fresh
        self._done = [g for g in mine if g in merged and merged[g] is None]
        self._elastic = {g: merged[g] for g in partial}
        # what the pass had left at the resume, for len() and equalize
        self._elastic_start = {"done": sorted(g for g, v in merged.items() if v is None),
                               "delivered": sorted([g, v[2]] for g, v in merged.items() if v is not None)}
        self._fill()

    def _cursor(self, g):
        if g in self._elastic:
            taken, st, n = self._elastic.pop(g)
            return _Cursor(g, taken, st, n)
        return _Cursor(g)

    def _fill(self):
        """Open groups from the rank's list until `interleave` are open."""
        while len(self._active) < self._c["interleave"] and self._next_group < len(self._group_list):
            self._active.append(self._cursor(self._group_list[self._next_group]))
            self._next_group += 1

    def _open(self, cur):
        ray = _ray()
        cur.slot, cur.worker = ray.get(self._coord.assign.remote())
        cur.key = uuid.uuid4().hex
        cur.worker.open.remote(cur.key, self._plan.specs[cur.group], self._c["loader_options"], cur.state,
                               self._c["prefetch"])
        cur.pending = cur.worker.take.remote(cur.key)

    def _release(self, cur, close=True):
        if cur.worker is not None:
            if close:
                cur.worker.close.remote(cur.key)
            self._coord.release.remote(cur.slot, cur.worker._actor_id.hex())
        cur.worker = None
        cur.pending = None

    def _get(self, cur):
        """The next item of `cur`'s group; a dead worker is replaced and the
        group goes on from the state after its last batch taken."""
        ray = _ray()
        for attempt in range(20):
            if cur.pending is None:
                self._open(cur)
            t0 = time.perf_counter()
            try:
                kind, item = ray.get(cur.pending)
                self._stats["wait_s"] += time.perf_counter() - t0
                return kind, item
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
                # The worker died (its node too, maybe: then the batch it had
                # made is lost with the node's object store). The group goes
                # on from the state after the last batch taken from it.
                self._stats["worker_failures"] += 1
                dead = cur.worker
                self._release(cur)  # close: the worker may live on (an object lost alone)
                ray.get(self._coord.replace.remote(cur.slot, dead._actor_id.hex()))
        raise feedline.FeedlineError(f"group {cur.group}: its worker died 20 times in a row")

    def _fail(self, cur, item):
        etype, msg = item
        self.close()
        if etype == "ValueError":
            raise ValueError(f"group {cur.group} of pass {self._pass}: {msg}")
        raise feedline.FeedlineError(f"group {cur.group} of pass {self._pass}: {msg}")

    def _unpack(self, item):
        """A worker's batch: its parts, the output steps run on its pixels."""
        fields, offsets, lengths, origins, seq, st, image_fields, _ = item
        if self._c.get("ship_pixels") and image_fields:
            t0 = time.perf_counter()
            for name in image_fields:
                fields[name] = _native._expand_pixels(fields[name], self._c["transform"])
            self._stats["output_steps_s"] += time.perf_counter() - t0
        return (fields, offsets, lengths), [tuple(o) for o in origins], st

    def _refetch(self):
        """The rows a resumed state holds back: made again by their groups
        (from the state before each group's last batch, the rows handed out
        skipped), in the order they were held."""
        for t in self._pool:
            if t.data is not None:
                continue
            cur = _Cursor(t.group, t.taken, t.state, t.records)
            kind, item = self._get(cur)
            self._release(cur)
            if kind == "error":
                self._fail(cur, item)
            if kind == "end":
                t.data, t.origins = ({}, {}, {}), []
                continue
            t.data, t.origins, _ = self._unpack(item)
        for t in [t for t in self._pool if t.left() == 0]:
            self._pool.remove(t)
            self._done.append(t.group)

    def _held(self):
        return sum(t.left() for t in self._pool)

    def _from_pool(self, n):
        """A batch of the next n rows held back, in the order held."""
        datas, origins = [], []
        while n:
            t = self._pool[0]
            k = min(n, t.left())
            whole = t.out == 0 and k == len(t.origins)
            datas.append(t.data if whole else _rows(t.data, np.arange(t.out, t.out + k)))
            origins.extend(t.origins[t.out:t.out + k])
            t.out += k
            n -= k
            if t.left() == 0:
                self._pool.pop(0)
                self._done.append(t.group)
        fields, offsets, lengths = _concat(datas)
        self._stats["merged"] += 1
        return self._deliver(RayBatch(fields, offsets, lengths, origins, self._pass, self._delivered,
                                      None, None))

    def _deliver(self, b):
        self._delivered += 1
        if self._first is None:
            self._first = b
        self._count(b)
        return b

    def _equal_target(self):
        if self._c["equalize"] is None:
            return None
        if self._restored_target is not None:
            self._target, self._restored_target = self._restored_target, None
        if self._target is None:
            self._target = self._targets()[0]
        return self._target

    def _targets(self, next_pass=False):
        """(this rank's batches, every rank's batches) of the pass in
        progress (or the next one), equalize applied to the first: from the
        plan's record shares, less what was read before a resume under
        another world size."""
        if next_pass:
            per_rank = self._plan_for(self._pass + 1, self.world_size).rank_records
        elif self._elastic_start is not None:
            plan, el = self._plan, self._elastic_start
            left = list(plan.group_records)
            for g in el["done"]:
                left[int(g)] = 0
            for g, n in el["delivered"]:
                left[int(g)] -= int(n)
            per_rank = [sum(left[g] for g in _rank_groups(self._c["groups"], r, self.world_size))
                        for r in range(self.world_size)]
        else:
            per_rank = self._plan.rank_records
        b = self._c["batch_size"]
        batches = [n // b if self._c["drop_last"] else -(-n // b) for n in per_rank]
        eq = self._c["equalize"]
        if eq == "drop":
            t = min(batches)
        elif eq == "pad":
            t = max(batches)
        else:
            t = batches[self.rank]
        return t, batches

    def _step(self):
        """The next batch of the pass in progress, or None at its end."""
        if self._finished:
            return None
        target = self._equal_target()
        if target is not None and self._delivered >= target:
            return self._end()
        self._refetch()
        size = self._c["batch_size"]
        while True:
            if self._held() >= size:
                return self._from_pool(size)
            if not self._active:
                break
            self._pos %= len(self._active)
            cur = self._active[self._pos]
            kind, item = self._get(cur)
            if kind == "error":
                self._fail(cur, item)
            if kind == "batch" and len(item[3]) < size:
                if not item[7]:
                    self.close()
                    raise feedline.FeedlineError(
                        f"group {cur.group} of pass {self._pass}: its worker gave a batch of {len(item[3])} "
                        f"rows, not batch_size={size}, before its last (batch {cur.taken} of the group)")
                # the group's last batch, short: held back until the rows of
                # other groups' last batches fill a batch with it
                data, origins, _ = self._unpack(item)
                self._pool.append(_Tail(cur.group, cur.taken, cur.state, cur.records, data, origins))
                self._release(cur)
                kind = "ended"
            if kind in ("end", "ended"):
                if kind == "end":
                    self._release(cur, close=False)
                    self._done.append(cur.group)
                del self._active[self._pos]
                if self._next_group < len(self._group_list):
                    self._active.insert(self._pos, self._cursor(self._group_list[self._next_group]))
                    self._next_group += 1
                continue
            cur.pending = cur.worker.take.remote(cur.key)  # the next one is made meanwhile
            data, origins, st = self._unpack(item)
            index = cur.taken
            cur.taken += 1
            cur.state = st
            cur.records += len(origins)
            self._pos += 1
            return self._deliver(RayBatch(data[0], data[1], data[2], origins, self._pass, self._delivered,
                                          cur.group, index))
        # every group ended: the rows held back are the pass's last batch
        if self._pool and not self._c["drop_last"] and (target is None or self._delivered < target):
            return self._from_pool(self._held())
        if target is not None and self._delivered < target:
            if self._first is None:
                raise feedline.FeedlineError(f"rank {self.rank} has no batch to repeat for equalize='pad'")
            f = self._first
            b = RayBatch(f._fields, f._offsets, f._lengths, f.origins, self._pass, self._delivered,
                         f.group, f.index, padded=True)
            self._stats["padded"] += 1
            return self._deliver(b)
        return self._end()

    def _end(self):
        for cur in self._active:
            self._release(cur)
        self._active = []
        self._pool = []
        self._finished = True
        self._report(force=True)
        return None

    def _count(self, b):
        s = self._stats
        s["batches"] += 1
        s["records"] += b.size
        s["bytes"] += sum(v.nbytes for v in b._fields.values() if isinstance(v, np.ndarray))
        self._report()

    def _report(self, force=False):
        now = time.monotonic()
        if force or now - self._last_report > 1.0:
            self._last_report = now
            el = now - self._t0
            s = dict(self._stats, elapsed_s=el, records_per_s=self._stats["records"] / el if el > 0 else 0.0,
                     **{"pass": self._pass})
            self._coord.rank_report.remote(self.rank, s)

    # ---- the Loader API

    def __iter__(self):
        self._check_open()
        if self._finished:
            self._begin(self._pass + 1)
        return self._epoch(self._pass)

    def _epoch(self, p):
        while True:
            if self._closed or self._pass != p:
                return
            b = self._step()
            if b is None:
                return
            yield b

    def __next__(self):
        self._check_open()
        if self._finished:
            self._begin(self._pass + 1)
        b = self._step()
        if b is None:
            raise StopIteration
        return b

    def __len__(self):
        """Batches this rank gets in a whole pass (the pass in progress or next)."""
        self._check_open()
        return self._targets(next_pass=self._finished)[0]

    def load_state_dict(self, state):
        """Go on from `state` (this rank's state_dict(), or every old rank's
        for an elastic resume) as Service(..., resume=state) would; the
        groups open now are closed."""
        self._check_open()
        start = _check_resume(state, self._c)
        if start["mode"] == "same" and self.rank not in start["states"]:
            raise ValueError(f"load_state_dict: no state of rank {self.rank} among ranks "
                             f"{sorted(start['states'])}")
        for cur in self._active:
            self._release(cur)
        if start["mode"] == "same":
            self._restore(start["states"][self.rank])
        else:
            self._begin_elastic(start)

    def set_epoch(self, epoch):
        """The next loop runs pass `epoch` from its start, as a fresh loader's
        pass `epoch` (as DistributedSampler.set_epoch); free when it is the
        pass the next loop runs anyway; a pass in progress is given up."""
        self._check_open()
        epoch = _check_int("epoch", epoch, 0)
        upcoming = self._pass + 1 if self._finished else self._pass
        fresh = not self._finished and self._delivered == 0 and not self._done and not self._pool and \
            all(c.taken == 0 for c in self._active) and self._elastic_start is None
        if epoch == upcoming and (self._finished or fresh):
            return
        for cur in self._active:
            self._release(cur)
        self._begin(epoch)

    def state_dict(self):
        """The position after the batches taken: a picklable, JSON-serialisable
        dict: per open group, the number of batches taken and its state
        after the last (its feedline Loader's state and the rows it has
        handed out since); per group whose last batch is held back in part,
        its state before that batch and the rows handed out of it."""
        self._check_open()
        return {
            "format": STATE_FORMAT,
            "settings": _fingerprint(self._c),
            "interleave": self._c["interleave"],
            "rank": self.rank,
            "world_size": self.world_size,
            "pass": self._pass,
            "plan_world": self._plan.world,
            "group_list": list(self._group_list),
            "next_group": self._next_group,
            "active": [[c.group, c.taken, c.state, c.records] for c in self._active],
            "pool": [[t.group, t.taken, t.resume_state(self._ids), t.records + t.out] for t in self._pool],
            "pending": [[g, taken, st, n] for g, (taken, st, n) in self._elastic.items()],
            "elastic": self._elastic_start,
            "pos": self._pos,
            "done": list(self._done),
            "delivered": self._delivered,
            "target": self._target,
            "finished": self._finished,
        }

    def stats(self):
        el = time.monotonic() - self._t0
        return dict(self._stats, elapsed_s=el, records_per_s=self._stats["records"] / el if el > 0 else 0.0)

    def _check_open(self):
        if self._closed:
            raise feedline.FeedlineError("this loader is closed")

    @property
    def closed(self):
        return self._closed

    def close(self):
        if not self._closed:
            for cur in self._active:
                try:
                    self._release(cur)
                except Exception:  # noqa: BLE001 - Ray may be gone at exit
                    pass
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass



# ------------------------------------------------------------------ Ray Data source


# Blocks of at most this many bytes by default: measured on workload C
# (python/examples/bench_ray_data.py), 38 MB blocks (64 rows) took 12.2
# CPU-s in the read tasks where 77 MB took 13.0-13.7 and 134 MB (Ray
# Data's own 128 MiB target) 15.8-19.8: large blocks churn the object
# store. 55-row blocks (32 MiB) cost the consumer 3.5-3.9 CPU-s, 64-row
# ones 2.2, for batches of 64: a batch across blocks is a copy.
_BLOCK_BYTES = 64 << 20


def _block_rows(probe, target_bytes, most=1024):
    """Rows per block: the largest power of two (at most `most`) whose rows
    fit `target_bytes` by the first row's size (its numpy fields), at least
    1 (`most` when the first file has no row)."""
    try:
        row = next(iter(probe))
    except StopIteration:
        return most
    row_bytes = sum(v.nbytes for v in row.values() if isinstance(v, np.ndarray))
    if row_bytes <= 0:
        return most
    fit = min(most, int(target_bytes // row_bytes))
    return 1 << (fit.bit_length() - 1) if fit >= 1 else 1


def _ragged_column(rows):
    """A ragged numeric field's rows (numpy arrays, one per record, of the
    field's dtype and of shapes that differ) as a column of Ray's
    variable-shaped tensor extension type: ray.data gives each row back as
    its numpy array (dtype and shape kept), in iter_rows, take and
    iter_batches (an object array of them). Always this type, even where a
    block's rows happen to have one shape, so that every block of the field
    is of one type."""
    from ray.data.extensions import ArrowVariableShapedTensorArray
    return ArrowVariableShapedTensorArray.from_numpy(list(rows))


def _bytes_lists_column(rows):
    """A bytes field of more than one value per record (a list of bytes per
    record) as an Arrow list<binary> column: each row comes back as a list
    of bytes."""
    import pyarrow as pa
    return pa.array([list(r) for r in rows], type=pa.list_(pa.binary()))


def _block(accessor, cols, arrow_cols, names):
    """A Ray Data block (a pyarrow Table) of the numpy columns `cols`
    (Ray's own conversion: tensor columns for arrays of more than one
    dimension) and the Arrow arrays `arrow_cols`, its columns in the order
    `names`."""
    import pyarrow as pa
    if not arrow_cols:
        return accessor.batch_to_block(cols)
    if not cols:
        return pa.Table.from_arrays([arrow_cols[n] for n in names], names=names)
    table = accessor.batch_to_block(cols)
    for name, arr in arrow_cols.items():
        table = table.append_column(name, arr)
    return table.select(names)


def read(files, schema=None, transform=None, *, rows_per_block=None, files_per_task=1,
         provenance=False, threads=1, columns=None, ship_pixels=False, **loader_options):
    """A ray.data.Dataset of the records of `files`, read (and transformed) by
    feedline's readers in Ray Data's read tasks: one task per
    `files_per_task` files, each a feedline.Loader over them in file order
    (no shuffle, deterministic), its rows put into blocks of at most
    `rows_per_block` rows (default: the largest power of two of rows, at
    most 1,024, that fits 64 MiB by the size of the first row; Ray Data
    cuts blocks larger than its target_max_block_size itself; a batch size
    that divides it, or that it divides, is cut from blocks with less
    copying). provenance=True adds the columns "_file" and
    "_record". columns: the fields to keep (default all; a WebDataset's
    "__key__" is bytes, which iter_torch_batches cannot convert).
    ship_pixels=True (for a transform that ends in output steps: to-f32,
    normalize, chw): the read tasks run its pixel steps, the Dataset holds
    uint8 [H, W, 3] images (a quarter of float32's bytes), and the consumer
    runs the output steps with
    ds.iter_torch_batches(collate_fn=feedline.ray.output_steps(transform,
    fields)): the same tensors, to the bit. A ragged numeric field is a
    column of Ray's variable-shaped tensor type (each row a numpy array of
    its own shape); a bytes field of more than one value per row, a list of
    bytes per row."""
    ray = _ray()
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    files = _expand(files)
    if rows_per_block is not None:
        rows_per_block = _check_int("rows_per_block", rows_per_block, 1)
    files_per_task = _check_int("files_per_task", files_per_task, 1)
    threads = _check_int("threads", threads, 1)
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns) or not columns:
            raise ValueError(f"columns must be a non-empty list of field names, not {columns!r}")
        columns = list(columns)
    if transform is not None and not isinstance(transform, str):
        raise ValueError(f"transform must be a spec string such as 'imagenet-eval', not {transform!r}")
    if not isinstance(ship_pixels, bool):
        raise ValueError(f"ship_pixels must be True or False, not {ship_pixels!r}")
    bad = sorted(set(loader_options) & _RESERVED)
    if bad:
        raise ValueError(f"{bad[0]!r} is set by read() itself")
    opts = dict(loader_options)
    if schema is not None:
        opts["schema"] = schema
    if ship_pixels:
        pixel_steps = _native._pixel_steps(transform) if transform is not None else None
        if pixel_steps is None:
            raise ValueError(f"ship_pixels=True needs a transform that ends in output steps (to-f32, "
                             f"normalize, chw), not transform={transform!r}")
        opts.update(transform=pixel_steps, workers=threads)
    elif transform is not None:
        opts.update(transform=transform, workers=threads)
    # A bad setting fails here, not in a read task.
    with feedline.Loader(files[:1], batch_size=1, shuffle=0, passes=1, rank=0, world_size=1,
                         deterministic=True, **opts) as probe:
        if rows_per_block is None:
            rows_per_block = _block_rows(probe, _BLOCK_BYTES)
    chunks = [files[i:i + files_per_task] for i in range(0, len(files), files_per_task)]

    def make(chunk):
        def read_fn():
            from ray.data.block import BlockAccessor
            with feedline.Loader(chunk, batch_size=rows_per_block, shuffle=0, passes=1, readers=1,
                                 rank=0, world_size=1, deterministic=True, **opts) as l:
                for b in l:
                    if columns is not None:
                        missing = [c for c in columns if c not in b]
                        if missing:
                            raise ValueError(f"feedline.ray.read: columns {missing} are not fields of "
                                             f"{chunk[0]!r} (its fields: {sorted(b)})")
                    cols, arrow_cols = {}, {}
                    names = list(b if columns is None else columns)
                    for name in names:
                        v = b[name]
                        if b.offsets(name) is not None or b.lengths(name) is not None:
                            if isinstance(v, np.ndarray):
                                arrow_cols[name] = _ragged_column(b.instance_values(name))
                            else:
                                arrow_cols[name] = _bytes_lists_column(v)
                        elif isinstance(v, np.ndarray):
                            # no copy: the block views the batch's buffer until Ray
                            # serialises it into the object store (its one copy)
                            cols[name] = np.asarray(v)
                        elif all(isinstance(x, bytes) for x in v):
                            cols[name] = np.array(v, dtype=object)
                        else:
                            arrow_cols[name] = _bytes_lists_column(v)
                    if provenance:
                        o = b.origins
                        cols["_file"] = np.array([f for f, _ in o], dtype=object)
                        cols["_record"] = np.array([r for _, r in o], dtype=np.int64)
                        names += ["_file", "_record"]
                    yield _block(BlockAccessor, cols, arrow_cols, names)
        return read_fn

    class _Source(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, **kw):
            tasks = []
            for chunk in chunks:
                meta = BlockMetadata(num_rows=None, size_bytes=None, input_files=list(chunk),
                                     exec_stats=None)
                try:
                    tasks.append(ReadTask(make(chunk), meta, per_task_row_limit=per_task_row_limit))
                except TypeError:
                    tasks.append(ReadTask(make(chunk), meta))
            return tasks

        def get_name(self):
            return "feedline"

    del probe
    return ray.data.read_datasource(_Source(), override_num_blocks=len(chunks))


def output_steps(transform, fields):
    """A collate_fn for ds.iter_torch_batches(collate_fn=...) over a Dataset
    that read(..., transform=transform, ship_pixels=True) made: runs the
    transform's output steps (to-f32, normalize, chw; in Rust, the GIL
    released) on `fields` (uint8 [n, H, W, 3] pixels) and makes every
    field a torch tensor (Ray then pins and moves them as it does its own).
    The tensors are those of read(..., transform=transform), to the bit."""
    from ray.data.collate_fn import NumpyBatchCollateFn

    if not isinstance(transform, str) or _native._pixel_steps(transform) is None:
        raise ValueError(f"output_steps needs a transform spec that ends in output steps (to-f32, "
                         f"normalize, chw), not {transform!r}")
    if isinstance(fields, str) or not fields or not all(isinstance(f, str) for f in fields):
        raise ValueError(f"fields must be a non-empty list of field names, not {fields!r}")
    names = list(fields)

    class OutputSteps(NumpyBatchCollateFn):
        def __call__(self, batch):
            import torch
            missing = [f for f in names if f not in batch]
            if missing:
                raise ValueError(f"output_steps: fields {missing} are not in the batch "
                                 f"(its fields: {sorted(batch)})")
            out = {}
            for name, v in batch.items():
                if name in names:
                    v = _native._expand_pixels(np.ascontiguousarray(v), transform)
                out[name] = torch.as_tensor(np.asarray(v))
            return out

        def __repr__(self):
            return f"feedline.ray.output_steps({transform!r}, {names!r})"

    return OutputSteps()
