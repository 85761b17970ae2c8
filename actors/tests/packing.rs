//! Packing through the `Loader`, on JSON Lines of token lists
//! (`input_ids`, ragged): every document's tokens once per pass,
//! reassembled from the packed batches' segments (by provenance, not by
//! count); the same packs whatever the reader and device counts in
//! deterministic mode; a stop, checkpoint and resume — by batch number
//! (deterministic: the resumed packs are the uninterrupted run's) and by
//! record (shuffled and elastic: the rest of every partly delivered
//! document, nothing twice); ranks equalized in packed rows (drop and
//! pad: the same rows on every rank, pad delivering every document once
//! across the ranks), each pass's batches known at start-up; the settings
//! packing refuses (concat: a window or a long-document policy, which it
//! would ignore); one long document packed within the batches in flight
//! (its packed batches made as they are taken, never all at once); and a
//! token id that does not fit i32, a bad record like any other (skipped and
//! named, or failing).

use std::collections::BTreeMap;
use std::path::Path;

use feedline_actors::ndarray::Ix2;
use feedline_actors::{
    Checkpoint, DType, Delivered, Equalize, ErrorPolicy, Loader, LoaderBuilder, Pack, Ragged,
    Schema,
};
use rand::{Rng, SeedableRng};

/// Token `t` of document `k` of file `f`.
fn token(f: usize, k: usize, t: usize) -> i64 {
    (f * 1_000_000 + k * 1_000 + t) as i64
}

/// Every document's tokens, by (file, record).
type Expected = BTreeMap<(String, u64), Vec<i64>>;

/// Pieces of documents by (pass, file, record): (first token, tokens).
type Pieces = BTreeMap<(u64, String, u64), Vec<(u64, Vec<i64>)>>;

/// `files` files of seeded document lengths (1..=90, one in ten 100..=250).
fn corpus(dir: &Path, files: usize, docs: usize, seed: u64) -> (Vec<String>, Expected) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut expect = BTreeMap::new();
    let mut paths = Vec::new();
    for f in 0..files {
        let path = dir.join(format!("docs{f}.jsonl"));
        let mut text = String::new();
        for k in 0..docs {
            let n = if rng.gen_ratio(1, 10) {
                rng.gen_range(100..=250)
            } else {
                rng.gen_range(1..=90)
            };
            let toks: Vec<i64> = (0..n).map(|t| token(f, k, t)).collect();
            text.push_str(&format!("{{\"input_ids\": {toks:?}}}\n"));
            expect.insert((path.to_str().unwrap().to_string(), k as u64), toks);
        }
        std::fs::write(&path, text).unwrap();
        paths.push(path.to_str().unwrap().to_string());
    }
    (paths, expect)
}

fn schema() -> Schema {
    Schema::builder()
        .ragged("input_ids", DType::I64, Ragged::Offsets)
        .build()
        .unwrap()
}

fn builder(
    files: &[String],
    pack: Pack,
    det: bool,
    readers: usize,
    devices: usize,
) -> LoaderBuilder {
    Loader::builder()
        .files(files.to_vec())
        .schema(schema())
        .batch(3)
        .shuffle(40)
        .seed(11)
        .passes(2)
        .readers(readers)
        .devices(devices)
        .chunk_records(16)
        .deterministic(det)
        .pack(pack)
}

/// A packed batch as compared: pass, seq, the input ids and the segments.
type Got = (u64, u64, Vec<i32>, Vec<(u32, String, u64, u64, u32)>);

fn got(d: &Delivered) -> Got {
    let ids = d
        .batch
        .view::<i32, Ix2>("input_ids")
        .unwrap()
        .iter()
        .copied()
        .collect();
    let segs = (d.batch.segments().unwrap().iter())
        .map(|s| {
            (
                s.row,
                s.origin.source.name().to_string(),
                s.origin.record,
                s.start,
                s.len,
            )
        })
        .collect();
    (d.pass, d.seq, ids, segs)
}

