//! The packer's promises: every token of every document once, in order;
//! no document of at most `L` tokens cut (best-fit, first-fit); ids,
//! positions and `cu_seqlens` agreeing; the window bound; determinism;
//! a resume that leaves out exactly what was delivered.

use std::collections::BTreeMap;

use ndarray::Ix2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::SourceId;

/// `docs` documents of seeded lengths (1..=max, a few longer than `long`),
/// document `k`'s token `t` = k * 100_000 + t.
fn corpus(seed: u64, docs: usize, max: usize, long: usize) -> Vec<(Origin, Vec<i32>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let src = SourceId::intern("pack-corpus.jsonl");
    (0..docs)
        .map(|k| {
            let n = if rng.gen_ratio(1, 20) {
                rng.gen_range(long..long * 3)
            } else {
                rng.gen_range(0..=max)
            };
            let tokens = (0..n).map(|t| (k * 100_000 + t) as i32).collect();
            (Origin::new(src, k as u64), tokens)
        })
        .collect()
}

fn run(pack: Pack, b: usize, docs: &[(Origin, Vec<i32>)]) -> (Vec<Batch>, PackStats) {
    let length = pack.length;
    let mut p = Packer::new(pack, b).unwrap();
    let mut out = Vec::new();
    for (o, t) in docs {
        p.push(*o, t, None);
        while let Some(rows) = p.pop() {
            out.push(rows.into_batch(length).unwrap());
        }
    }
    for rows in p.finish() {
        out.push(rows.into_batch(length).unwrap());
    }
    (out, p.stats())
}

/// Each document's tokens put together from the segments of `batches`,
/// checking no token comes twice.
fn reassemble(batches: &[Batch], length: usize) -> BTreeMap<Origin, Vec<(u64, Vec<i32>)>> {
    let mut docs: BTreeMap<Origin, Vec<(u64, Vec<i32>)>> = BTreeMap::new();
    for b in batches {
        let ids = b.view::<i32, Ix2>("input_ids").unwrap();
        let mut at = vec![0usize; b.len()];
        for s in b.segments().unwrap() {
            let r = s.row as usize;
            let toks = ids.row(r).to_vec()[at[r]..at[r] + s.len as usize].to_vec();
            at[r] += s.len as usize;
            assert!(at[r] <= length);
            docs.entry(s.origin).or_default().push((s.start, toks));
        }
    }
    docs
}

fn assert_exactly_once(docs: &[(Origin, Vec<i32>)], got: &BTreeMap<Origin, Vec<(u64, Vec<i32>)>>) {
    for (o, tokens) in docs {
        if tokens.is_empty() {
            assert!(!got.contains_key(o), "empty document {o:?} delivered");
            continue;
        }
        let mut pieces = got.get(o).cloned().unwrap_or_else(|| panic!("{o:?} lost"));
        pieces.sort();
        let mut joined = Vec::new();
        for (start, toks) in pieces {
            assert_eq!(
                start as usize,
                joined.len(),
                "{o:?}: a gap or a token twice"
            );
            joined.extend(toks);
        }
        assert_eq!(&joined, tokens, "{o:?}: tokens differ");
    }
    assert_eq!(
        got.len(),
        docs.iter().filter(|(_, t)| !t.is_empty()).count()
    );
}

#[test]
fn every_token_of_every_document_comes_once_in_order_under_each_policy() {
    for seed in 0..12 {
        let docs = corpus(seed, 400, 300, 600);
        for pack in policies(256, 50) {
            let (batches, stats) = run(pack.clone(), 4, &docs);
            let got = reassemble(&batches, 256);
            assert_exactly_once(&docs, &got);
            let tokens: usize = docs.iter().map(|(_, t)| t.len()).sum();
            assert_eq!(stats.tokens as usize, tokens, "{pack:?}");
            assert!(batches.iter().all(|b| b.len() == 4));
        }
    }
}

