"""feedline.Loader(shuffle_mode="global"): every record once per pass, each
pass another permutation, the same batches for 1 and 3 readers; class-sorted
files (one class per file) mixed, as stats()["order"] shows; a checkpoint
resumed exactly; bad values refused naming the keyword."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import feedline

from helpers import write_tar, write_tfrecord


def class_files(tmp_path, files=4, per_file=60):
    """TFRecord files, one class each: label y = class * 1000 + record."""
    return [
        write_tfrecord(tmp_path / f"class{c}.tfrecord", [c * 1000 + i for i in range(per_file)])
        for c in range(files)
    ]


def passes_of(loader):
    out = {}
    for b in loader:
        out.setdefault(b.pass_, []).extend(np.asarray(b["y"]).ravel().tolist())
    return out


def make(files, tmp_path, **kw):
    opts = dict(batch_size=8, passes=2, seed=3, shuffle_mode="global", index_dir=str(tmp_path / "idx"))
    opts.update(kw)
    return feedline.Loader(files=files, **opts)


def test_every_record_once_per_pass_in_another_order(tmp_path):
    files = class_files(tmp_path)
    want = sorted(c * 1000 + i for c in range(4) for i in range(60))
    for seed in (0, 1, 9):
        got = passes_of(make(files, tmp_path, seed=seed))
        assert sorted(got) == [0, 1]
        assert sorted(got[0]) == want and sorted(got[1]) == want
        assert got[0] != got[1] and got[0] != want


def test_the_same_batches_whatever_the_readers(tmp_path):
    files = class_files(tmp_path)
    one = passes_of(make(files, tmp_path, readers=1))
    three = passes_of(make(files, tmp_path, readers=3))
    assert one == three


def test_stats_order_shows_the_mix(tmp_path):
    files = class_files(tmp_path)
    loader = make(files, tmp_path, passes=1)
    list(loader)
    order = loader.stats()["order"]
    assert set(order) == {"pass", "records", "neighbour_distance", "files_per_batch"}
    assert order["records"] == 240
    assert 0.7 < order["neighbour_distance"] < 1.3, order
    assert order["files_per_batch"] > 2.5, order
    # A small pool over class-sorted files mixes far less.
    buffered = feedline.Loader(files=files, batch_size=8, passes=1, shuffle=4, readers=1)
    list(buffered)
    assert buffered.stats()["order"]["neighbour_distance"] < 0.5


def test_a_webdataset_tar_reads_in_global_order(tmp_path):
    files = [write_tar(tmp_path / f"s{k}.tar", range(k * 100, k * 100 + 30)) for k in range(3)]
    loader = feedline.Loader(files=files, batch_size=7, passes=1, seed=2, shuffle_mode="global",
                             index_dir=str(tmp_path / "idx"))
    got = [int(v) for b in loader for v in np.asarray(b["cls"]).ravel()]
    assert sorted(got) == sorted(k * 100 + i for k in range(3) for i in range(30))
    assert got != sorted(got)


def test_a_checkpoint_resumes_the_global_order_exactly(tmp_path):
    files = class_files(tmp_path)
    full = [np.asarray(b["y"]).ravel().tolist() for b in make(files, tmp_path)]
    loader = make(files, tmp_path)
    it = iter(loader)
    before = [np.asarray(next(it)["y"]).ravel().tolist() for _ in range(11)]
    state = loader.state_dict()
    loader.close()
    again = make(files, tmp_path, resume=state)
    after = [np.asarray(b["y"]).ravel().tolist() for b in again]
    assert before + after == full


def test_block_mode_reads_every_record_once_in_blocks_whatever_the_readers(tmp_path):
    """shuffle_mode="block": every record once per pass, the same batches for
    1 and 3 readers, each pass another order; fewer than 16 files, so the
    pass is cut into K = ceil(185 / 24) = 8 blocks, block k holding records
    floor(k * 37 / 8) .. floor((k + 1) * 37 / 8) of each file: every block
    one range of each of the (class-sorted) files, all five classes."""
    files = class_files(tmp_path, files=5, per_file=37)
    want = sorted(c * 1000 + i for c in range(5) for i in range(37))
    k = -(-185 // 24)
    bounds = [5 * (b * 37 // k) for b in range(k + 1)]
    for seed in (0, 4):
        one = passes_of(make(files, tmp_path, seed=seed, shuffle_mode="block", shuffle=24, readers=1))
        three = passes_of(make(files, tmp_path, seed=seed, shuffle_mode="block", shuffle=24, readers=3))
        assert one == three
        assert sorted(one[0]) == want and sorted(one[1]) == want
        assert one[0] != one[1] and one[0] != want
        for p in (0, 1):
            order = one[p]
            for b in range(k):
                block = order[bounds[b]:bounds[b + 1]]
                assert {y // 1000 for y in block} == set(range(5)), (seed, p, b, block)
                for c in range(5):
                    rs = sorted(y % 1000 for y in block if y // 1000 == c)
                    assert rs == list(range(b * 37 // k, (b + 1) * 37 // k)), (seed, p, b, c, rs)


def feedline_command():
    """The command built beside the package (./test.sh runs the Rust tests,
    which build it, before these): FEEDLINE_CLI, else target/release/feedline."""
    path = os.environ.get("FEEDLINE_CLI") or str(
        pathlib.Path(__file__).resolve().parents[2] / "target" / "release" / "feedline")
    assert os.access(path, os.X_OK), f"{path}: no feedline command (build it: cargo build --release -p feedline-cli)"
    return path


@pytest.mark.parametrize("mode", ["global", "block"])
def test_python_gives_the_commands_order(tmp_path, mode):
    """The same settings through Python and through `feedline run --trace`:
    the same batches, each of the same records (file and record), in the
    same order, in both passes."""
    files = class_files(tmp_path)
    for seed in (3, 8):
        loader = make(files, tmp_path, seed=seed, shuffle_mode=mode, shuffle=16)
        py = [(b.pass_, [[s, r] for s, r in b.origins]) for b in loader]
        trace = tmp_path / f"trace-{mode}-{seed}.jsonl"
        subprocess.run([feedline_command(), "run", *files, "--batch", "8", "--passes", "2",
                        "--seed", str(seed), "--shuffle-mode", mode, "--shuffle", "16",
                        "--index-dir", str(tmp_path / "idx"), "--trace", str(trace)],
                       check=True, capture_output=True)
        lines = sorted((json.loads(line) for line in trace.read_text().splitlines()),
                       key=lambda t: (t["pass"], t["seq"]))
        cli = [(t["pass"], t["records"]) for t in lines]
        assert len(py) == 2 * 240 // 8
        assert py == cli, (mode, seed)


def test_bad_values_are_refused_naming_the_keyword(tmp_path):
    files = class_files(tmp_path, files=1, per_file=4)
    with pytest.raises(ValueError, match="shuffle_mode"):
        make(files, tmp_path, shuffle_mode="perfect")
    with pytest.raises(ValueError, match="shuffle.*must be at least 1 with shuffle_mode=\"block\", not 0"):
        make(files, tmp_path, shuffle_mode="block", shuffle=0)
    gz = tmp_path / "z.tfrecord.gz"
    import gzip
    gz.write_bytes(gzip.compress(open(files[0], "rb").read()))
    with pytest.raises(Exception, match='z.tfrecord.gz.*shuffle_mode="buffer"'):
        list(make([str(gz)], tmp_path))


def test_origins_name_the_file_and_record_of_each_instance(tmp_path):
    """In global mode a batch's origins are the files and records read
    (label y = class * 1000 + record of file class{c}), not positions of the
    pass's order."""
    files = class_files(tmp_path, files=3, per_file=20)
    seen = 0
    for b in make(files, tmp_path, passes=2):
        for (source, record), y in zip(b.origins, np.asarray(b["y"]).ravel().tolist()):
            assert source == files[y // 1000], (source, record, y)
            assert record == y % 1000, (source, record, y)
            seen += 1
    assert seen == 2 * 60