/// Each pass's documents put together from the segments' tokens: every
/// document of `expect` once, whole, in order.
fn assert_exactly_once(batches: &[Got], length: usize, expect: &Expected, passes: u64) {
    let mut docs = Pieces::new();
    for (pass, _, ids, segs) in batches {
        let mut at: BTreeMap<u32, usize> = BTreeMap::new();
        for (row, source, record, start, len) in segs {
            let a = at.entry(*row).or_default();
            let base = *row as usize * length + *a;
            let toks = ids[base..base + *len as usize]
                .iter()
                .map(|&t| t as i64)
                .collect();
            *a += *len as usize;
            docs.entry((*pass, source.clone(), *record))
                .or_default()
                .push((*start, toks));
        }
    }
    for pass in 0..passes {
        for ((source, record), tokens) in expect {
            let mut pieces = docs
                .remove(&(pass, source.clone(), *record))
                .unwrap_or_else(|| panic!("pass {pass}: {source} record {record} lost"));
            pieces.sort();
            let mut joined = Vec::new();
            for (start, t) in pieces {
                assert_eq!(
                    start as usize,
                    joined.len(),
                    "pass {pass}: {source}#{record}: a piece twice or a gap"
                );
                joined.extend(t);
            }
            assert_eq!(&joined, tokens, "pass {pass}: {source}#{record}");
        }
    }
    assert!(
        docs.is_empty(),
        "documents that are not in the files: {:?}",
        docs.keys().take(3).collect::<Vec<_>>()
    );
}

fn all(loader: Loader) -> Vec<Got> {
    loader.into_iter().map(|d| got(&d.unwrap())).collect()
}

fn take(mut loader: Loader, n: usize) -> (Vec<Got>, Checkpoint) {
    let mut out = Vec::new();
    let mut it = loader.iter();
    while out.len() < n {
        match it.next() {
            Some(d) => out.push(got(&d.unwrap())),
            None => break,
        }
    }
    let cp = loader.checkpoint().unwrap();
    let back = Checkpoint::from_json(&cp.to_json(), Path::new("cp.json")).unwrap();
    assert_eq!(back, cp);
    (out, back)
}

fn packs() -> [Pack; 3] {
    [
        Pack::best_fit(64).window(20),
        Pack::first_fit(64).window(7),
        Pack::concat(64),
    ]
}

#[test]
fn every_document_comes_once_per_pass_under_each_policy_and_reader_count() {
    let dir = tempfile::tempdir().unwrap();
    let (files, expect) = corpus(dir.path(), 3, 60, 1);
    for pack in packs() {
        for (det, readers, devices) in [(true, 1, 1), (false, 3, 2), (true, 2, 3)] {
            let got = all(builder(&files, pack.clone(), det, readers, devices)
                .build()
                .unwrap());
            assert!(got.iter().all(|(_, _, ids, _)| ids.len() == 3 * 64));
            assert_exactly_once(&got, 64, &expect, 2);
        }
    }
}

#[test]
fn deterministic_packs_do_not_depend_on_reader_or_device_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 4, 40, 2);
    for pack in packs() {
        let sorted = |r, d| {
            let mut g = all(builder(&files, pack.clone(), true, r, d).build().unwrap());
            g.sort_by_key(|x| (x.0, x.1));
            g
        };
        let one = sorted(1, 1);
        assert_eq!(one, sorted(3, 1), "{pack:?}");
        assert_eq!(one, sorted(2, 3), "{pack:?}");
    }
}

#[test]
fn a_deterministic_resume_gives_the_uninterrupted_runs_packs() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 3, 50, 3);
    for pack in packs() {
        let full = all(builder(&files, pack.clone(), true, 2, 1).build().unwrap());
        for stop in [1, full.len() / 3, full.len() / 2 + 1, full.len() - 1] {
            let (before, cp) = take(
                builder(&files, pack.clone(), true, 2, 1).build().unwrap(),
                stop,
            );
            let after = all(builder(&files, pack.clone(), true, 3, 1)
                .resume(cp)
                .build()
                .unwrap());
            let mut joined = before;
            joined.extend(after);
            assert_eq!(joined, full, "{pack:?}, stop at {stop}");
        }
    }
}