#[test]
fn best_fit_and_first_fit_never_cut_a_document_that_fits_a_row() {
    for seed in 0..12 {
        let docs = corpus(seed, 400, 256, 600);
        for pack in [
            Pack::best_fit(256).window(30),
            Pack::first_fit(256).window(30),
        ] {
            let (batches, stats) = run(pack, 3, &docs);
            let got = reassemble(&batches, 256);
            for (o, t) in &docs {
                if !t.is_empty() && t.len() <= 256 {
                    assert_eq!(got[o].len(), 1, "{o:?} of {} tokens cut", t.len());
                }
            }
            assert_eq!(stats.documents_cut, 0);
        }
        // Concat does cut (and says how many).
        let (_, stats) = run(Pack::concat(256), 3, &docs);
        assert!(stats.documents_cut > 0);
    }
}

#[test]
fn segment_ids_positions_and_cu_seqlens_agree() {
    let docs = corpus(3, 300, 200, 500);
    for pack in [Pack::best_fit(128).window(20), Pack::concat(128)] {
        let (batches, _) = run(pack, 5, &docs);
        for b in &batches {
            let seg = b.view::<i32, Ix2>("segment_ids").unwrap();
            let pos = b.view::<i32, Ix2>("position_ids").unwrap();
            let cu = b.i32("cu_seqlens").unwrap();
            let cu: Vec<i32> = cu.iter().copied().collect();
            // Runs of equal segment ids (padding its own run) are the
            // cu_seqlens; positions count within each run of a document.
            let mut expect = vec![0i32];
            let mut max = 0;
            for r in 0..b.len() {
                let row = seg.row(r);
                let mut start = 0;
                for i in 1..=128 {
                    if i == 128 || row[i] != row[start] {
                        expect.push((r * 128 + i) as i32);
                        max = max.max(i - start);
                        for k in start..i {
                            let p = if row[start] == 0 {
                                0
                            } else {
                                (k - start) as i32
                            };
                            assert_eq!(pos[[r, k]], p);
                        }
                        start = i;
                    }
                }
                // Segment ids count 1, 2, … then padding 0 at the end only.
                let ids: Vec<i32> = row.iter().copied().collect();
                let mut dedup = ids.clone();
                dedup.dedup();
                let real: Vec<i32> = dedup.iter().copied().filter(|&x| x != 0).collect();
                assert_eq!(real, (1..=real.len() as i32).collect::<Vec<_>>());
                if let Some(z) = ids.iter().position(|&x| x == 0) {
                    assert!(ids[z..].iter().all(|&x| x == 0));
                }
            }
            assert_eq!(cu, expect);
            let m = b.view::<i32, ndarray::Ix1>("max_seqlen").unwrap();
            assert!(m.iter().all(|&x| x as usize == max));
            // Segments of a row sum to its real tokens.
            for s in b.segments().unwrap() {
                assert!(s.len > 0);
            }
        }
    }
}

#[test]
fn the_window_bounds_the_documents_held() {
    let docs = corpus(5, 2000, 100, 300);
    for w in [1, 7, 64] {
        let mut p = Packer::new(Pack::best_fit(512).window(w), 2).unwrap();
        for (o, t) in &docs {
            p.push(*o, t, None);
            assert!(p.held() <= w, "{} held, window {w}", p.held());
            while p.pop().is_some() {}
        }
    }
}

#[test]
fn the_same_documents_give_the_same_batches() {
    let docs = corpus(9, 500, 400, 900);
    for pack in [
        Pack::best_fit(512),
        Pack::first_fit(512).window(40),
        Pack::concat(512),
    ] {
        let (a, sa) = run(pack.clone(), 4, &docs);
        let (b, sb) = run(pack, 4, &docs);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
    }
}

#[test]
fn best_fit_fills_rows_better_than_first_fit_and_a_tiny_window() {
    let docs = corpus(11, 3000, 700, 5000);
    let (_, best) = run(Pack::best_fit(1024).window(500), 8, &docs);
    let (_, tiny) = run(Pack::best_fit(1024).window(2), 8, &docs);
    assert!(
        best.fill(1024) > tiny.fill(1024),
        "{} vs {}",
        best.fill(1024),
        tiny.fill(1024)
    );
}

