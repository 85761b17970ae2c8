//! Packing through the `Loader` (issue 30), on JSON Lines of token lists
//! (`input_ids`, ragged): every document's tokens once per pass,
//! reassembled from the packed batches' segments (by provenance, not by
//! count); the same packs whatever the reader and device counts in
//! deterministic mode; a stop, checkpoint and resume — by batch number
//! (deterministic: the resumed packs are the uninterrupted run's) and by
//! record (shuffled and elastic: the rest of every partly delivered
//! document, nothing twice); ranks equalized in packed rows (drop and
//! pad: the same rows on every rank, pad delivering every document once
//! across the ranks), each pass's batches known at start-up; and the
//! settings packing refuses (concat: a window or a long-document policy,
//! which it would ignore).

use std::collections::BTreeMap;
use std::path::Path;

use feedline_actors::ndarray::Ix2;
use feedline_actors::{
    Checkpoint, DType, Delivered, Equalize, Loader, LoaderBuilder, Pack, Ragged, Schema,
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

#[test]
fn concat_refuses_a_window_or_a_long_document_policy_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = corpus(dir.path(), 1, 5, 4);
    for (pack, setting) in [
        (Pack::concat(64).window(16), "pack_window=16"),
        (
            Pack::concat(64).long_docs(feedline_actors::LongDocs::Truncate),
            "long_docs=\"truncate\"",
        ),
        (
            Pack::concat(64).long_docs(feedline_actors::LongDocs::Drop),
            "long_docs=\"drop\"",
        ),
    ] {
        let e = match builder(&files, pack.clone(), false, 1, 1).build() {
            Ok(_) => panic!("{pack:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains(setting) && e.contains("pack_policy=\"concat\""),
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