#[test]
fn a_shuffled_or_elastic_resume_delivers_the_rest_of_every_partly_delivered_document_once() {
    for seed in 0..6u64 {
        let dir = tempfile::tempdir().unwrap();
        let (files, expect) = corpus(dir.path(), 3, 50, 10 + seed);
        for pack in packs() {
            let full = all(builder(&files, pack.clone(), false, 2, 1).build().unwrap());
            let stop = 1 + (seed as usize * 7) % (full.len() / 2);
            let (mut got, cp) = take(
                builder(&files, pack.clone(), false, 2, 1).build().unwrap(),
                stop,
            );
            // Documents partly delivered at the stop are in the checkpoint.
            if seed == 0 && pack.policy == feedline_actors::PackPolicy::Concat {
                assert!(
                    cp.passes.iter().any(|p| !p.pieces.is_empty()),
                    "no partly delivered document at the stop"
                );
            }
            got.extend(all(builder(&files, pack.clone(), false, 1, 1)
                .resume(cp.clone())
                .build()
                .unwrap()));
            assert_exactly_once(&got, 64, &expect, 2);
            // Elastic: the same checkpoint resumed by two ranks.
            let (mut got, cp) = take(
                builder(&files, pack.clone(), false, 2, 1).build().unwrap(),
                stop,
            );
            for rank in 0..2 {
                got.extend(
                    all(builder(&files, pack.clone(), false, 2, 1)
                        .shard(rank, 2)
                        .resume(cp.clone())
                        .build()
                        .unwrap())
                    .into_iter()
                    .filter(|g| g.0 == 0),
                );
            }
            // Pass 1 runs whole on each new rank's shard: checked for pass 0 only.
            let pass0: Vec<Got> = got.into_iter().filter(|g| g.0 == 0).collect();
            assert_exactly_once(&pass0, 64, &expect, 1);
        }
    }
}

#[test]
fn packing_refuses_what_it_cannot_do_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 1, 5, 4);
    let err = |b: LoaderBuilder| match b.build() {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let e = err(builder(&files, Pack::best_fit(64), false, 1, 1).drop_last(true));
    assert!(e.contains("drop_last"), "{e}");
    let e = err(builder(
        &files,
        Pack::best_fit(64).field("tokens"),
        false,
        1,
        1,
    ));
    assert!(
        e.contains("no field `tokens`") && e.contains("input_ids"),
        "{e}"
    );
    let e = err(builder(&files, Pack::best_fit(0), false, 1, 1));
    assert!(e.contains("pack length"), "{e}");
    let e = err(builder(&files, Pack::best_fit(8).window(0), false, 1, 1));
    assert!(e.contains("window"), "{e}");
    let text = Schema::builder()
        .field("input_ids", DType::I64, [3])
        .build()
        .unwrap();
    let e = err(builder(&files, Pack::best_fit(8), false, 1, 1).schema(text));
    assert!(e.contains("expected a ragged list of token ids"), "{e}");
}