#[test]
fn long_documents_are_split_truncated_or_dropped_as_asked() {
    let src = SourceId::intern("long.jsonl");
    let doc: Vec<i32> = (0..25).collect();
    let o = Origin::new(src, 0);
    for (long, rows, tokens) in [
        (LongDocs::Split, 3, 25),
        (LongDocs::Truncate, 1, 10),
        (LongDocs::Drop, 0, 0),
    ] {
        let mut p = Packer::new(Pack::best_fit(10).long_docs(long), 1).unwrap();
        p.push(o, &doc, None);
        let out: Vec<Batch> = p
            .finish()
            .into_iter()
            .map(|r| r.into_batch(10).unwrap())
            .collect();
        assert_eq!(out.len(), rows, "{long}");
        let s = p.stats();
        assert_eq!(s.tokens, tokens, "{long}");
        assert_eq!(s.tokens_left_out, 25 - tokens, "{long}");
        if long == LongDocs::Split {
            // Pieces [0, 10), [10, 20), [20, 25): the cut points are multiples of L.
            let starts: Vec<u64> = out.iter().map(|b| b.segments().unwrap()[0].start).collect();
            assert_eq!(starts, [0, 10, 20]);
            assert_eq!(s.long_split, 1);
        }
    }
}

#[test]
fn a_resumed_packer_delivers_exactly_what_was_not_delivered() {
    for seed in 0..10 {
        let docs = corpus(seed, 300, 200, 400);
        for pack in [Pack::best_fit(128).window(40), Pack::concat(128)] {
            let (batches, _) = run(pack.clone(), 3, &docs);
            let cut = batches.len() / 2;
            // What the consumer had: the first `cut` batches.
            let mut taken: BTreeMap<Origin, Vec<[u64; 2]>> = BTreeMap::new();
            let mut doc_len = BTreeMap::new();
            for b in &batches[..cut] {
                for s in b.segments().unwrap() {
                    taken
                        .entry(s.origin)
                        .or_default()
                        .push([s.start, s.start + s.len as u64]);
                    doc_len.insert(s.origin, s.doc_tokens);
                }
            }
            // Whole documents are left out; partly delivered ones come with their ranges.
            let mut p = Packer::new(pack, 3).unwrap();
            let mut second = Vec::new();
            for (o, t) in &docs {
                let ranges = taken
                    .get(o)
                    .map(|r| RecordRanges::from_ranges(r.iter().copied()));
                if let Some(r) = &ranges {
                    if *r.ranges() == [[0, doc_len[o]]] {
                        continue;
                    }
                }
                p.push(*o, t, ranges.as_ref());
                while let Some(rows) = p.pop() {
                    second.push(rows.into_batch(128).unwrap());
                }
            }
            second.extend(p.finish().into_iter().map(|r| r.into_batch(128).unwrap()));
            let mut all = batches[..cut].to_vec();
            all.extend(second);
            assert_exactly_once(&docs, &reassemble(&all, 128));
        }
    }
}

#[test]
fn bad_settings_are_refused_naming_them() {
    assert!(Packer::new(Pack::best_fit(0), 1)
        .unwrap_err()
        .contains("pack length"));
    assert!(Packer::new(Pack::best_fit(8).window(0), 1)
        .unwrap_err()
        .contains("window"));
    assert!(Packer::new(Pack::best_fit(8), 0)
        .unwrap_err()
        .contains("row per batch"));
    assert!("fits"
        .parse::<PackPolicy>()
        .unwrap_err()
        .contains("best-fit, first-fit, concat"));
    assert!("cut"
        .parse::<LongDocs>()
        .unwrap_err()
        .contains("split, truncate, drop"));
}

