"""feedline.ray on a local 3-node Ray cluster (ray.cluster_utils.Cluster,
one process tree per node, each with its own CPUs and a custom resource):
every record exactly once per pass by (file, record) provenance for 2 and 4
ranks x 1, 2, 3 workers; deterministic batches equal across worker counts;
a worker actor killed with ray.kill mid-pass; a rank restarted from its
state_dict() (also under another world size); a TorchTrainer stopped and
resumed from its ray.train.Checkpoint; equalize; placement by custom
resources; ranks as Ray tasks; every rank an equal share of the records
in whole batches but its last (2,400 and 2,403 records, batch 50), and a
resume amid the rows held back for that; every bad setting a ValueError; pixels
shipped (the rank running the transform's output steps) against float32
shipped, to the bit; and feedline.ray.read's rows against
feedline.Loader's, its columns= and its rows per block; a Hugging Face
save_to_disk directory and MDS directories (the repository's fixtures)
through read() (ragged fields as Ray's variable-shaped tensors) and the
Service: every record once with the writer's values."""

import json
import os
import pickle
import tempfile
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import feedline  # noqa: E402
import feedline.ray as fray  # noqa: E402
from helpers import write_tar, write_tfrecord  # noqa: E402

MB = 1024 * 1024
FILES = 12


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head": 1}, "object_store_memory": 120 * MB,
        "include_dashboard": False})
    for i in range(2):
        c.add_node(num_cpus=2, resources={"prep": 1, f"prep{i}": 1}, object_store_memory=120 * MB)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """FILES .npz files of 20 + 3f rows each; y = a global id, x = [id, f, record]."""
    d = tmp_path_factory.mktemp("raydata")
    paths, want = [], {}
    nxt = 0
    for f in range(FILES):
        n = 20 + 3 * f
        ids = np.arange(nxt, nxt + n, dtype=np.int64)
        nxt += n
        x = np.stack([ids, np.full(n, f), np.arange(n)], axis=1).astype(np.float32)
        p = str(d / f"part{f:02d}.npz")
        np.savez(p, x=x, y=ids)
        paths.append(p)
        for r in range(n):
            want[(p, r)] = int(ids[r])
    return paths, want


def service(data, **kw):
    paths, _ = data
    s = dict(files=paths, batch_size=8, shuffle=16, seed=5, resources_per_worker={"CPU": 0.25},
             readers=1)
    s.update(kw)
    return fray.Service(**s)


def check_batch(b, want):
    """The batch's rows are the records its provenance names."""
    assert b.size == len(b["y"]) == len(b.origins)
    for (f, r), y, x in zip(b.origins, b["y"].tolist(), b["x"].tolist()):
        assert want[(f, r)] == y, (f, r)
        assert x[0] == y and x[2] == r


