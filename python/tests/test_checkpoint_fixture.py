"""A checkpoint written by an earlier build (format version 2, in
cli/tests/fixtures/checkpoint-v2 with the run it came from, see its RUN.md)
resumes through Python as through the command: what is left is exactly the
uninterrupted run's batches after the stop, record by record."""

import json
import os
import shutil
from pathlib import Path

import feedline

FIXTURE = Path(__file__).resolve().parents[2] / "cli" / "tests" / "fixtures" / "checkpoint-v2"


def trace(path):
    return [(line["pass"], line["seq"], [tuple(r) for r in line["records"]])
            for line in map(json.loads, path.read_text().splitlines())]


def test_a_checkpoint_of_format_2_still_resumes(tmp_path, monkeypatch):
    for f in ("f0.jsonl", "f1.jsonl", "f2.jsonl", "checkpoint.json"):
        shutil.copy(FIXTURE / f, tmp_path / f)
    state = json.loads((FIXTURE / "checkpoint.json").read_text())
    assert state["version"] == 2
    for f in state["inputs"]["files"]:  # a clone's files have the clone's times
        os.utime(tmp_path / f["path"], ns=(f["mtime_ns"], f["mtime_ns"]))
    monkeypatch.chdir(tmp_path)
    with feedline.Loader(files="f*.jsonl", batch_size=8, shuffle=20, seed=5, deterministic=True,
                         passes=2, readers=2, resume=state) as ld:
        rest = [(b.pass_, b.seq, list(b.origins)) for b in ld]
    full = trace(FIXTURE / "full.trace")
    assert len(full) == 18 and state["batches"] == 11
    assert rest == full[11:]
