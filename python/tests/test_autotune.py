"""autotune=True, cpus=, memory_budget=: stats()["autotune"] has the values
in force and the changes kept, with the keys of the command's --json; the
budgets are refused as every setting is, in keywords."""

import os

import pytest

import feedline
from helpers import make_npz

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "text",
                    "docs.jsonl")

KEYS = ["batches_in_flight", "chunks_in_flight", "readers", "workers"]


def test_stats_say_what_the_tuner_chose_and_every_record_comes_once(tmp_path):
    files = make_npz(tmp_path, files=4, rows=50)
    with feedline.Loader(files, batch_size=8, shuffle=64, passes=1, rank=0, world_size=1,
                         autotune=True, cpus=2, memory_budget=1 << 30) as loader:
        seen = 0
        for batch in loader:
            seen += len(batch["y"])
        a = loader.stats()["autotune"]
    assert seen == 200
    assert sorted(a) == ["changes", "values"]
    assert sorted(a["values"]) == KEYS
    # Two CPUs: at most two readers (each pool at most the CPU budget).
    assert 1 <= a["values"]["readers"] <= 2
    for c in a["changes"]:
        assert sorted(c) == ["from", "rate_after", "rate_before", "setting", "t_s", "to"]
        assert c["setting"] in KEYS


def test_without_autotune_the_stats_have_none(tmp_path):
    files = make_npz(tmp_path, files=1, rows=10)
    with feedline.Loader(files, batch_size=5, passes=1, rank=0, world_size=1) as loader:
        list(loader)
        assert "autotune" not in loader.stats()


@pytest.mark.parametrize("kwargs, sentence", [
    (dict(autotune=True, cpus=0), "cpus must be at least 1, not 0"),
    (dict(cpus=4), "cpus=4 applies only with autotune (the budget it tunes within)"),
    (dict(memory_budget=1 << 30),
     "memory_budget=1073741824 applies only with autotune (the budget it tunes within)"),
    (dict(autotune=True, readers=3, cpus=2),
     "cpus=2 is fewer than the threads the pipeline needs at least in one pool: "
     "3 readers and 0 transform workers (each pool at most the CPU budget)"),
])
def test_budgets_are_refused_in_keywords(kwargs, sentence):
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[DOCS], rank=0, world_size=1, **kwargs)
    assert str(e.value) == "invalid configuration: " + sentence