/// Each rank's documents packed under the quota `how` of all ranks' tokens.
fn run_ranks(
    pack: &Pack,
    b: usize,
    ranks: &[Vec<(Origin, Vec<i32>)>],
    how: Equalize,
) -> Vec<(Vec<Batch>, PackStats, std::result::Result<(), QuotaError>)> {
    let tokens: Vec<u64> = ranks
        .iter()
        .map(|docs| {
            docs.iter()
                .map(|(_, t)| pack.packed_tokens(t.len()) as u64)
                .sum()
        })
        .collect();
    let rows = pack.equalized_rows(&tokens, how).unwrap();
    ranks
        .iter()
        .zip(&tokens)
        .map(|(docs, &t)| {
            let mut p = Packer::new(pack.clone(), b).unwrap();
            p.set_quota(Some(RowQuota {
                rows,
                tokens: t,
                how,
            }));
            let mut out = Vec::new();
            for (o, toks) in docs {
                p.push(*o, toks, None);
                while let Some(r) = p.pop() {
                    out.push(r.into_batch(pack.length).unwrap());
                }
            }
            for r in p.finish() {
                out.push(r.into_batch(pack.length).unwrap());
            }
            (out, p.stats(), p.check_quota())
        })
        .collect()
}

/// Rows holding tokens, and padding rows (all segment ids 0, masked out).
fn rows_of(batches: &[Batch]) -> (usize, usize) {
    let (mut real, mut padding) = (0, 0);
    for b in batches {
        let seg = b.view::<i32, Ix2>("segment_ids").unwrap();
        let mask = b.mask();
        for r in 0..b.len() {
            let empty = seg.row(r).iter().all(|&s| s == 0);
            assert_eq!(
                mask[r], !empty,
                "row {r}: the mask and the segment ids disagree"
            );
            if empty {
                padding += 1;
            } else {
                real += 1;
            }
        }
        assert_eq!(b.padded_rows(), b.mask().iter().filter(|m| !**m).count());
    }
    (real, padding)
}

/// Ranks of unequal sizes (some far smaller, one empty at times).
fn ranks(seed: u64) -> Vec<Vec<(Origin, Vec<i32>)>> {
    let sizes = [
        300,
        40 + (seed as usize * 37) % 250,
        180,
        (seed as usize) % 3,
    ];
    sizes
        .iter()
        .enumerate()
        .map(|(r, &n)| {
            let mut docs = corpus(seed * 10 + r as u64, n, 300, 600);
            // Each rank's own documents (distinct origins per rank).
            let src = SourceId::intern(&format!("rank-{r}.jsonl"));
            for (o, _) in &mut docs {
                *o = Origin::new(src, o.record);
            }
            docs
        })
        .collect()
}

/// The three policies, rows of `length`, best-fit and first-fit over `window`.
fn policies(length: usize, window: usize) -> [Pack; 3] {
    [
        Pack::best_fit(length).window(window),
        Pack::first_fit(length).window(window),
        Pack::concat(length),
    ]
}

#[test]
fn equalized_ranks_pad_to_the_same_rows_and_deliver_every_document_once() {
    for seed in 0..16 {
        let ranks = ranks(seed);
        for pack in policies(256, 40) {
            let got = run_ranks(&pack, 4, &ranks, Equalize::Pad);
            let lens: Vec<usize> = got
                .iter()
                .map(|(b, _, _)| b.iter().map(|b| b.len()).sum())
                .collect();
            assert!(
                lens.iter().all(|&n| n == lens[0]),
                "{pack:?}: rows per rank {lens:?}"
            );
            for ((batches, stats, check), docs) in got.iter().zip(&ranks) {
                check.clone().unwrap();
                assert!(batches.iter().all(|b| b.len() == 4));
                assert_exactly_once(docs, &reassemble(batches, 256));
                let (real, padding) = rows_of(batches);
                assert_eq!(real + padding, lens[0]);
                assert!(stats.equalize_padding_rows as usize <= padding);
                if docs.is_empty() {
                    assert!(batches.iter().all(|b| b
                        .origins()
                        .iter()
                        .all(|o| &*o.source.name() == PADDING_SOURCE)));
                }
            }
        }
    }
}