def run_ranks(svc, world, want, passes=1, threads=True):
    """Every rank's batches of `passes` passes, ranks side by side in threads."""
    out = {}

    def one(rank):
        loader = svc.loader(rank)
        out[rank] = [list(loader) for _ in range(passes)]
        loader.close()

    if threads:
        ts = [threading.Thread(target=one, args=(r,)) for r in range(world)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    else:
        for r in range(world):
            one(r)
    assert sorted(out) == list(range(world))
    for r in out:
        for p in out[r]:
            for b in p:
                check_batch(b, want)
    return out


def origins_of(batches):
    return [o for b in batches if not b.padded for o in b.origins]


def assert_exactly_once(per_rank_batches, want):
    got = [o for bs in per_rank_batches for o in origins_of(bs)]
    assert len(got) == len(set(got)), "a record came twice"
    assert set(got) == set(want), f"missing {len(set(want) - set(got))}, extra {len(set(got) - set(want))}"


# ------------------------------------------------------------------ exactly once


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_record_exactly_once_per_pass(cluster, data, world, workers):
    _, want = data
    svc = service(data, workers=workers, world_size=world, deterministic=False)
    try:
        out = run_ranks(svc, world, want, passes=2)
        for p in range(2):
            assert_exactly_once([out[r][p] for r in range(world)], want)
            for r in range(world):
                assert all(b.pass_ == p for b in out[r][p])
                assert [b.seq for b in out[r][p]] == list(range(len(out[r][p])))
        # the two passes are in different orders
        assert origins_of(out[0][0]) != origins_of(out[0][1])
    finally:
        svc.shutdown()


@pytest.mark.parametrize("nfiles, world, groups", [(3, 4, None), (12, 2, 16)])
def test_more_groups_than_files_share_files_by_record(cluster, data, nfiles, world, groups):
    """Fewer files than groups (by default: fewer than ranks): every group
    reads every file and keeps its share of the records."""
    paths, want = data
    want = {k: v for k, v in want.items() if k[0] in paths[:nfiles]}
    svc = service(data, files=paths[:nfiles], workers=2, world_size=world, groups=groups,
                  deterministic=True)
    try:
        assert svc.groups == (groups or world)
        out = run_ranks(svc, world, want, passes=2)
        for p in range(2):
            assert_exactly_once([out[r][p] for r in range(world)], want)
        for r in range(world):
            with svc.loader(r) as l:
                assert len(l) == len(out[r][0])
    finally:
        svc.shutdown()


def test_deterministic_batches_equal_across_worker_counts(cluster, data):
    _, want = data
    runs = []
    for workers in (1, 2, 3):
        svc = service(data, workers=workers, world_size=2, deterministic=True)
        try:
            out = run_ranks(svc, 2, want, passes=2)
        finally:
            svc.shutdown()
        runs.append({r: [[b.origins for b in p] for p in out[r]] for r in out})
        for p in range(2):
            assert_exactly_once([out[r][p] for r in range(2)], want)
    assert runs[0] == runs[1] == runs[2]


def test_workers_run_each_rank_side_by_side(cluster, data):
    """With interleave=4 a rank's batches come from 4 groups in turn, the
    groups spread over the workers (least loaded first)."""
    svc = service(data, workers=3, world_size=1, interleave=4, deterministic=True, groups=12)
    try:
        loader = svc.loader(0)
        first = [next(loader).group for _ in range(8)]
        assert first == [0, 1, 2, 3] * 2
        st = svc.stats()
        busy = [w for w in st["workers"] if w["batches"] > 0]
        assert len(busy) == 3, st["workers"]
        loader.close()
    finally:
        svc.shutdown()


def test_backpressure_bounds_the_batches_made_ahead(cluster, data):
    """Per open group a worker makes at most prefetch batches ahead of the
    rank's pending take, plus the one waiting for room: a rank that stops
    taking stops the workers."""
    svc = service(data, workers=1, world_size=1, batch_size=2, interleave=2, prefetch=1,
                  deterministic=True)
    try:
        loader = svc.loader(0)
        got = [next(loader) for _ in range(3)]
        time.sleep(2.0)
        made = sum(w["batches"] for w in svc.stats()["workers"])
        assert len(got) < made <= len(got) + 2 * (1 + 1 + 1), made
        time.sleep(1.0)
        assert sum(w["batches"] for w in svc.stats()["workers"]) == made
        loader.close()
    finally:
        svc.shutdown()


# ------------------------------------------------------------------ faults


def _kill_mid_pass(data, want, deterministic, which):
    svc = service(data, workers=2, world_size=2, deterministic=deterministic, prefetch=1)
    try:
        loaders = [svc.loader(r) for r in range(2)]
        got = [[], []]
        for _ in range(6):
            for r in range(2):
                got[r].append(next(loaders[r]))
        victim = svc.worker_actors()[which]
        ray.kill(victim, no_restart=True)
        for r in range(2):
            got[r].extend(list(loaders[r]))
        st = svc.stats()
        assert st["workers_replaced"] == 1
        assert sum(l.stats()["worker_failures"] for l in loaders) >= 1
        for bs in got:
            for b in bs:
                check_batch(b, want)
        assert_exactly_once(got, want)
        # the next pass runs as usual on the replacement
        nxt = [list(l) for l in loaders]
        assert_exactly_once(nxt, want)
        return [[b.origins for b in bs] for bs in got]
    finally:
        svc.shutdown()


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_killed_worker_actor_loses_nothing_and_repeats_nothing(cluster, data, deterministic):
    _, want = data
    got = _kill_mid_pass(data, want, deterministic, which=0)
    if deterministic:
        svc = service(data, workers=2, world_size=2, deterministic=True, prefetch=1)
        try:
            ref = run_ranks(svc, 2, want)
        finally:
            svc.shutdown()
        assert got == [[b.origins for b in ref[r][0]] for r in range(2)]


def test_a_lost_node_loses_nothing(cluster, data):
    """A node that dies with its worker actor and the batches in its object
    store: the groups go on on the other node's worker (the replacement asks
    for a resource no node has left: it is not waited for)."""
    _, want = data
    doomed = cluster.add_node(num_cpus=1, resources={"spot": 1}, object_store_memory=80 * MB)
    spare = cluster.add_node(num_cpus=1, resources={"spot": 1}, object_store_memory=80 * MB)
    cluster.wait_for_nodes()
    svc = service(data, workers=2, world_size=1, resources_per_worker={"CPU": 0.25, "spot": 1},
                  deterministic=True)
    try:
        placed = {w["node_id"]: w["index"] for w in svc.stats()["workers"]}
        assert set(placed) == {doomed.node_id, spare.node_id}
        victim = svc.worker_actors()[placed[doomed.node_id]]
        loader = svc.loader(0)
        got = [next(loader) for _ in range(6)]
        cluster.remove_node(doomed, allow_graceful=False)
        # the node's processes go when they see their raylet gone: wait for it
        end = time.monotonic() + 60
        with pytest.raises(ray.exceptions.RayActorError):
            while time.monotonic() < end:
                ray.get(victim.ready.remote(), timeout=10)
                time.sleep(0.2)
        got += list(loader)
        for b in got:
            check_batch(b, want)
        assert_exactly_once([got], want)
        st = svc.stats()
        assert st["workers_replaced"] == 1 and loader.stats()["worker_failures"] >= 1
        assert sum(1 for w in st["workers"] if "error" in w) == 1
    finally:
        svc.shutdown()
        cluster.remove_node(spare)
        end = time.monotonic() + 60
        while any(n["Alive"] and n["NodeID"] in (doomed.node_id, spare.node_id) for n in ray.nodes()):
            assert time.monotonic() < end
            time.sleep(0.2)
    ref_svc = service(data, workers=1, world_size=1, deterministic=True)
    try:
        ref = run_ranks(ref_svc, 1, want)[0][0]
    finally:
        ref_svc.shutdown()
    assert [b.origins for b in got] == [b.origins for b in ref]


# ------------------------------------------------------------------ rank restart


@pytest.mark.parametrize("stop_after", [1, 7, 40])
def test_a_restarted_rank_goes_on_from_its_state_dict(cluster, data, stop_after):
    _, want = data
    svc = service(data, workers=2, world_size=2, deterministic=True)
    try:
        ref = run_ranks(svc, 2, want, passes=2)
    finally:
        svc.shutdown()
    n0 = len(ref[0][0])
    svc = service(data, workers=2, world_size=2, deterministic=True)
    try:
        loader = svc.loader(0)
        first = [next(loader) for _ in range(min(stop_after, n0))]
        state = loader.state_dict()
        loader.close()
    finally:
        svc.shutdown()
    state = json.loads(json.dumps(state))  # JSON (as in a ray.train.Checkpoint)
    state = pickle.loads(pickle.dumps(state))
    svc = service(data, workers=3, world_size=2, deterministic=True, resume=[state])
    try:
        loader = svc.loader(0)
        rest = list(loader)
        nxt = list(loader)
        loader.close()
    finally:
        svc.shutdown()
    whole = first + rest
    # exactly once with rank 1's uninterrupted batches, and the same batches as the uninterrupted run
    assert_exactly_once([whole, ref[1][0]], want)
    assert [b.origins for b in whole] == [b.origins for b in ref[0][0]]
    assert [b.origins for b in nxt] == [b.origins for b in ref[0][1]]


# ------------------------------------------------------------------ Ray Train


@pytest.mark.parametrize("deterministic", [True, False])
def test_torch_trainer_resumes_from_a_ray_train_checkpoint_exactly_once(cluster, data, tmp_path, deterministic):
    """docs/ray.md's TorchTrainer loop, on CPU: two ranks stop after 3
    batches and report each loader's state_dict() in a ray.train.Checkpoint;
    a second TorchTrainer run goes on from that checkpoint: every record
    exactly once across both runs and both ranks."""
    pytest.importorskip("torch")
    import ray.train
    from ray.train.torch import TorchTrainer
    paths, want = data

    # Nested: Ray pickles it by value (the test module is not importable on workers).
    def _train_loop(config):
        import ray.train
        ctx = ray.train.get_context()
        rank = ctx.get_world_rank()
        service = config["service"]
        state = None
        # Ray Train restores the run's latest checkpoint itself after a failure;
        # a new run goes on from the one it is given.
        ckpt = ray.train.get_checkpoint() or config.get("resume")
        if ckpt:
            with ckpt.as_directory() as d:
                with open(os.path.join(d, f"loader-{rank}.json")) as f:
                    state = json.load(f)
        loader = service.loader(rank, state=state)
        seen = []
        stop = config["stop"]
        for i, batch in enumerate(loader):
            seen.extend((o[0], int(o[1])) for o in batch.origins)
            if stop is not None and i + 1 == stop:
                break
        with open(os.path.join(config["out"], f"{config['run']}-rank{rank}.json"), "w") as f:
            json.dump(seen, f)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"loader-{rank}.json"), "w") as f:
                json.dump(loader.state_dict(), f)
            ray.train.report({"batches": len(seen)}, checkpoint=ray.train.Checkpoint.from_directory(d))
        loader.close()

    svc = service(data, workers=2, world_size=2, deterministic=deterministic)
    try:
        def fit(run, stop, resume=None):
            cfg = {"service": svc, "stop": stop, "out": str(tmp_path), "run": run, "resume": resume}
            trainer = TorchTrainer(
                _train_loop, train_loop_config=cfg,
                scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False,
                                                       resources_per_worker={"CPU": 0.25}),
                run_config=ray.train.RunConfig(storage_path=str(tmp_path / "runs"), name=f"feedline-{run}"))
            return trainer.fit()
        first = fit("first", 3)
        assert first.checkpoint is not None
        fit("second", None, resume=first.checkpoint)
    finally:
        svc.shutdown()
    got = []
    for run in ("first", "second"):
        for rank in range(2):
            with open(tmp_path / f"{run}-rank{rank}.json") as f:
                got.extend(tuple(o) for o in json.load(f))
    assert len(got) == len(set(got)), "a record came twice"
    assert set(got) == set(want)


