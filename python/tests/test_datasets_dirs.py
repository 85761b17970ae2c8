"""feedline.Loader(files=DIR) on the directories other tools write: a Hugging
Face save_to_disk directory and Mosaic Streaming MDS directories (the
repository's fixtures, tests/fixtures/arrow and tests/fixtures/mds, made by
their make.py): every record once with the writer's values; a DatasetDict
refused naming its splits."""

import json
from pathlib import Path

import numpy as np
import pytest

import feedline

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def expected(kind):
    return json.loads((FIXTURES / kind / "expected.json").read_text())


def values(files, field):
    loader = feedline.Loader(files=files, batch_size=2, shuffle=0, passes=1)
    out = []
    for batch in loader:
        out.extend(np.asarray(batch[field]).ravel().tolist())
    return out


def test_a_save_to_disk_directory_gives_every_record_once():
    want = [r["id"][0] for r in expected("arrow")["hf"]]
    assert sorted(values(str(FIXTURES / "arrow" / "hf"), "id")) == sorted(want)
    got = values(str(FIXTURES / "arrow" / "hf"), "vec")
    assert sorted(got) == sorted(x for r in expected("arrow")["hf"] for x in r["vec"])


def test_an_mds_directory_gives_every_sample_once():
    want = sorted(r["i64"][0] for r in expected("mds")["nested"])
    assert sorted(values(str(FIXTURES / "mds" / "nested"), "i64")) == want
    assert sorted(values("mds:" + str(FIXTURES / "mds" / "nested"), "i64")) == want


def test_a_dataset_dict_is_refused_naming_its_splits():
    with pytest.raises(ValueError, match=r"DatasetDict of 2 splits \(train, test\)"):
        feedline.Loader(files=str(FIXTURES / "arrow" / "dict"), batch_size=2)