#[test]
fn equalized_ranks_drop_to_the_same_rows_each_row_full_of_real_tokens() {
    for seed in 0..16 {
        let ranks = ranks(seed);
        for pack in policies(256, 40) {
            let got = run_ranks(&pack, 4, &ranks, Equalize::Drop);
            let tokens: Vec<u64> = ranks
                .iter()
                .map(|d| d.iter().map(|(_, t)| t.len() as u64).sum())
                .collect();
            let k = pack.equalized_rows(&tokens, Equalize::Drop).unwrap() as usize;
            for ((batches, stats, check), docs) in got.iter().zip(&ranks) {
                check.clone().unwrap();
                let (real, padding) = rows_of(batches);
                assert_eq!(real, k, "{pack:?}: rows with tokens");
                assert!(padding < 4, "only the last batch's filler");
                // What is delivered is each document's tokens, once, in place.
                let got = reassemble(batches, 256);
                let by_origin: BTreeMap<Origin, &Vec<i32>> =
                    docs.iter().map(|(o, t)| (*o, t)).collect();
                for (o, pieces) in &got {
                    for (start, toks) in pieces {
                        let s = *start as usize;
                        assert_eq!(&by_origin[o][s..s + toks.len()], &toks[..], "{o:?}");
                    }
                }
                let delivered: u64 = got.values().flatten().map(|(_, t)| t.len() as u64).sum();
                let all: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
                assert_eq!(delivered + stats.equalize_dropped_tokens, all);
            }
        }
    }
}

#[test]
fn a_generous_pad_quota_changes_nothing_but_adds_padding_rows() {
    let docs = corpus(3, 400, 256, 600);
    let pack = Pack::best_fit(256).window(30);
    let (plain, stats) = run(pack.clone(), 4, &docs);
    let tokens: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
    let mut p = Packer::new(pack, 4).unwrap();
    let rows = stats.rows + 40;
    p.set_quota(Some(RowQuota {
        rows,
        tokens,
        how: Equalize::Pad,
    }));
    let mut out = Vec::new();
    for (o, t) in &docs {
        p.push(*o, t, None);
        while let Some(r) = p.pop() {
            out.push(r.into_batch(256).unwrap());
        }
    }
    out.extend(p.finish().into_iter().map(|r| r.into_batch(256).unwrap()));
    p.check_quota().unwrap();
    assert_eq!(p.stats().documents_cut, 0);
    let ids = |b: &[Batch]| -> Vec<Vec<i32>> {
        b.iter()
            .flat_map(|b| {
                let v = b.view::<i32, Ix2>("input_ids").unwrap();
                v.rows().into_iter().map(|r| r.to_vec()).collect::<Vec<_>>()
            })
            .filter(|r| r.iter().any(|&t| t != 0))
            .collect()
    };
    assert_eq!(ids(&plain), ids(&out));
    assert_eq!(
        out.iter().map(|b| b.len() as u64).sum::<u64>(),
        rows.div_ceil(4) * 4
    );
}

#[test]
fn a_quota_counted_from_other_tokens_is_an_error_not_a_wrong_count() {
    let docs = corpus(5, 200, 256, 600);
    let tokens: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
    for (how, told) in [
        (Equalize::Pad, tokens / 2),
        (Equalize::Drop, tokens * 2),
        (Equalize::Pad, tokens + 1),
        (Equalize::Drop, tokens - 1),
    ] {
        let pack = Pack::best_fit(256).window(30);
        let rows = pack.equalized_rows(&[told], how).unwrap();
        let mut p = Packer::new(pack, 4).unwrap();
        p.set_quota(Some(RowQuota {
            rows,
            tokens: told,
            how,
        }));
        for (o, t) in &docs {
            p.push(*o, t, None);
            while p.pop().is_some() {}
        }
        let _ = p.finish();
        let e = p.check_quota().unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains(&format!("{told} tokens were counted"))
                || e.contains(&format!("{told} were counted")),
            "{e}"
        );
    }
}