@pytest.mark.parametrize("deterministic", [False, True])
def test_load_state_through_loader_keyword_and_non_deterministic(cluster, data, deterministic):
    _, want = data
    svc = service(data, workers=2, world_size=2, deterministic=deterministic)
    try:
        l0 = svc.loader(0)
        first = [next(l0) for _ in range(5)]
        st = l0.state_dict()
        l0.close()
        rest = list(svc.loader(0, state=st))
        other = list(svc.loader(1))
        assert_exactly_once([first + rest, other], want)
    finally:
        svc.shutdown()


def test_load_state_dict_and_set_epoch(cluster, data):
    _, want = data
    svc = service(data, workers=2, world_size=2, deterministic=True)
    try:
        ref = run_ranks(svc, 2, want, passes=3)
        l0 = svc.loader(0)
        head = [next(l0) for _ in range(5)]
        st = l0.state_dict()
        l1 = svc.loader(0)
        l1.set_epoch(0)  # the pass it runs anyway: nothing changes
        assert next(l1).origins == ref[0][0][0].origins
        l1.load_state_dict(st)  # from batch 5 of pass 0 on
        assert [b.origins for b in head + list(l1)] == [b.origins for b in ref[0][0]]
        l1.set_epoch(2)  # skips pass 1: a fresh loader's pass 2
        assert [b.origins for b in l1] == [b.origins for b in ref[0][2]]
        l0.set_epoch(1)  # gives up the rest of pass 0
        assert [b.origins for b in l0] == [b.origins for b in ref[0][1]]
        with pytest.raises(ValueError, match="no state of rank 1"):
            svc.loader(1).load_state_dict(st)
        with pytest.raises(ValueError, match="epoch must be >= 0"):
            l0.set_epoch(-1)
        l0.close()
        l1.close()
    finally:
        svc.shutdown()


def test_elastic_resume_under_another_world_size(cluster, data):
    _, want = data
    svc = service(data, workers=2, world_size=2, deterministic=True)
    try:
        ls = [svc.loader(r) for r in range(2)]
        first = [[next(ls[r]) for _ in range(20 - 8 * r)] for r in range(2)]
        states = [l.state_dict() for l in ls]
        # some groups done, some partly read, some not begun: each kind is dealt anew
        assert any(s["done"] for s in states) and all(s["active"] for s in states)
        assert any(s["next_group"] < len(s["group_list"]) for s in states)
        for l in ls:
            l.close()
    finally:
        svc.shutdown()
    svc = service(data, workers=1, world_size=3, deterministic=True, resume=states)
    try:
        rest = run_ranks(svc, 3, want, passes=2)
    finally:
        svc.shutdown()
    assert_exactly_once(first + [rest[r][0] for r in range(3)], want)
    assert_exactly_once([rest[r][1] for r in range(3)], want)


# ------------------------------------------------------------------ whole batches, equal shares

WHOLE_SIZES = [113, 187, 96, 204, 151, 149, 77, 223, 160, 140, 131, 169, 58, 242, 150, 150]  # 2,400


@pytest.fixture(scope="module")
def whole_data(tmp_path_factory):
    """16 .npz files of 2,400 rows in all (sizes no multiple of 50), and a
    17th of 3 rows: y = a global id, x = [id, f, record]."""
    assert sum(WHOLE_SIZES) == 2400
    d = tmp_path_factory.mktemp("raywhole")
    paths, want, nxt = [], {}, 0
    for f, n in enumerate(WHOLE_SIZES + [3]):
        ids = np.arange(nxt, nxt + n, dtype=np.int64)
        nxt += n
        x = np.stack([ids, np.full(n, f), np.arange(n)], axis=1).astype(np.float32)
        p = str(d / f"w{f:02d}.npz")
        np.savez(p, x=x, y=ids)
        paths.append(p)
        for r in range(n):
            want[(p, r)] = int(ids[r])
    return paths, want