#[test]
fn a_resume_under_other_packing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 2, 30, 5);
    let (_, cp) = take(
        builder(&files, Pack::best_fit(64), true, 1, 1)
            .build()
            .unwrap(),
        2,
    );
    let e = match builder(&files, Pack::best_fit(128), true, 1, 1)
        .resume(cp)
        .build()
    {
        Ok(_) => panic!("a resume under other packing accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("pack"), "{e}");
}

/// Rows holding documents per pass, and every piece's tokens checked
/// against the files (no token of a document twice across `batches`).
fn real_rows_checked(batches: &[Got], length: usize, expect: &Expected) -> BTreeMap<u64, usize> {
    let mut rows: BTreeMap<u64, usize> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for (pass, _, ids, segs) in batches {
        let mut at: BTreeMap<u32, usize> = BTreeMap::new();
        for (row, source, record, start, len) in segs {
            let a = at.entry(*row).or_default();
            let base = *row as usize * length + *a;
            *a += *len as usize;
            let want = &expect[&(source.clone(), *record)];
            for (k, &t) in ids[base..base + *len as usize].iter().enumerate() {
                let pos = *start as usize + k;
                assert_eq!(t as i64, want[pos], "{source}#{record} token {pos}");
                assert!(
                    seen.insert((*pass, source.clone(), *record, pos)),
                    "{source}#{record} token {pos} twice"
                );
            }
        }
        *rows.entry(*pass).or_default() += at.len();
    }
    rows
}

#[test]
fn equalized_ranks_get_the_same_packed_rows_and_pad_delivers_every_document_once() {
    let dir = tempfile::tempdir().unwrap();
    // 5 files over 3 ranks: unequal shares of tokens.
    let (files, expect) = corpus(dir.path(), 5, 30, 6);
    for pack in packs() {
        for how in [Equalize::Drop, Equalize::Pad] {
            for (det, readers) in [(true, 2), (false, 3)] {
                let ranks: Vec<Vec<Got>> = (0..3)
                    .map(|r| {
                        all(builder(&files, pack.clone(), det, readers, 1)
                            .shard(r, 3)
                            .equalize(how)
                            .build()
                            .unwrap())
                    })
                    .collect();
                let what = format!("{pack:?} {how:?} deterministic {det}");
                for pass in 0..2 {
                    let counts: Vec<usize> = ranks
                        .iter()
                        .map(|g| g.iter().filter(|b| b.0 == pass).count())
                        .collect();
                    assert!(
                        counts.iter().all(|&c| c == counts[0] && c > 0),
                        "{what}: batches per rank {counts:?}"
                    );
                }
                assert!(ranks
                    .iter()
                    .flatten()
                    .all(|(_, _, ids, _)| ids.len() == 3 * 64));
                let real: Vec<BTreeMap<u64, usize>> = ranks
                    .iter()
                    .map(|g| real_rows_checked(g, 64, &expect))
                    .collect();
                let union: Vec<Got> = ranks.iter().flatten().cloned().collect();
                if how == Equalize::Pad {
                    assert_exactly_once(&union, 64, &expect, 2);
                } else {
                    // Drop: every rank's rows holding documents are as many.
                    assert!(real.iter().all(|r| *r == real[0]), "{what}: rows {real:?}");
                }
                real_rows_checked(&union, 64, &expect);
            }
        }
    }
}

#[test]
fn a_deterministic_resume_of_equalized_packing_gives_the_uninterrupted_runs_packs() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 5, 30, 7);
    for pack in packs() {
        for how in [Equalize::Drop, Equalize::Pad] {
            let b = |readers| {
                builder(&files, pack.clone(), true, readers, 1)
                    .shard(1, 3)
                    .equalize(how)
            };
            let full = all(b(2).build().unwrap());
            for stop in [1, full.len() / 2, full.len() - 1] {
                let (mut joined, cp) = take(b(2).build().unwrap(), stop);
                joined.extend(all(b(3).resume(cp).build().unwrap()));
                assert_eq!(joined, full, "{pack:?} {how:?} stop at {stop}");
            }
            // Another rank (elastic): the rows left are not counted: refused.
            let mut elastic = builder(&files, pack.clone(), true, 2, 1)
                .shard(0, 2)
                .equalize(how);
            for rank in 0..3 {
                let old = builder(&files, pack.clone(), true, 2, 1)
                    .shard(rank, 3)
                    .equalize(how);
                elastic = elastic.resume(take(old.build().unwrap(), 1).1);
            }
            let e = match elastic.build() {
                Ok(_) => panic!("an elastic resume of equalized packing accepted"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("same shard") && e.contains("equalize"), "{e}");
        }
    }
}

#[test]
fn a_shuffled_resume_of_equalized_packing_keeps_the_rows_equal_and_pad_every_document_once() {
    let dir = tempfile::tempdir().unwrap();
    let (files, expect) = corpus(dir.path(), 5, 30, 8);
    for pack in packs() {
        for how in [Equalize::Drop, Equalize::Pad] {
            let b = |rank| {
                builder(&files, pack.clone(), false, 2, 1)
                    .shard(rank, 3)
                    .equalize(how)
            };
            let rank0 = all(b(0).build().unwrap());
            let mut others = rank0.clone();
            others.extend(all(b(2).build().unwrap()));
            let per_pass = |g: &[Got], pass| g.iter().filter(|x| x.0 == pass).count();
            let rows0 = real_rows_checked(&rank0, 64, &expect);
            for stop in [1, 4, 9] {
                let (mut mine, cp) = take(b(1).build().unwrap(), stop);
                mine.extend(all(b(1).resume(cp).build().unwrap()));
                let what = format!("{pack:?} {how:?} stop at {stop}");
                for pass in 0..2 {
                    assert_eq!(
                        per_pass(&mine, pass),
                        per_pass(&rank0, pass),
                        "{what}: pass {pass} batches"
                    );
                }
                let mut union = others.clone();
                union.extend(mine.iter().cloned());
                real_rows_checked(&union, 64, &expect);
                if how == Equalize::Pad {
                    assert_exactly_once(&union, 64, &expect, 2);
                } else {
                    // Rows holding documents: as many as rank 0's, per pass.
                    assert_eq!(real_rows_checked(&mine, 64, &expect), rows0, "{what}");
                }
            }
        }
    }
}

/// One document of `n` tokens (`token(0, 0, t)`) in a file of its own.
fn one_document(dir: &Path, n: usize) -> (Vec<String>, Expected) {
    let path = dir.join(format!("long{n}.jsonl"));
    let toks: Vec<i64> = (0..n).map(|t| token(0, 0, t)).collect();
    std::fs::write(&path, format!("{{\"input_ids\": {toks:?}}}\n")).unwrap();
    let name = path.to_str().unwrap().to_string();
    (vec![name.clone()], BTreeMap::from([((name, 0), toks)]))
}