/// A packed batch as compared: its fields and segments.
type Fingerprint = (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>, Vec<Segment>, usize);

fn fingerprint(b: &Batch) -> Fingerprint {
    let v = |name: &str| b.view::<i32, Ix2>(name).unwrap().iter().copied().collect();
    let cu = (b.view::<i32, ndarray::Ix1>("cu_seqlens").unwrap())
        .iter()
        .copied()
        .collect();
    (
        v("input_ids"),
        v("segment_ids"),
        v("position_ids"),
        cu,
        b.segments().unwrap().to_vec(),
        b.padded_rows(),
    )
}

/// `docs` packed lazily — each document started, its batches taken one
/// at a time (as `i64` ids when `wide`) — under `quota`; every document
/// resumed with the ranges of `delivered`. After every call the rows made
/// and not taken are fewer than a batch's: the packer never runs ahead of
/// the batches taken.
fn run_lazy(
    pack: &Pack,
    b: usize,
    docs: &[(Origin, Vec<i32>)],
    wide: bool,
    quota: Option<RowQuota>,
    delivered: &BTreeMap<Origin, RecordRanges>,
) -> (Vec<Batch>, PackStats) {
    let mut p = Packer::new(pack.clone(), b).unwrap();
    p.set_quota(quota);
    let mut out = Vec::new();
    for (o, t) in docs {
        let t64: Vec<i64> = t.iter().map(|&x| i64::from(x)).collect();
        p.start(*o, t.len(), delivered.get(o)).unwrap();
        loop {
            let tokens = if wide {
                Tokens::I64(&t64)
            } else {
                Tokens::I32(t)
            };
            let rows = p.next_batch(tokens).unwrap();
            assert!(p.made_rows() < b, "{} rows made ahead", p.made_rows());
            assert!(
                p.stats().rows as usize <= (out.len() + 1) * b,
                "{} rows made for {} batches taken",
                p.stats().rows,
                out.len()
            );
            match rows {
                Some(r) => out.push(r.into_batch(pack.length).unwrap()),
                None => break,
            }
        }
        assert!(!p.placing());
    }
    p.end_pass();
    while let Some(r) = p.pop() {
        out.push(r.into_batch(pack.length).unwrap());
    }
    (out, p.stats())
}

/// `docs` pushed whole (resumed with `delivered`) under `quota`.
fn run_eager(
    pack: &Pack,
    b: usize,
    docs: &[(Origin, Vec<i32>)],
    quota: Option<RowQuota>,
    delivered: &BTreeMap<Origin, RecordRanges>,
) -> (Vec<Batch>, PackStats) {
    let mut p = Packer::new(pack.clone(), b).unwrap();
    p.set_quota(quota);
    let mut out = Vec::new();
    for (o, t) in docs {
        p.push(*o, t, delivered.get(o));
        while let Some(r) = p.pop() {
            out.push(r.into_batch(pack.length).unwrap());
        }
    }
    out.extend(
        p.finish()
            .into_iter()
            .map(|r| r.into_batch(pack.length).unwrap()),
    );
    (out, p.stats())
}

#[test]
fn a_started_document_gives_the_same_batches_as_a_pushed_one_placing_only_what_is_taken() {
    for seed in 0..6 {
        let docs = corpus(seed, 300, 300, 600);
        let tokens: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
        // Some documents partly delivered before (a resume by record).
        let mut delivered = BTreeMap::new();
        for (o, t) in docs
            .iter()
            .filter(|(o, t)| o.record % 7 == 3 && t.len() > 40)
        {
            let n = t.len() as u64;
            delivered.insert(*o, RecordRanges::from_ranges([[0, 9], [n / 2, n / 2 + 17]]));
        }
        for pack in policies(128, 30) {
            for (quota, resumed) in [
                (None, BTreeMap::new()),
                (None, delivered.clone()),
                (
                    Some(RowQuota {
                        rows: tokens.div_ceil(128) + 3,
                        tokens,
                        how: Equalize::Pad,
                    }),
                    BTreeMap::new(),
                ),
                (
                    Some(RowQuota {
                        rows: tokens / 128 / 2,
                        tokens,
                        how: Equalize::Drop,
                    }),
                    BTreeMap::new(),
                ),
            ] {
                let (eager, es) = run_eager(&pack, 3, &docs, quota, &resumed);
                for wide in [false, true] {
                    let (lazy, ls) = run_lazy(&pack, 3, &docs, wide, quota, &resumed);
                    let what = format!("{pack:?} {quota:?} wide {wide}");
                    assert_eq!(ls, es, "{what}");
                    assert_eq!(lazy.len(), eager.len(), "{what}");
                    for (k, (l, e)) in lazy.iter().zip(&eager).enumerate() {
                        assert_eq!(fingerprint(l), fingerprint(e), "{what}: batch {k}");
                    }
                }
            }
        }
    }
}