def check_whole(out, world, records, size):
    """Every rank's batches: all of `size` rows but its last; its share
    records * r // world .. records * (r+1) // world (give or take the one
    record a share of records % world != 0 adds); the batch counts."""
    shares = sorted(sum(b.size for b in out[r]) for r in range(world))
    assert sum(shares) == records and shares[-1] - shares[0] <= 1, shares
    assert shares == sorted(records * (r + 1) // world - records * r // world for r in range(world))
    for r in range(world):
        bs = out[r]
        assert all(b.size == size for b in bs[:-1]), (r, [b.size for b in bs])
        assert 0 < bs[-1].size <= size
        assert len(bs) == -(-sum(b.size for b in bs) // size)
    return [len(out[r]) for r in range(world)]


@pytest.mark.parametrize("case, world, counts", [
    ("even", 2, [24, 24]), ("even", 4, [12, 12, 12, 12]),
    ("uneven", 2, [25, 25]),            # 2,403 records: 1,201 + 1,202
    ("uneven", 4, [12, 13, 13, 13]),    # 600 + 601 x 3: equalize=None leaves them so
    ("few_files", 4, [2, 2, 2, 2]),     # 3 files (more groups than files): 396 = 4 x 99
])
def test_every_rank_gets_whole_batches_and_an_equal_share(cluster, whole_data, case, world, counts):
    """2,400 records in 16 files of uneven sizes, batch 50: every rank gets
    1,200 (600) records in 24 (12) whole batches; with 3 records more every
    batch is whole but each rank's last; every record once by identity,
    len() what a rank delivers."""
    paths, want = whole_data
    files = {"even": paths[:16], "uneven": paths, "few_files": paths[:3]}[case]
    want = {k: v for k, v in want.items() if k[0] in files}
    svc = service(whole_data, files=files, batch_size=50, workers=2, world_size=world, deterministic=False)
    try:
        out = run_ranks(svc, world, want)
        out = {r: out[r][0] for r in out}
        assert check_whole(out, world, len(want), 50) == counts
        assert_exactly_once([out[r] for r in range(world)], want)
        for r in range(world):
            with svc.loader(r) as l:
                assert len(l) == counts[r]
        if case != "few_files":
            # rows of several groups' last batches were put together
            assert any(b.group is None for r in range(world) for b in out[r])
    finally:
        svc.shutdown()


def _states_at_every_batch(loader):
    """Every batch of a pass, the state after each, the rows the loader
    holds back then and the batches taken from each open group."""
    batches, states, held, taken = [], [], [], []
    for b in loader:
        batches.append(b)
        states.append(json.loads(json.dumps(loader.state_dict())))
        held.append(sum(t.left() for t in loader._pool))
        taken.append({c.group: c.taken for c in loader._active})
    return batches, states, held, taken


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_resume_amid_rows_held_back_is_exact(cluster, whole_data, deterministic):
    """States taken where rows are held back -- a group's last batch in the
    rank's pool (part of it handed out, right after a batch put together
    from several groups' rows), and rows a worker carries from one Loader
    batch into the next (a file cut between two ranks) -- resume to the
    same batches (deterministic) or the same records (not): every record of
    the rank's share once, every batch whole but the last."""
    paths, want = whole_data
    svc = service(whole_data, batch_size=50, workers=2, world_size=2, deterministic=deterministic)
    try:
        refs = [_states_at_every_batch(svc.loader(r)) for r in range(2)]
        assert_exactly_once([refs[0][0], refs[1][0]], want)
        # the groups with a file cut between the ranks (its rows carried in the worker)
        plan = fray.pass_plan(paths, 5, 0, svc.groups, counts=WHOLE_SIZES + [3], world_size=2)
        cut = {g for g, parts in enumerate(plan) for _, _, _, ranges in parts
               if any(rg is not None for rg in ranges)}
        assert cut

        def first(pred):
            return next((r, i) for r in range(2) for i in range(len(refs[r][0]) - 1) if pred(r, i))

        points = {
            # a group's last batch held back
            "held": first(lambda r, i: refs[r][2][i] > 0),
            # right after a batch of several groups' rows, rows still held
            "after_merged": first(lambda r, i: refs[r][0][i].group is None and refs[r][2][i] > 0),
            # a group with a cut file open, a batch of it taken
            "carried": first(lambda r, i: any(refs[r][3][i].get(g, 0) > 0 for g in cut)),
        }
        for name, (r, i) in points.items():
            ref, states = refs[r][:2]
            rest = list(svc.loader(r, state=states[i]))
            whole = ref[:i + 1] + rest
            got = [o for b in whole for o in b.origins]
            assert len(got) == len(set(got)) and set(got) == {o for b in ref for o in b.origins}, name
            assert all(b.size == 50 for b in whole[:-1]) and len(whole) == len(ref), name
            if deterministic:
                assert [b.origins for b in whole] == [b.origins for b in ref], name
        # the states resumed from held rows back: the pool, and a worker's carry
        r, i = points["after_merged"]
        assert refs[r][1][i]["pool"]
        r, i = points["carried"]
        assert any(a[0] in cut and a[2]["skip"] for a in refs[r][1][i]["active"])
    finally:
        svc.shutdown()


# ------------------------------------------------------------------ equalize, len, placement, tasks


@pytest.mark.parametrize("how", ["drop", "pad"])
def test_equalize_gives_every_rank_the_same_batch_count(cluster, data, how):
    paths, want = data
    # 11 files, 385 records: shares of 96, 96, 96 and 97 records, 12 or 13 batches of 8
    want = {k: v for k, v in want.items() if k[0] in paths[:11]}
    svc = service(data, files=paths[:11], workers=2, world_size=4, equalize=how, deterministic=True)
    try:
        counts = svc.loader(0)._targets()[1]
        assert sorted(counts) == [12, 12, 12, 13]
        assert len(set(counts)) > 1  # the ranks' shares differ: equalize has work to do
        out = run_ranks(svc, 4, want, passes=1)
        target = min(counts) if how == "drop" else max(counts)
        assert {len(out[r][0]) for r in range(4)} == {target}
        for r in range(4):
            with svc.loader(r) as l:
                assert len(l) == target
        got = [o for r in range(4) for o in origins_of(out[r][0])]
        assert len(got) == len(set(got))
        # whole batches but each rank's last (padded ones repeat a whole first batch)
        assert all(b.size == 8 for r in range(4) for b in out[r][0][:-1])
        if how == "pad":
            assert set(got) == set(want)
            pads = [b for r in range(4) for b in out[r][0] if b.padded]
            assert len(pads) == sum(max(counts) - c for c in counts)
        else:
            assert not any(b.padded for r in range(4) for b in out[r][0])
    finally:
        svc.shutdown()


@pytest.mark.parametrize("world, drop_last", [(1, False), (3, False), (2, True)])
def test_len_is_the_batches_a_pass_delivers(cluster, data, world, drop_last):
    _, want = data
    svc = service(data, workers=2, world_size=world, drop_last=drop_last)
    try:
        for r in range(world):
            loader = svc.loader(r)
            n = len(loader)
            got = list(loader)
            assert len(got) == n
            assert len(loader) == len(list(loader))
            if drop_last:
                assert all(b.size == 8 for b in got)
    finally:
        svc.shutdown()


def test_workers_are_placed_by_their_custom_resource(cluster, data):
    _, want = data
    prep_nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("prep")}
    assert len(prep_nodes) == 2
    for res, nodes in (({"CPU": 0.25, "prep": 0.1}, prep_nodes),
                       ({"CPU": 0.25, "prep1": 0.1}, None),
                       ({"CPU": 0.25, "head": 0.1}, None)):
        svc = service(data, workers=3, world_size=2, resources_per_worker=res)
        try:
            run_ranks(svc, 2, want)
            st = svc.stats()
            placed = {w["node_id"] for w in st["workers"]}
            key = next(k for k in res if k != "CPU")
            allowed = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(key)}
            assert placed <= allowed, (res, placed, allowed)
            if nodes is not None:
                assert placed <= nodes
            if key != "prep":
                assert len(placed) == 1
            assert sum(w["records"] for w in st["workers"]) == len(want)
            assert st["bottleneck"] in ("workers", "ranks")
            assert set(st["ranks"]) == {0, 1}
            assert sum(r["records"] for r in st["ranks"].values()) == len(want)
        finally:
            svc.shutdown()


