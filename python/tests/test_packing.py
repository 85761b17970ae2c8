"""Tokenizing as a stage and sequence packing (issue 30), through the
Python Loader: every document's ids equal what Python's `tokenizers` gives
for it (same tokenizer.json), reassembled from the packed rows' segments
exactly once per pass; segment ids, positions and cu_seqlens agree; the
same packs whatever the reader and worker counts (deterministic); a stop,
state_dict() and resume exactly once; every setting checked."""

import json

import numpy as np
import pytest

import feedline

tokenizers = pytest.importorskip("tokenizers")

WORDS = ("fn main let mut struct impl self match Some None Ok Err return pub use "
         "crate super where trait enum loop while for in if else async await").split()


def corpus(tmp_path, files=3, docs=40, seed=0):
    rng = np.random.default_rng(seed)
    texts, paths = {}, []
    for f in range(files):
        p = tmp_path / f"docs{f}.jsonl"
        with open(p, "w") as out:
            for k in range(docs):
                n = int(rng.integers(1, 400)) if rng.random() < 0.9 else int(rng.integers(600, 1500))
                text = " ".join(rng.choice(WORDS, n)) + ("\n" if k % 3 else " é ü 🦀")
                out.write(json.dumps({"text": text, "id": k}) + "\n")
                texts[(str(p), k)] = text
        paths.append(str(p))
    return paths, texts


def tokenizer_json(tmp_path, texts):
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts.values()), trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return str(path), tok


def reassemble(batches, length):
    """{(pass, source, record): tokens}, each piece once, from the segments."""
    docs = {}
    for b in batches:
        ids = np.asarray(b["input_ids"])
        at = {}
        for row, source, record, start, n, _ in b.segments:
            a = at.get(row, 0)
            docs.setdefault((b.pass_, source, record), []).append((start, ids[row, a:a + n].tolist()))
            at[row] = a + n
    out = {}
    for key, pieces in docs.items():
        pieces.sort()
        joined = []
        for start, toks in pieces:
            assert start == len(joined), f"{key}: a piece twice or a gap"
            joined.extend(toks)
        out[key] = joined
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("packing")
    paths, texts = corpus(tmp)
    tok_path, tok = tokenizer_json(tmp, texts)
    eos = tok.token_to_id("<|endoftext|>")
    expect = {k: tok.encode(t).ids + [eos] for k, t in texts.items()}
    return paths, tok_path, expect


def loader(data, **kw):
    paths, tok_path, _ = data
    s = dict(files=paths, batch_size=4, shuffle=50, seed=3, passes=2, tokenizer=tok_path,
             text_field="text", add_eos=True, pack=256, pack_window=30)
    s.update(kw)
    if s.get("pack_policy") == "concat":
        s.pop("pack_window")  # concat holds no window: refused with it
    return feedline.Loader(**s)


@pytest.mark.parametrize("policy", ["best-fit", "first-fit", "concat"])
def test_every_document_is_its_python_tokenizers_ids_once_per_pass(data, policy):
    _, _, expect = data
    with loader(data, pack_policy=policy) as ld:
        batches = list(ld)
        stats = ld.stats()["packing"]
    got = reassemble(batches, 256)
    for p in (0, 1):
        for (source, record), ids in expect.items():
            assert got.pop((p, source, record)) == ids, f"pass {p}: {source}#{record}"
    assert not got
    assert all(np.asarray(b["input_ids"]).shape == (4, 256) for b in batches)
    real = sum(int((np.asarray(b["segment_ids"]) != 0).sum()) for b in batches)
    assert stats["tokens"] == real == 2 * sum(len(v) for v in expect.values())
    assert stats["fill"] == pytest.approx(real / (stats["rows"] * 256))
    if policy != "concat":
        assert stats["documents_cut"] == 0
        # No document of at most L tokens is in more than one piece.
        pieces = {}
        for b in batches:
            for _, s, r, _, _, n in b.segments:
                pieces[(b.pass_, s, r, n)] = pieces.get((b.pass_, s, r, n), 0) + 1
        assert all(c == 1 for (_, _, _, n), c in pieces.items() if n <= 256)