#[test]
fn one_long_document_makes_its_rows_as_its_batches_are_taken() {
    let src = SourceId::intern("long.jsonl");
    for n in [10_000usize, 100_000, 1_000_000] {
        let t: Vec<i32> = (0..n as i32).collect();
        for pack in policies(128, 4) {
            let mut p = Packer::new(pack.clone(), 2).unwrap();
            p.start(Origin::new(src, 0), n, None).unwrap();
            // The first batch: two rows made, not n / 128.
            let first = p.next_batch(Tokens::I32(&t)).unwrap().expect("a batch");
            assert_eq!(first.rows().len(), 2);
            assert_eq!(p.stats().rows, 2, "{pack:?}, {n} tokens");
            let mut batches = 1;
            while p.next_batch(Tokens::I32(&t)).unwrap().is_some() {
                batches += 1;
                assert_eq!(p.stats().rows, 2 * batches, "{pack:?}, {n} tokens");
            }
            p.end_pass();
            while p.pop().is_some() {
                batches += 1;
            }
            assert_eq!(batches as usize, n.div_ceil(128).div_ceil(2), "{pack:?}");
            assert_eq!(p.stats().tokens, n as u64);
        }
    }
}

#[test]
fn a_token_id_beyond_i32_is_named_never_wrapped() {
    let ids = [5i64, 7, 3_000_000_000, -2_147_483_649, 9];
    let e = Tokens::I64(&ids).check().unwrap_err();
    assert_eq!(
        e,
        BadToken {
            index: 2,
            tokens: 5,
            value: 3_000_000_000
        }
    );
    assert!(e.to_string().contains("token 2 of 5 is 3000000000"), "{e}");
    assert!(Tokens::I64(&[i32::MIN as i64, i32::MAX as i64])
        .check()
        .is_ok());
    // Started anyway, its placing stops at the id: nothing of it wrapped.
    let mut p = Packer::new(Pack::concat(4), 1).unwrap();
    let src = SourceId::intern("ids.jsonl");
    p.start(Origin::new(src, 3), ids.len(), None).unwrap();
    let e = p.next_batch(Tokens::I64(&ids)).unwrap_err();
    assert!(matches!(e, PackError::BadToken(b) if b.index == 2), "{e}");
    assert_eq!(p.stats().tokens, 0);
    assert!(!p.placing());
}

#[test]
fn the_lazy_packer_refuses_what_it_cannot_do_naming_it() {
    let src = SourceId::intern("busy.jsonl");
    let mut p = Packer::new(Pack::best_fit(8), 1).unwrap();
    let t: Vec<i32> = (0..40).collect();
    p.start(Origin::new(src, 1), t.len(), None).unwrap();
    assert!(p.next_batch(Tokens::I32(&t)).unwrap().is_some());
    let e = p.start(Origin::new(src, 2), 3, None).unwrap_err();
    assert!(e.to_string().contains("record 1 of busy.jsonl"), "{e}");
    let e = p.next_batch(Tokens::I32(&t[..39])).unwrap_err();
    assert_eq!(
        e,
        PackError::Tokens {
            expected: 40,
            actual: 39
        }
    );
}