def test_ranks_in_ray_tasks_get_a_pickled_service(cluster, data):
    _, want = data
    svc = service(data, workers=2, world_size=2, deterministic=True)

    @ray.remote(num_cpus=0.1, resources={"prep": 0.01})
    def rank_task(s, rank):
        return [b.origins for b in s.loader(rank)]

    try:
        got = ray.get([rank_task.remote(svc, r) for r in range(2)])
        flat = [o for bs in got for b in bs for o in b]
        assert len(flat) == len(set(flat)) and set(flat) == set(want)
        local = run_ranks(svc, 2, want)
        assert got == [[b.origins for b in local[r][0]] for r in range(2)]
    finally:
        svc.shutdown()


# ------------------------------------------------------------------ bad settings


@pytest.mark.parametrize("kw, msg", [
    (dict(workers=0), "workers must be >= 1"),
    (dict(world_size=0), "world_size must be >= 1"),
    (dict(world_size=3, groups=2), "need at least as many groups, not groups=2"),
    (dict(batch_size=0), "batch_size must be >= 1"),
    (dict(equalize="even"), "equalize must be"),
    (dict(resources_per_worker=4), "resources_per_worker must be a dict"),
    (dict(resources_per_worker={"CPU": -1}), "non-negative number"),
    (dict(groups=0), "groups must be >= 1"),
    (dict(interleave=0), "interleave must be >= 1"),
    (dict(deterministic="yes"), "deterministic must be True or False"),
    (dict(rank=0), "set by the Service itself"),
    (dict(files=[]), "invalid configuration: no input files"),
    (dict(files="/nonexistent/dir/*.npz"), "matches no file"),
    (dict(files=[b"/x.npz"]), "is not a path"),
    (dict(transform=3), "transform must be a spec string"),
    (dict(ship_pixels="yes"), "ship_pixels must be True or False"),
    (dict(transform="decode,no-such"), "unknown step 'no-such'"),
    (dict(pack=16), r"pack=16: .*packed rows .* are not records"),
])
def test_bad_settings_are_value_errors(cluster, data, kw, msg):
    with pytest.raises(ValueError, match=msg):
        service(data, **kw)


def test_workers_that_cannot_be_placed_are_a_value_error(cluster, data):
    with pytest.raises(ValueError, match=r"not all placed within 3 s: .*'nosuch'"):
        service(data, resources_per_worker={"CPU": 0.25, "nosuch": 1}, start_timeout_s=3)


def test_bad_rank_and_bad_resume_are_value_errors(cluster, data, tmp_path):
    paths, _ = data
    svc = service(data, workers=1, world_size=2)
    try:
        with pytest.raises(ValueError, match="rank 2 is out of range"):
            svc.loader(2)
        with pytest.raises(ValueError, match="rank must be >= 0"):
            svc.loader(-1)
        l0 = svc.loader(0)
        next(l0)
        st = l0.state_dict()
        l0.close()
        with pytest.raises(feedline.FeedlineError, match="closed"):
            next(l0)
    finally:
        svc.shutdown()
    with pytest.raises(ValueError, match="file set changed"):
        fray.Service(files=paths[:-1], batch_size=8, shuffle=16, seed=5, world_size=2, resume=[st])
    with pytest.raises(ValueError, match="'seed' changed"):
        service(data, seed=6, world_size=2, resume=[st])
    with pytest.raises(ValueError, match="every old rank's state"):
        service(data, world_size=3, resume=[st])
    with pytest.raises(ValueError, match="not a feedline.ray state_dict"):
        service(data, world_size=2, resume=[{"pass": 0}])
    with pytest.raises(ValueError, match="two states of rank 0"):
        service(data, world_size=2, resume=[st, st])
    with pytest.raises(ValueError, match=r"format 'feedline.ray/1' .* not this version's 'feedline.ray/3'"):
        service(data, world_size=2, resume=[dict(st, format="feedline.ray/1")])
    # a state of the plan from before the extension made it (numpy's file order)
    assert st["format"] == "feedline.ray/3"
    with pytest.raises(ValueError, match=r"format 'feedline.ray/2' .* not this version's 'feedline.ray/3'"):
        service(data, world_size=2, resume=[dict(st, format="feedline.ray/2")])


def test_a_bad_file_is_an_error_at_the_rank(cluster, data, tmp_path):
    paths, _ = data
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file at all")
    svc = fray.Service(files=paths[:3] + [str(bad)], batch_size=8, shuffle=0, workers=1,
                       world_size=1, resources_per_worker={"CPU": 0.25}, groups=4)
    try:
        with pytest.raises((feedline.FeedlineError, ValueError), match="bad.npz"):
            list(svc.loader(0))
    finally:
        svc.shutdown()


# ------------------------------------------------------------------ shipping pixels

PIXEL_SPEC = "decode,random-resized-crop(24x32),flip(0.5),normalize(imagenet),chw"


def pixel_run(tar, ship_pixels, resume=None, stop_after=None):
    """(origins, png bits, cls) of every batch of one rank, the service's
    worker stats and the rank's stats (and its state after `stop_after`)."""
    svc = fray.Service(files=[tar], batch_size=4, shuffle=7, seed=3, transform=PIXEL_SPEC,
                       deterministic=True, workers=2, world_size=1, groups=3,
                       resources_per_worker={"CPU": 0.25}, ship_pixels=ship_pixels, resume=resume)
    try:
        loader = svc.loader(0)
        out, state = [], None
        for b in loader:
            assert b["png"].dtype == np.float32 and b["png"].shape[1:] == (3, 24, 32)
            out.append((b.origins, np.asarray(b["png"]).view(np.uint32).copy(), b["cls"].tolist()))
            if stop_after is not None and len(out) == stop_after:
                state = loader.state_dict()
                break
        rank_stats = loader.stats()
        loader.close()
        return out, svc.stats()["workers"], rank_stats, state
    finally:
        svc.shutdown()


