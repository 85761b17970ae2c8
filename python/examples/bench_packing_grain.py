"""Workload D, language-model input (issue 30): JSON Lines of Rust sources
-> tokenizer.json (byte-level BPE of 16,384) + EOS -> best-fit packing into
rows of 4,096 -> batches of 8 rows, through feedline and through Grain
(`BestFitPackIterDataset` over a Grain pipeline using the same tokenizer
through Python's `tokenizers`). One RESULT line per pass, as the peers'
harness prints them.

    python bench_packing_grain.py --make-data [--data DIR]    # once (tokenizers needed)
    python bench_packing_grain.py --loader feedline|grain [--data DIR] [--warmup 1 --repeats 3]

The data: every `.rs` file of the local cargo registry of at most 256 KiB,
ranked by sha256 of its path under registry/src, taken while the total
stays within 32 MB, sorted by path, in 8 files; a byte-level BPE of 16,384
tokens trained on them by Python's `tokenizers`.

Checks: every document's tokens exactly once (feedline: from batch.segments
against the expected per-document counts; grain: the real-token total and
the number of document pieces), expected counts from Python tokenizers
(cached in expected.json next to this script).
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

DATA = os.environ.get("FEEDLINE_TEXT_DATA", "/tmp/peers/data/text")
L = 4096
ROWS = 8


def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def manifest():
    with open(os.path.join(DATA, "manifest.json")) as f:
        return json.load(f)


def files():
    return [os.path.join(DATA, f["file"]) for f in manifest()["files"]]


def make_data(out):
    """The corpus and its tokenizer (see the module docs)."""
    import glob
    import hashlib
    import tokenizers
    root = os.path.expanduser("~/.cargo/registry/src")
    cands = []
    for p in glob.glob(os.path.join(root, "**", "*.rs"), recursive=True):
        try:
            if os.path.getsize(p) > 256 * 1024:
                continue
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            rel = os.path.relpath(p, root)
            cands.append((hashlib.sha256(rel.encode()).hexdigest(), rel, text))
    cands.sort()
    chosen, total = [], 0
    for _, rel, text in cands:
        n = len(text.encode())
        if total + n > 32_000_000:
            break
        chosen.append((rel, text))
        total += n
    chosen.sort()
    os.makedirs(out, exist_ok=True)
    per = (len(chosen) + 7) // 8
    names = []
    for k in range(8):
        name = f"text-{k:05d}.jsonl"
        with open(os.path.join(out, name), "w") as f:
            for _, text in chosen[k * per:(k + 1) * per]:
                f.write(json.dumps({"text": text}) + "\n")
        names.append({"file": name})
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=16384, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([t for _, t in chosen], trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"docs": len(chosen), "text_bytes": total, "files": names}, f)
    print(f"{len(chosen)} documents, {total} bytes, in {out}")


def expected():
    path = os.path.join(DATA, "expected.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(os.path.join(DATA, "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    out = {}
    for f in files():
        with open(f) as fh:
            for k, line in enumerate(fh):
                ids = tok.encode(json.loads(line)["text"]).ids + [eos]
                out[f"{os.path.basename(f)}:{k}"] = len(ids)
    with open(path, "w") as fh:
        json.dump(out, fh)
    return out


def feedline_pass(exp, epoch_loader):
    seen = {}
    tokens = rows = 0
    first = None
    t0 = time.perf_counter()
    for b in epoch_loader:
        if first is None:
            first = time.perf_counter() - t0
        ids = b["input_ids"]
        rows += ids.shape[0]
        for (_row, src, rec, start, length, doc_tokens) in b.segments:
            key = f"{os.path.basename(src)}:{rec}"
            seen[key] = seen.get(key, 0) + length
            tokens += length
    ok = seen == exp
    return tokens, rows, first, "ok" if ok else f"FAIL {len(seen)} docs seen of {len(exp)}"


def run_feedline(args, exp):
    import feedline
    loader = feedline.Loader(files(), batch_size=ROWS, shuffle=1000, readers=2, workers=2,
                             tokenizer=os.path.join(DATA, "tokenizer.json"), text_field="text",
                             add_eos=True, pack=L, pack_window=1000, pack_policy="best-fit")
    for i in range(args.warmup + args.repeats):
        c0, t0 = cpu(), time.perf_counter()
        tokens, rows, first, check = feedline_pass(exp, loader)
        report(args, i, time.perf_counter() - t0, cpu() - c0, tokens, rows, first, check,
               {"loader": "feedline", "version": feedline.__version__ if hasattr(feedline, "__version__") else "?"})


def run_grain(args, exp):
    import grain
    import grain.python as gp
    from grain import experimental as gx
    import tokenizers

    docs = []
    for f in files():
        with open(f) as fh:
            docs.extend(fh.readlines())

    class Tok(gp.MapTransform):
        def __init__(self):
            self.tok = None

        def map(self, line):
            if self.tok is None:
                self.tok = tokenizers.Tokenizer.from_file(os.path.join(DATA, "tokenizer.json"))
                self.eos = self.tok.token_to_id("<|endoftext|>")
            ids = self.tok.encode(json.loads(line)["text"]).ids + [self.eos]
            return np.asarray(ids, dtype=np.int32)

    class Split(gx.FlatMapTransform):
        max_fan_out = 512

        def flat_map(self, ids):
            return [{"input_ids": ids[k:k + L]} for k in range(0, len(ids), L)]

    want_tokens = sum(exp.values())
    want_pieces = sum((n + L - 1) // L for n in exp.values())
    for i in range(args.warmup + args.repeats):
        c0, t0 = cpu(), time.perf_counter()
        ds = gp.MapDataset.source(docs).shuffle(seed=1234 + i).map(Tok()).to_iter_dataset()
        ds = gx.FlatMapIterDataset(ds, Split())
        ds = gx.BestFitPackIterDataset(ds, length_struct={"input_ids": L}, num_packing_bins=256)
        ds = ds.batch(ROWS).mp_prefetch(gp.MultiprocessingOptions(num_workers=2))
        tokens = rows = pieces = 0
        first = None
        for b in ds:
            if first is None:
                first = time.perf_counter() - t0
            seg = b["input_ids_segment_ids"]
            rows += seg.shape[0]
            tokens += int((seg > 0).sum())
            pieces += int(seg.max(axis=1).sum())
        check = "ok" if (tokens, pieces) == (want_tokens, want_pieces) else \
            f"FAIL tokens {tokens}/{want_tokens} pieces {pieces}/{want_pieces}"
        report(args, i, time.perf_counter() - t0, cpu() - c0, tokens, rows, first, check,
               {"loader": "grain", "version": grain.__version__ if hasattr(grain, "__version__") else "?",
                "num_packing_bins": 256})
        del ds


def report(args, i, dt, c, tokens, rows, first, check, extra):
    phase = "warmup" if i < args.warmup else "timed"
    rec = {"dataset": "D", "variant": "bestfit_4096", "phase": phase, "run": i, "seconds": round(dt, 3),
           "cpu_seconds": round(c, 2), "tokens": tokens, "rows": rows, "tokens_per_s": round(tokens / dt),
           "tokens_per_cpu_s": round(tokens / c), "fill": round(tokens / (rows * L), 4),
           "first_batch_seconds": round(first or 0, 3), "check": check,
           "loadavg": os.getloadavg()[0]}
    rec.update(extra)
    print("RESULT " + json.dumps(rec, sort_keys=True), flush=True)
    print(f"[{extra['loader']}] {phase} {i}: {dt:.2f}s {tokens / dt / 1e6:.3f} Mtok/s cpu {c:.1f}s "
          f"({tokens / c / 1e6:.3f} Mtok/CPU-s) fill {rec['fill']} load {os.getloadavg()} {check}",
          file=sys.stderr, flush=True)


def main():
    global DATA
    ap = argparse.ArgumentParser()
    ap.add_argument("--loader", choices=["feedline", "grain", "expected"])
    ap.add_argument("--make-data", action="store_true", help="write the corpus and tokenizer into --data")
    ap.add_argument("--data", help=f"the corpus directory (default $FEEDLINE_TEXT_DATA or {DATA})")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    DATA = args.data or DATA
    if args.make_data:
        make_data(DATA)
        return
    if not args.loader:
        ap.error("--loader or --make-data")
    exp = expected()
    if args.loader == "feedline":
        run_feedline(args, exp)
    elif args.loader == "grain":
        run_grain(args, exp)
    else:
        print(len(exp), sum(exp.values()))


if __name__ == "__main__":
    main()