def test_segment_ids_positions_and_cu_seqlens_agree(data):
    with loader(data, passes=1) as ld:
        for b in ld:
            seg = np.asarray(b["segment_ids"])
            pos = np.asarray(b["position_ids"])
            cu = np.asarray(b["cu_seqlens"]).tolist()
            flat = seg.reshape(-1)
            bounds = [0]
            for i in range(1, flat.size + 1):
                if i == flat.size or i % 256 == 0 or flat[i] != flat[i - 1]:
                    bounds.append(i)
            assert cu == bounds
            lens = np.diff(cu)
            assert int(np.asarray(b["max_seqlen"])[0]) == int(lens.max())
            for r in range(seg.shape[0]):
                for k in range(256):
                    if seg[r, k] == 0:
                        assert pos[r, k] == 0
                    elif k == 0 or seg[r, k - 1] != seg[r, k]:
                        assert pos[r, k] == 0
                    else:
                        assert pos[r, k] == pos[r, k - 1] + 1


def test_deterministic_packs_do_not_depend_on_reader_or_worker_counts(data):
    def run(readers, workers):
        with loader(data, deterministic=True, readers=readers, workers=workers) as ld:
            return [(b.pass_, b.seq, np.asarray(b["input_ids"]).tobytes(), b.segments) for b in ld]
    one = run(1, 1)
    assert one == run(3, 2)
    assert one == run(2, 4)


@pytest.mark.parametrize("det", [True, False])
@pytest.mark.parametrize("stop", [1, 9, 40])
def test_stop_state_dict_and_resume_is_exactly_once(data, det, stop):
    _, _, expect = data
    with loader(data, deterministic=det) as ld:
        whole = [(b.pass_, b.seq, np.asarray(b["input_ids"]).tolist()) for b in ld]
    with loader(data, deterministic=det) as ld:
        first = []
        for b in ld:
            first.append(b)
            if len(first) == stop:
                break
        state = json.loads(json.dumps(ld.state_dict()))
    with loader(data, deterministic=det, readers=3, resume=state) as ld:
        rest = list(ld)
        rest += list(ld) if rest and rest[-1].pass_ == 0 else []
    got = reassemble(first + rest, 256)
    for p in (0, 1):
        for (source, record), ids in expect.items():
            assert got.pop((p, source, record)) == ids, f"pass {p}: {source}#{record}"
    assert not got
    if det:
        again = [(b.pass_, b.seq, np.asarray(b["input_ids"]).tolist()) for b in first + rest]
        assert again == whole