def test_shipped_pixels_give_the_transforms_batches_to_the_bit(cluster, tmp_path):
    """ship_pixels=True (workers ship uint8 pixels, the rank runs normalize
    and chw) and False (workers ship float32) give the same batches, to the
    bit; the workers ship a quarter of the image bytes; a resume goes on."""
    from test_transform import make_png_tar
    n = 30
    tar, _ = make_png_tar(tmp_path, n=n)
    pixels, px_workers, px_rank, _ = pixel_run(tar, True)
    output, out_workers, out_rank, _ = pixel_run(tar, False)
    assert len(pixels) == len(output) == 8  # 30 records: 7 whole batches of 4 and the last of 2
    assert [len(b[0]) for b in pixels] == [4] * 7 + [2]
    for (po, pv, pc), (oo, ov, oc) in zip(pixels, output):
        assert po == oo and pc == oc
        assert np.array_equal(pv, ov)
    assert sorted(r for b in pixels for _, r in b[0]) == list(range(n))
    image = 24 * 32 * 3
    label = 8  # int64 cls
    assert sum(w["bytes"] for w in px_workers) == n * (image + label)
    assert sum(w["bytes"] for w in out_workers) == n * (4 * image + label)
    assert px_rank["output_steps_s"] > 0 and out_rank["output_steps_s"] == 0
    # a resume with pixels shipped goes on to the same batches
    first, _, _, state = pixel_run(tar, True, stop_after=3)
    rest, _, _, _ = pixel_run(tar, True, resume=state)
    assert [b[0] for b in first + rest] == [b[0] for b in pixels]
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(first + rest, pixels))
    # the groups' checkpoints name the transform the workers ran
    with pytest.raises(ValueError, match="taken with ship_pixels=True"):
        pixel_run(tar, False, resume=state)


# ------------------------------------------------------------------ the Ray Data source


def test_read_rows_equal_the_loaders(cluster, data):
    paths, want = data
    ds = fray.read(paths, provenance=True, rows_per_block=10, files_per_task=5)
    rows = ds.take_all()
    with feedline.Loader(paths, batch_size=10, shuffle=0, passes=1, rank=0, world_size=1,
                         deterministic=True) as l:
        ref = {}
        for b in l:
            for o, y, x in zip(b.origins, b["y"].tolist(), b["x"].tolist()):
                ref[tuple(o)] = (y, x)
    got = {}
    for row in rows:
        k = (row["_file"], int(row["_record"]))
        assert k not in got
        got[k] = (int(row["y"]), np.asarray(row["x"]).tolist())
    assert got == ref
    assert len(got) == len(want)
    # in file order within each task, as the loader reads them
    ordered = fray.read(paths[:5], rows_per_block=7, files_per_task=5).take_all()
    with feedline.Loader(paths[:5], batch_size=7, shuffle=0, passes=1, rank=0, world_size=1,
                         deterministic=True) as l:
        assert [int(r["y"]) for r in ordered] == [y for b in l for y in b["y"].tolist()]


def test_read_columns_and_block_rows(cluster, data):
    paths, want = data
    rows = fray.read(paths[:3], columns=["y"], provenance=True).take_all()
    assert {k for r in rows for k in r} == {"y", "_file", "_record"}
    assert {(r["_file"], int(r["_record"])): int(r["y"]) for r in rows} == \
        {k: v for k, v in want.items() if k[0] in paths[:3]}
    with pytest.raises(ValueError, match=r"columns \['z'\] are not fields of .*its fields: \['x', 'y'\]"):
        fray.read(paths[:1], columns=["y", "z"]).take_all()
    # default rows per block: the largest power of two of rows, at most
    # 1,024, that fits the bytes by the first row's (x: 3 float32 + y:
    # int64 = 20 bytes). (Ray Data merges and cuts the blocks a read task
    # yields by its own targets, so the rule is checked here, on its own.)
    def rows(target):
        with feedline.Loader(paths[:1], batch_size=1, shuffle=0, passes=1, rank=0, world_size=1,
                             deterministic=True) as probe:
            return fray._block_rows(probe, target)
    assert [rows(t) for t in (0, 19, 20, 39, 40, 200, 320, 10**9)] == [1, 1, 1, 1, 2, 8, 16, 1024]



def test_read_shipping_pixels_gives_the_transforms_tensors_to_the_bit(cluster, tmp_path):
    """read(ship_pixels=True) + iter_torch_batches(collate_fn=output_steps)
    gives read()'s tensors of the whole transform, to the bit, in order."""
    torch = pytest.importorskip("torch")
    from test_transform import make_png_tar
    tar, _ = make_png_tar(tmp_path, n=21)
    whole = list(fray.read([tar], transform=PIXEL_SPEC, columns=["png", "cls"], rows_per_block=8)
                 .iter_torch_batches(batch_size=4))
    ds = fray.read([tar], transform=PIXEL_SPEC, columns=["png", "cls"], rows_per_block=8, ship_pixels=True)
    steps = fray.output_steps(PIXEL_SPEC, ["png"])
    assert "output_steps" in repr(steps)
    split = list(ds.iter_torch_batches(batch_size=4, collate_fn=steps))
    assert len(whole) == len(split) == 6
    for w, p in zip(whole, split):
        assert p["png"].dtype == torch.float32 and tuple(p["png"].shape[1:]) == (3, 24, 32)
        assert torch.equal(w["cls"], p["cls"])
        assert torch.equal(w["png"].view(torch.int32), p["png"].view(torch.int32))
    # the Dataset holds the pixels
    assert ds.take(1)[0]["png"].shape == (24, 32, 3)
    wrong = fray.output_steps(PIXEL_SPEC, ["jpg"])
    with pytest.raises(ValueError, match=r"fields \['jpg'\] are not in the batch"):
        next(iter(ds.iter_torch_batches(batch_size=4, collate_fn=wrong)))


def test_read_refuses_bad_settings(cluster, data):
    paths, _ = data
    with pytest.raises(ValueError, match="ship_pixels must be True or False"):
        fray.read(paths, ship_pixels=1)
    for t in (None, "decode,resize(8)"):
        with pytest.raises(ValueError, match="ship_pixels=True needs a transform that ends in output steps"):
            fray.read(paths, transform=t, ship_pixels=True)
    with pytest.raises(ValueError, match="output_steps needs a transform spec that ends in output steps"):
        fray.output_steps("decode,resize(8)", ["png"])
    with pytest.raises(ValueError, match="transform="):
        fray.output_steps("no-such", ["png"])
    for bad in ("png", [], [1]):
        with pytest.raises(ValueError, match="fields must be a non-empty list of field names"):
            fray.output_steps("imagenet-train", bad)
    for bad in ("y", [], [3]):
        with pytest.raises(ValueError, match="columns must be a non-empty list of field names"):
            fray.read(paths, columns=bad)
    with pytest.raises(ValueError, match="rows_per_block must be >= 1"):
        fray.read(paths, rows_per_block=0)
    with pytest.raises(ValueError, match="transform"):
        fray.read(paths, transform="no-such-transform")
    with pytest.raises(ValueError, match="set by read"):
        fray.read(paths, shuffle=3)