#[test]
fn one_long_document_is_packed_within_the_batches_in_flight() {
    // Issue 39: the packed batches of one made batch were all made at once
    // (62,500 for 8 M tokens), past `batches_in_flight`. Now they are made
    // as the consumers take them: at most K wait for the feed queue, one
    // made batch (the document) is held to pack, however long it is.
    let dir = tempfile::tempdir().unwrap();
    for n in [20_000, 100_000, 400_000] {
        let (files, expect) = one_document(dir.path(), n);
        for (pack, k) in [
            (Pack::best_fit(128), 1),
            (Pack::first_fit(64).window(3), 2),
            (Pack::concat(100), 3),
        ] {
            let loader = Loader::builder()
                .files(files.clone())
                .schema(schema())
                .batch(2)
                .capacity(1)
                .batches_in_flight(k)
                .passes(1)
                .pack(pack.clone())
                .build()
                .unwrap();
            let stats = loader.stats_handle();
            let what = format!("{n} tokens, {pack:?}, {k} in flight");
            let mut got = Vec::new();
            for d in loader {
                got.push(self::got(&d.unwrap()));
                // The rows made never run ahead of the batches taken by
                // more than the batches held (2 rows each): the feed
                // queue's (capacity 1), the K waiting, one taken ahead by
                // the consumer, one being made — and a row of the next.
                let made = stats.snapshot().packing.map_or(0, |p| p.counts.rows);
                let ahead = 2 * (got.len() as u64 + k as u64 + 4);
                assert!(
                    made <= ahead,
                    "{what}: {made} rows made, {} batches taken",
                    got.len()
                );
            }
            let rows = n.div_ceil(pack.length);
            assert_eq!(got.len(), rows.div_ceil(2), "{what}");
            assert_exactly_once(&got, pack.length, &expect, 1);
            let s = stats.snapshot();
            assert!(
                s.made_waiting_peak <= k as u64 && s.made_waiting_peak > 0,
                "{what}: {} packed batches waited at once",
                s.made_waiting_peak
            );
            let p = s.packing.unwrap();
            assert_eq!(p.inputs_held_peak, 1, "{what}");
            assert_eq!(p.tokens_held_peak, n as u64, "{what}");
            assert_eq!(p.counts.rows, rows as u64 + (rows % 2) as u64, "{what}");
        }
    }
}

/// `files` files of `docs` documents, document `k` of file `f` of
/// `token(f, k, t)` ids; in file 0, the documents of `bad` hold a token id
/// that does not fit i32 (3e9 or -2^31 - 1). The files, the good
/// documents, and file 0.
fn with_bad_tokens(
    dir: &Path,
    files: usize,
    docs: usize,
    bad: &[usize],
) -> (Vec<String>, Expected, String) {
    let mut names = Vec::new();
    let mut expect = BTreeMap::new();
    for f in 0..files {
        let path = dir.join(format!("ids{f}.jsonl"));
        let name = path.to_str().unwrap().to_string();
        let mut text = String::new();
        for k in 0..docs {
            let mut toks: Vec<i64> = (0..(k % 90 + 5)).map(|t| token(f, k, t)).collect();
            if f == 0 && bad.contains(&k) {
                toks[3] = if k % 2 == 0 {
                    3_000_000_000
                } else {
                    -2_147_483_649
                };
            } else {
                expect.insert((name.clone(), k as u64), toks.clone());
            }
            text.push_str(&format!("{{\"input_ids\": {toks:?}}}\n"));
        }
        std::fs::write(&path, text).unwrap();
        names.push(name);
    }
    let first = names[0].clone();
    (names, expect, first)
}

