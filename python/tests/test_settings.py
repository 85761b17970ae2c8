"""A refused setting reads the same from Python as from the Rust builder and
the command (actors/tests/settings.rs and cli/tests/cli_settings.rs make the
same mistakes): the settings' own sentence, each setting spelled as its
keyword."""

import os

import pytest

import feedline

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "text",
                    "docs.jsonl")


@pytest.mark.parametrize("kwargs, sentence", [
    (dict(files=[DOCS], shuffle=1000, min_pool=3000),
     "min_pool=3000 is more than the pool holds (shuffle=1000): give at most 1000"),
    (dict(files=[DOCS], pack=64, pack_policy="concat", pack_window=16),
     'pack_window=16 does not apply with pack_policy="concat" (concat fills one row at a time: '
     "it holds no window of open rows): leave pack_window out, or give pack_policy best-fit "
     "or first-fit"),
    (dict(files=[DOCS], pack=64, drop_last=True),
     "drop_last with pack=64: a pass's last packed batch is filled with padding rows "
     "(segment ids 0), not dropped"),
    (dict(files=[]), "no input files: give files or file sets"),
])
def test_a_mistake_reads_as_the_keywords_name_its_settings(kwargs, sentence):
    with pytest.raises(ValueError) as e:
        feedline.Loader(rank=0, world_size=1, **kwargs)
    assert str(e.value) == "invalid configuration: " + sentence


def test_rules_across_keywords_are_the_settings_own():
    cases = [
        (dict(max_bad=3), 'max_bad=3 applies only with on_error="skip"'),
        (dict(max_pixels=10), "max_pixels=10 applies only with transform"),
        (dict(workers=2), "workers=2 applies only with transform, tokenizer or map"),
        (dict(map_schema={"x": ("float32", [1])}), "map_schema applies only with map"),
        (dict(transform="decode", map=lambda inst, rng: inst), "give map or transform, not both"),
        (dict(tokenizer="missing.json", transform="decode"),
         "give tokenizer or transform, not both"),
        (dict(add_eos=True), "add_eos applies only with tokenizer"),
        (dict(long_docs="drop"), "long_docs applies only with pack (packing)"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ValueError) as e:
            feedline.Loader(files=[DOCS], rank=0, world_size=1, **kwargs)
        assert str(e.value).startswith("invalid configuration: " + words), str(e.value)


def test_a_shard_out_of_range_reads_as_the_command_and_the_builder_say_it():
    """The shard's one rule (`shard_given`): the command says `(RANK from
    --rank, WORLD_SIZE from --world-size)`, Python its keywords."""
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[DOCS], rank=3, world_size=2)
    assert str(e.value) == (
        "invalid configuration: RANK=3 is out of range for WORLD_SIZE=2 (ranks are 0..2) "
        "(RANK from rank, WORLD_SIZE from world_size)")


def test_a_rank_given_alone_takes_the_world_size_from_the_environment(monkeypatch):
    """As the command's `--rank` does: what is not given comes from
    WORLD_SIZE (no "give both or neither" of Python's own)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with feedline.Loader(files=[DOCS], rank=1) as l:
        assert (l.rank, l.world_size) == (1, 2)
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[DOCS], rank=2)
    assert str(e.value) == (
        "invalid configuration: RANK=2 is out of range for WORLD_SIZE=2 (ranks are 0..2) "
        "(RANK from rank)")
    from feedline.torch import IterableDataset
    with pytest.raises(ValueError) as e2:
        IterableDataset([DOCS], rank=2)
    assert str(e2.value) == str(e.value)


def test_set_epoch_past_the_last_pass_reads_as_the_rust_loader_says_it():
    with feedline.Loader(files=[DOCS], passes=2, rank=0, world_size=1) as l:
        l.set_epoch(1)
        with pytest.raises(ValueError) as e:
            l.set_epoch(2)
    assert str(e.value) == (
        "invalid configuration: set_epoch(2): this loader runs 2 passes (passes=2): epochs 0..1")


def test_passes_0_is_the_settings_refusal():
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[DOCS], passes=0, rank=0, world_size=1)
    assert str(e.value) == "invalid configuration: passes must be at least 1, not 0"