def test_bad_settings_are_refused_naming_them(data, tmp_path):
    paths, tok_path, _ = data
    with pytest.raises(ValueError, match="pack_window applies only with pack"):
        feedline.Loader(files=paths, pack_window=10)
    with pytest.raises(ValueError, match="pack_policy"):
        feedline.Loader(files=paths, tokenizer=tok_path, pack=64, pack_policy="tightest")
    with pytest.raises(ValueError, match="long_docs"):
        feedline.Loader(files=paths, tokenizer=tok_path, pack=64, long_docs="fold")
    with pytest.raises(ValueError, match="pack length"):
        feedline.Loader(files=paths, tokenizer=tok_path, pack=0)
    with pytest.raises(ValueError, match="text_field"):
        feedline.Loader(files=paths, text_field="text")
    with pytest.raises(ValueError, match="not both"):
        feedline.Loader(files=paths, tokenizer=tok_path, transform="decode")
    with pytest.raises(ValueError, match="missing.json"):
        feedline.Loader(files=paths, tokenizer=str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{\"not\": \"a tokenizer\"}")
    with pytest.raises(ValueError, match="not a tokenizer.json"):
        feedline.Loader(files=paths, tokenizer=str(bad))
    # A tokenizer with no EOS token, asked for one.
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    tok.train_from_iterator(["a b c"], tokenizers.trainers.BpeTrainer(vocab_size=50))
    plain = tmp_path / "plain.json"
    tok.save(str(plain))
    with pytest.raises(ValueError, match="EOS"):
        feedline.Loader(files=paths, tokenizer=str(plain), add_eos=True)


def test_a_text_that_is_not_text_is_a_bad_record_naming_it(tmp_path, data):
    _, tok_path, _ = data
    p = tmp_path / "num.jsonl"
    p.write_text("".join(json.dumps({"text": "fn main", "id": i}) + "\n" for i in range(5))
                 + json.dumps({"text": 7, "id": 5}) + "\n")
    with pytest.raises(Exception, match=r"num.jsonl.*record 5|record 5.*num.jsonl"):
        with feedline.Loader(files=[str(p)], tokenizer=tok_path, pack=16, batch_size=2,
                             schema={"text": ("bytes", []), "id": ("i64", [])}) as ld:
            list(ld)


def test_len_of_a_packing_loader_is_a_type_error_saying_why(data):
    with loader(data) as ld:
        with pytest.raises(TypeError, match="packing loader"):
            len(ld)


def test_len_of_a_packing_loader_without_counted_rows_says_what_it_lacks(data):
    with loader(data) as ld:
        with pytest.raises(TypeError, match=r"packing loader \(pack=256\) without equalize.*equalize="):
            len(ld)
    with loader(data, equalize="pad", rank=0, world_size=1) as ld:
        with pytest.raises(TypeError, match=r"over one rank \(world_size=1"):
            len(ld)


@pytest.mark.parametrize("how", ["drop", "pad"])
def test_len_of_an_equalized_packing_loader_is_the_batches_each_pass_delivers(data, how):
    """Every rank's rows are counted at start-up: len() is, before each
    pass, the packed batches that pass delivers to this rank."""
    lens, got = {}, {}
    for rank in range(2):
        with loader(data, passes=None, equalize=how, rank=rank, world_size=2) as ld:
            for epoch in range(2):
                lens[(rank, epoch)] = len(ld)
                batches = [b for b in ld]
                assert {b.pass_ for b in batches} == {epoch}
                got[(rank, epoch)] = len(batches)
    assert lens == got and min(got.values()) > 0, (lens, got)
    # Every rank the same (what equalize is for).
    assert got[(0, 0)] == got[(1, 0)] and got[(0, 1)] == got[(1, 1)], got
    # passes=N: len() is one pass's.
    with loader(data, equalize=how, rank=1, world_size=2) as ld:
        n = len(ld)
        batches = list(ld)
    assert n == sum(1 for b in batches if b.pass_ == 0) == got[(1, 0)]


@pytest.mark.parametrize("kw, setting", [
    (dict(pack_window=30), r"pack_window=30"),
    (dict(pack_window=1000), r"pack_window=1000"),  # the default, given: refused too
    (dict(long_docs="truncate"), r'long_docs="truncate"'),
    (dict(long_docs="drop"), r'long_docs="drop"'),
])
def test_concat_refuses_the_packing_settings_it_would_ignore_naming_both(data, kw, setting):
    paths, tok_path, _ = data
    s = dict(files=paths, batch_size=4, tokenizer=tok_path, pack=256, pack_policy="concat", **kw)
    with pytest.raises(ValueError, match=setting + r'.*pack_policy="concat"'):
        feedline.Loader(**s)
    # The same settings with best-fit are used: accepted.
    with feedline.Loader(**dict(s, pack_policy="best-fit", passes=1)) as ld:
        assert sum(1 for _ in ld) > 0


def test_feedline_torch_gives_the_packed_fields_as_tensors(data):
    torch = pytest.importorskip("torch")
    import feedline.torch as ft

    paths, tok_path, expect = data
    with ft.DataLoader(files=paths, batch_size=4, shuffle=50, seed=3, rank=0, world_size=1,
                       pin_memory=False, tokenizer=tok_path, text_field="text", add_eos=True,
                       pack=256, pack_window=30) as loader:
        tokens = 0
        for b in loader:
            assert b["input_ids"].shape == (4, 256) and b["input_ids"].dtype == torch.int32
            cu = b["cu_seqlens"]
            assert cu.dim() == 1 and int(cu[0]) == 0 and int(cu[-1]) == 4 * 256
            tokens += int((b["segment_ids"] != 0).sum())
    assert tokens == sum(len(v) for v in expect.values())


@pytest.mark.parametrize("how", ["drop", "pad"])
@pytest.mark.parametrize("policy", ["best-fit", "concat"])
@pytest.mark.parametrize("det", [True, False])
def test_equalized_ranks_get_as_many_packed_rows_and_pad_gives_every_document_once(data, how, policy, det):
    _, _, expect = data
    ranks = []
    for rank in range(2):
        with loader(data, pack_policy=policy, equalize=how, rank=rank, world_size=2,
                    deterministic=det) as ld:
            ranks.append((list(ld), ld.stats()["packing"]))
    real_rows = []
    for batches, stats in ranks:
        rows = {0: 0, 1: 0}
        for b in batches:
            seg = np.asarray(b["segment_ids"])
            empty = (seg == 0).all(axis=1)
            assert b.mask.tolist() == (~empty).tolist()
            assert b.padded_rows == int(empty.sum())
            rows[b.pass_] += int((~empty).sum())
        real_rows.append(rows)
    for p in (0, 1):
        counts = [sum(1 for b in bs if b.pass_ == p) for bs, _ in ranks]
        assert counts[0] == counts[1] > 0, counts
    everything = [b for bs, _ in ranks for b in bs]
    if how == "pad":
        got = reassemble(everything, 256)
        for p in (0, 1):
            for (source, record), ids in expect.items():
                assert got.pop((p, source, record)) == ids, f"pass {p}: {source}#{record}"
        assert not got
        assert all(s["equalize_dropped_rows"] == 0 for _, s in ranks)
    else:
        # Drop: as many rows holding documents on each rank; each piece its
        # document's tokens, none twice.
        assert real_rows[0] == real_rows[1], real_rows
        seen = set()
        for b in everything:
            ids = np.asarray(b["input_ids"])
            at = {}
            for row, source, record, start, n, _ in b.segments:
                a = at.get(row, 0)
                assert ids[row, a:a + n].tolist() == expect[(source, record)][start:start + n]
                for t in range(start, start + n):
                    assert (b.pass_, source, record, t) not in seen
                    seen.add((b.pass_, source, record, t))
                at[row] = a + n
        dropped = sum(s["equalize_dropped_tokens"] for _, s in ranks)
        assert len(seen) + dropped == 2 * sum(len(v) for v in expect.values())


@pytest.mark.parametrize("det", [True, False])
def test_a_rank_resumed_from_its_state_dict_keeps_equal_rows_and_pad_every_document_once(data, det):
    _, _, expect = data
    kw = dict(pack_policy="best-fit", equalize="pad", world_size=2, deterministic=det)
    with loader(data, rank=0, **kw) as ld:
        rank0 = list(ld)
    with loader(data, rank=1, **kw) as ld:
        before = []
        for b in ld:
            before.append(b)
            if len(before) == 3:
                break
        state = json.loads(json.dumps(ld.state_dict()))
    with loader(data, rank=1, resume=state, **kw) as ld:
        after = list(ld)
        after += list(ld) if after and after[-1].pass_ == 0 else []
    rank1 = before + after
    for p in (0, 1):
        assert sum(1 for b in rank1 if b.pass_ == p) == sum(1 for b in rank0 if b.pass_ == p)
    got = reassemble(rank0 + rank1, 256)
    for p in (0, 1):
        for (source, record), ids in expect.items():
            assert got.pop((p, source, record)) == ids, f"pass {p}: {source}#{record}"
    assert not got


@pytest.mark.parametrize("policy", ["best-fit", "concat"])
def test_a_token_id_beyond_int32_is_a_bad_record_skipped_and_named(tmp_path, caplog, policy):
    """Issue 39: pre-tokenized int64 ids, one beyond int32: with
    on_error="skip" it is skipped (counted, named by file and record) and
    every other document packed once; by default the run fails naming the
    file, the record and the id."""
    import logging

    p = tmp_path / "ids.jsonl"
    docs = {}
    with open(p, "w") as out:
        for k in range(30):
            ids = [k * 1000 + t for t in range(k % 11 + 2)]
            if k == 13:
                ids[1] = 2 ** 31
            else:
                docs[(str(p), k)] = ids
            out.write(json.dumps({"input_ids": ids}) + "\n")
    # passes=1: with the endless default the next pass may already be packed
    # (and its bad record counted) when stats() is read.
    kw = dict(files=[str(p)], batch_size=2, shuffle=10, seed=1, pack=8, pack_policy=policy,
              passes=1, schema={"input_ids": ("int64", [None])})
    with caplog.at_level(logging.WARNING, logger="feedline"):
        with feedline.Loader(on_error="skip", **kw) as ld:
            batches = list(ld)
            stats = ld.stats()
    assert stats["bad_records"] == 1
    got = reassemble(batches, 8)
    assert got == {(0, s, r): ids for (s, r), ids in docs.items()}
    assert stats["packing"]["tokens"] == sum(len(v) for v in docs.values())
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping ")]
    assert len(skipped) == 1 and f"{p}: record 13" in skipped[0] and "2147483648" in skipped[0], skipped
    with pytest.raises(Exception, match=r"ids.jsonl: record 13.*input_ids.*token 1 of 4 is 2147483648"):
        with feedline.Loader(**kw) as ld:
            list(ld)