#[test]
fn a_token_id_beyond_i32_is_a_bad_record_skipped_and_named_or_failing() {
    let dir = tempfile::tempdir().unwrap();
    let (files, expect, name) = with_bad_tokens(dir.path(), 2, 60, &[7, 30]);
    let one = dir.path().join("one");
    std::fs::create_dir(&one).unwrap();
    let (one_bad, _, one_name) = with_bad_tokens(&one, 1, 20, &[7]);
    for pack in packs() {
        for det in [true, false] {
            let loader = builder(&files, pack.clone(), det, 2, 1)
                .error_policy(ErrorPolicy::skip())
                .build()
                .unwrap();
            let stats = loader.stats_handle();
            let got = all(loader);
            // Every other document once per pass, whole.
            assert_exactly_once(&got, 64, &expect, 2);
            let s = stats.snapshot();
            assert_eq!(s.bad_records, 4, "{pack:?}: 2 bad documents × 2 passes");
            let mut skipped: Vec<(String, u64)> = stats
                .skipped()
                .iter()
                .map(|r| {
                    assert!(
                        r.error.contains("input_ids")
                            && (r.error.contains("3000000000") || r.error.contains("-2147483649")),
                        "{r}"
                    );
                    (r.source.clone(), r.record)
                })
                .collect();
            skipped.sort();
            let want = |k| (name.clone(), k);
            assert_eq!(skipped, [want(7), want(7), want(30), want(30)], "{pack:?}");
        }
        // Under fail the run stops with the error naming file, record, field and id.
        let e = builder(&one_bad, pack.clone(), true, 1, 1)
            .build()
            .unwrap()
            .into_iter()
            .find_map(|d| d.err())
            .expect("the run fails")
            .to_string();
        assert!(
            e.contains(&one_name)
                && e.contains("record 7")
                && e.contains("input_ids")
                && e.contains("token 3 of 12 is -2147483649"),
            "{e}"
        );
    }
}

#[test]
fn equalized_ranks_count_no_tokens_of_a_skipped_document() {
    // The rows every rank delivers are counted from the tokens before the
    // pass: a document skipped for its ids is no document there either, so
    // pad delivers every other document once and no quota is missed.
    let dir = tempfile::tempdir().unwrap();
    let (files, expect, _) = with_bad_tokens(dir.path(), 4, 30, &[7, 20, 24]);
    for pack in packs() {
        let mut union = Vec::new();
        for rank in 0..2 {
            union.extend(all(builder(&files, pack.clone(), false, 2, 1)
                .shard(rank, 2)
                .equalize(Equalize::Pad)
                .error_policy(ErrorPolicy::skip())
                .build()
                .unwrap()));
        }
        assert_exactly_once(&union, 64, &expect, 2);
    }
}

#[test]
fn concat_refuses_a_window_or_a_long_document_policy_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 1, 5, 4);
    for (pack, setting) in [
        (Pack::concat(64).window(16), "pack_window(16)"),
        (
            Pack::concat(64).long_docs(feedline_actors::LongDocs::Truncate),
            "long_docs(\"truncate\")",
        ),
        (
            Pack::concat(64).long_docs(feedline_actors::LongDocs::Drop),
            "long_docs(\"drop\")",
        ),
    ] {
        let e = match builder(&files, pack.clone(), false, 1, 1).build() {
            Ok(_) => panic!("{pack:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains(setting) && e.contains("pack_policy(\"concat\")"),
            "{pack:?}: {e}"
        );
        // The same setting is best-fit's: used, accepted.
        let best_fit = Pack {
            policy: feedline_actors::PackPolicy::BestFit,
            ..pack
        };
        assert!(!all(builder(&files, best_fit, false, 1, 1).build().unwrap()).is_empty());
    }
}

#[test]
fn an_equalized_packing_loader_knows_each_passs_batches_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    // 5 files over 3 ranks: unequal shares of tokens.
    let (files, _) = corpus(dir.path(), 5, 30, 6);
    for how in [Equalize::Drop, Equalize::Pad] {
        for det in [true, false] {
            for rank in 0..3 {
                let loader = builder(&files, Pack::best_fit(64).window(20), det, 2, 1)
                    .shard(rank, 3)
                    .equalize(how)
                    .build()
                    .unwrap();
                let known: Vec<Option<u64>> =
                    (0..2).map(|p| loader.packed_batches_in_pass(p)).collect();
                let got = all(loader);
                let delivered: Vec<Option<u64>> = (0..2)
                    .map(|p| Some(got.iter().filter(|b| b.0 == p).count() as u64))
                    .collect();
                assert_eq!(
                    known, delivered,
                    "{how:?} deterministic {det} rank {rank}: known at start-up vs delivered"
                );
            }
        }
    }
    // Not counted: packing alone, and equalize over one rank.
    let alone = builder(&files, Pack::best_fit(64), false, 1, 1)
        .build()
        .unwrap();
    assert_eq!(alone.packed_batches_in_pass(0), None);
    let one = (builder(&files, Pack::best_fit(64), false, 1, 1).equalize(Equalize::Pad))
        .build()
        .unwrap();
    assert_eq!(one.packed_batches_in_pass(0), None);
}