# ------------------------------------------------------------------ other formats


def other_format(tmp_path, fmt):
    """6 files of 15 + 4f records, labels unique; the label's field name."""
    paths, nxt = [], 0
    for f in range(6):
        ys = list(range(nxt, nxt + 15 + 4 * f))
        nxt += len(ys)
        if fmt == "tfrecord":
            paths.append(write_tfrecord(tmp_path / f"p{f}.tfrecord", ys))
        elif fmt == "tar":
            paths.append(write_tar(tmp_path / f"p{f}.tar", ys))
        else:
            p = tmp_path / f"p{f}.jsonl"
            p.write_text("".join('{"y": %d, "v": [%d.5, 1.0]}\n' % (y, y) for y in ys))
            paths.append(str(p))
    return paths, nxt, ("cls" if fmt == "tar" else "y")


def label_list(v):
    return [int(x.decode() if isinstance(x, bytes) else x) for x in (v.tolist() if hasattr(v, "tolist") else v)]


@pytest.mark.parametrize("fmt", ["tfrecord", "tar", "jsonl"])
def test_other_formats_exactly_once_and_read_equals_loader(cluster, tmp_path, fmt):
    paths, total, label = other_format(tmp_path, fmt)
    with feedline.Loader(paths, batch_size=5, shuffle=0, passes=1, rank=0, world_size=1,
                         deterministic=True) as l:
        truth = {tuple(o): y for b in l for o, y in zip(b.origins, label_list(b[label]))}
    assert sorted(truth.values()) == list(range(total))
    svc = fray.Service(files=paths, batch_size=5, shuffle=9, seed=1, workers=2, world_size=2,
                       resources_per_worker={"CPU": 0.25})
    try:
        seen = []
        for r in range(2):
            for b in svc.loader(r):
                for o, y in zip(b.origins, label_list(b[label])):
                    assert truth[o] == y
                    seen.append(o)
        assert len(seen) == len(set(seen)) and set(seen) == set(truth)
    finally:
        svc.shutdown()
    rows = fray.read(paths, provenance=True, rows_per_block=6).take_all()
    got = {(r["_file"], int(r["_record"])): label_list([r[label]])[0] for r in rows}
    assert len(rows) == total and got == truth


# ------------------------------------------------------------------ input forms


def loader_records(inputs):
    """(file, record) -> y of everything feedline.Loader(files=inputs) reads."""
    with feedline.Loader(inputs, batch_size=7, shuffle=0, passes=1, rank=0, world_size=1,
                         deterministic=True) as l:
        return {tuple(o): y for b in l for o, y in zip(b.origins, b["y"].tolist())}


def service_records(inputs, world=2):
    """(file, record) -> y of one pass of a Service over `inputs` (every
    record once), and the groups its batches came from."""
    svc = fray.Service(files=inputs, batch_size=8, shuffle=16, seed=5, workers=2, world_size=world,
                       resources_per_worker={"CPU": 0.25}, readers=1)
    try:
        got, groups = {}, set()
        for r in range(world):
            loader = svc.loader(r)
            for b in loader:
                groups.add(b.group)
                for o, y in zip(b.origins, b["y"].tolist()):
                    assert o not in got, f"{o} came twice"
                    got[o] = y
            loader.close()
        return got, groups, svc.groups, list(svc._config["files"])
    finally:
        svc.shutdown()


def read_records(inputs):
    got = {}
    for row in fray.read(inputs, provenance=True, rows_per_block=8).take_all():
        k = (row["_file"], int(row["_record"]))
        assert k not in got, f"{k} came twice"
        got[k] = int(row["y"])
    return got


def input_forms(data, tmp_path, form):
    """`form` of inputs over some of the data's files: the inputs and how
    many files they name."""
    paths, _ = data
    d = os.path.dirname(paths[0])
    if form == "prefixed-glob":
        # npz files under a name no format claims: only the prefix says what they are
        for i, p in enumerate(paths[:5]):
            os.link(p, tmp_path / f"blob{i}.bin")
        return f"npz:{tmp_path}/*.bin", 5
    if form == "list":
        lst = tmp_path / "train.txt"
        # relative to the list's folder, a comment, a blank line, an absolute path
        lst.write_text("# the training files\n" + "".join(
            os.path.relpath(p, tmp_path) + "\n" for p in paths[:6]) + "\n" + paths[6] + "\n")
        return f"@{lst}", 7
    assert form == "braces"
    return os.path.join(d, "part{00..03}.npz"), 4


@pytest.mark.parametrize("form", ["prefixed-glob", "list", "braces"])
def test_service_and_read_take_every_input_form_the_loader_takes(cluster, data, tmp_path, form):
    inputs, nfiles = input_forms(data, tmp_path, form)
    truth = loader_records(inputs)
    assert len({f for f, _ in truth}) == nfiles
    got, _, groups, files = service_records(inputs)
    # the files planned one by one, a prefix kept on each (the records name
    # the file without it, as the Loader's do)
    bare = [f.split(":", 1)[1] for f in files] if form == "prefixed-glob" else files
    assert sorted(bare) == sorted({f for f, _ in truth}) and groups == nfiles
    assert got == truth
    assert read_records(inputs) == truth
    if form == "prefixed-glob":
        assert all(f.startswith("npz:") and f.endswith(".bin") for f in files)


def test_a_list_of_n_files_is_planned_as_n_files(cluster, data, tmp_path):
    inputs, nfiles = input_forms(data, tmp_path, "list")
    got, batch_groups, groups, files = service_records(inputs, world=1)
    assert len(files) == nfiles and groups == nfiles
    assert batch_groups - {None} == set(range(nfiles))
    assert len(got) == len(loader_records(inputs))
    plan = fray.pass_plan(files, 5, 0, nfiles)
    assert sorted(i for g in plan for part in g for i in part[0]) == sorted(files)
    assert all(len(g) == 1 and len(g[0][0]) == 1 for g in plan)


@pytest.mark.parametrize("bad", ["/nonexistent/dir/*.npz", "@/nonexistent/train.txt", "npz:/nonexistent/*.bin"])
def test_bad_inputs_are_the_loaders_errors(cluster, data, bad):
    with pytest.raises(Exception) as want:
        feedline.Loader(files=bad, batch_size=8)
    for make in (lambda: service(data, files=bad), lambda: fray.read(bad)):
        with pytest.raises(type(want.value)) as got:
            make()
        assert str(got.value) == str(want.value)


def test_a_twice_named_file_is_the_loaders_error(cluster, data):
    paths, _ = data
    bad = [paths[0], os.path.join(os.path.dirname(paths[0]), "part0{0..1}.npz")]
    with pytest.raises(ValueError) as want:
        feedline.Loader(files=bad, batch_size=8)
    assert "given twice" in str(want.value)
    with pytest.raises(ValueError) as got:
        service(data, files=bad)
    assert str(got.value) == str(want.value)


def test_the_file_order_is_the_loaders_permutation(data):
    """The plan takes the files in the Loader's own order of (seed, pass):
    one group a file, one rank, its groups are the files in that order."""
    paths, _ = data
    for seed, p in [(5, 0), (5, 1), (7, 0)]:
        plan = fray.pass_plan(paths, seed, p, len(paths), counts=[1] * len(paths))
        order = [g[0][0][0] for g in plan]
        assert sorted(order) == sorted(paths)
        assert order == [g[0][0][0] for g in fray.pass_plan(paths, seed, p, len(paths), counts=[1] * len(paths))]
        # a Loader with shuffle=0 (no buffer) and one reader reads the files
        # of each pass whole, one after the other, in its pass order
        with feedline.Loader(paths, batch_size=1000, shuffle=0, seed=seed, readers=1, passes=p + 1,
                             deterministic=True) as l:
            runs = []
            for b in l:
                for f, r in b.origins:
                    if r == 0:
                        runs.append(f)
        assert runs[p * len(paths):] == order
    unshuffled = fray.pass_plan(paths, 5, 0, len(paths), shuffle=False, counts=[1] * len(paths))
    assert [g[0][0][0] for g in unshuffled] == paths


# ------------------------------------------------------------------ dataset directories

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")


def fixture_expected(kind, name):
    with open(os.path.join(FIXTURES, kind, "expected.json")) as f:
        return json.load(f)[name]


def as_expected(v):
    """A value from Ray Data (a numpy array, a number, bytes) as
    expected.json writes it: a flat list, bytes in base64."""
    import base64
    if isinstance(v, bytes):
        return [base64.b64encode(v).decode()]
    return np.asarray(v).ravel().tolist()


def pil_expected(png):
    """A `pil` column's value (feedline gives a PNG of the pixels) as
    expected.json writes it: its RGB pixels in base64, width, height."""
    import base64
    import io
    from PIL import Image
    img = Image.open(io.BytesIO(png)).convert("RGB")
    return {"rgb": base64.b64encode(np.asarray(img).tobytes()).decode(), "width": img.size[0],
            "height": img.size[1]}


@pytest.mark.parametrize("kind, name, ragged", [
    ("arrow", "hf", ["tokens"]),
    ("mds", "plain", ["arr", "arr_t"]),
    ("mds", "zstd", ["arr", "arr_t"]),
])
def test_read_gives_every_record_of_a_dataset_dir_once_ragged_fields_as_arrays(cluster, kind, name, ragged):
    """feedline.ray.read over a Hugging Face save_to_disk directory and MDS
    directories (the repository's fixtures): every record once, each value
    the writer's (expected.json); a ragged field gives each row a numpy
    array of its own length and of the field's dtype."""
    d = os.path.join(FIXTURES, kind, name)
    want = fixture_expected(kind, name)
    files = fray._expand(d)
    order = {f.split(":", 1)[1] if f.startswith("mds:") else f: i for i, f in enumerate(files)}
    ds = fray.read(d, provenance=True, rows_per_block=2)
    rows = ds.take_all()
    keys = [(order[r["_file"]], int(r["_record"])) for r in rows]
    assert len(keys) == len(set(keys)) == len(want), "a record came twice or is missing"
    got = []
    for _, r in sorted(zip(keys, rows), key=lambda kr: kr[0]):
        got.append({k: pil_expected(v) if k == "pil" else as_expected(v)
                    for k, v in r.items() if k not in ("_file", "_record")})
    assert got == want
    lengths = set()
    for r in rows:
        for f in ragged:
            assert isinstance(r[f], np.ndarray), (f, type(r[f]))
            lengths.add((f, r[f].shape[0]))
    # the rows differ in length: the fields are ragged, each row its own
    assert all(len({n for g, n in lengths if g == f}) > 1 for f in ragged), lengths
    # of the dtype feedline.Loader gives the field
    with feedline.Loader(d, batch_size=1, shuffle=0, passes=1) as l:
        first = next(iter(l))
        assert {f: r[f].dtype for r in rows for f in ragged} == {f: first[f].dtype for f in ragged}
    # and as numpy batches: an object array of each row's array
    batch = next(iter(ds.iter_batches(batch_size=len(want), batch_format="numpy")))
    for f in ragged:
        assert len(batch[f]) == len(want) and all(isinstance(x, np.ndarray) for x in batch[f])


def test_the_service_reads_a_dataset_dir_every_record_once(cluster):
    """A Service over a Hugging Face save_to_disk directory, 2 ranks, 2
    workers, shuffled: every record once, its values (the ragged `tokens`
    through the batch's offsets) the writer's."""
    import base64
    d = os.path.join(FIXTURES, "arrow", "hf")
    want = {r["id"][0]: r for r in fixture_expected("arrow", "hf")}
    svc = fray.Service(files=d, batch_size=3, shuffle=4, seed=2, workers=2, world_size=2,
                       resources_per_worker={"CPU": 0.25})
    try:
        seen = []
        for rank in range(2):
            loader = svc.loader(rank)
            for b in loader:
                off = b.offsets("tokens")
                assert off is not None and len(off) == b.size + 1
                for k, (o, i) in enumerate(zip(b.origins, b["id"].tolist())):
                    w = want[i]
                    assert b["tokens"][off[k]:off[k + 1]].tolist() == w["tokens"]
                    assert b["vec"][k].tolist() == w["vec"] and b["score"][k] == w["score"][0]
                    assert base64.b64encode(b["text"][k]).decode() == w["text"][0]
                    seen.append((tuple(o), i))
            loader.close()
    finally:
        svc.shutdown()
    origins = [o for o, _ in seen]
    assert len(origins) == len(set(origins)), "a record came twice"
    assert sorted(i for _, i in seen) == sorted(want)
