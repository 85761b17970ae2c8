//! `shuffle_mode` `global`, by identity, with many seeds: every record once
//! per pass, each pass another permutation, near uniform (class balance
//! in windows over class-sorted files); the same batches for 1 and 3
//! readers without `deterministic`; ranks disjoint and covering; a resume
//! mid-pass equal to the uninterrupted run; a checkpoint of the same size
//! for 100× the records; 2 ranks resumed as 3, exactly once; a rewritten
//! file read anew (its index rebuilt); a gzip input refused naming the
//! file; a bad record skipped, nothing else lost; a file changed during a
//! run refused naming it; large rows of many files in one chunk read with
//! their own bytes, a damaged one refused naming its file and record.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{all_ids, assert_exactly_once, jsonl_files};
use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::Compression;
use feedline::{Location, Record, SourceId, Tensor, Values};
use feedline_actors::{
    Checkpoint, ErrorPolicy, FileSet, Loader, LoaderBuilder, ShardBy, ShuffleMode,
};

/// A delivered batch: pass, seq, ids.
type Got = (u64, u64, Vec<i64>);

fn got(d: &feedline_actors::Delivered) -> Got {
    (
        d.pass,
        d.seq,
        d.batch.i64("id").unwrap().iter().copied().collect(),
    )
}

/// TFRecord files of `records` records each in `dir`, ids as `jsonl_files`'.
fn tfrecord_files(dir: &Path, records: &[u64]) -> Vec<String> {
    (records.iter().enumerate())
        .map(|(f, &n)| {
            let path = dir.join(format!("t{f}.tfrecord"));
            let mut w = TfRecordWriter::create(&path, Compression::None).unwrap();
            for i in 0..n {
                let id = (f as u64 * 1_000_000 + i) as i64;
                let rec = Record {
                    fields: vec![(
                        "id".into(),
                        Tensor {
                            values: Values::I64(vec![id]),
                            shape: vec![],
                        },
                    )],
                    location: Location::new(SourceId::intern("w"), i, None),
                };
                w.write_example(&rec).unwrap();
            }
            w.finish().unwrap();
            path.to_str().unwrap().to_string()
        })
        .collect()
}

/// CSV files (read by position through their reader's skip): ids as above.
fn csv_files(dir: &Path, records: &[u64]) -> Vec<String> {
    (records.iter().enumerate())
        .map(|(f, &n)| {
            let path = dir.join(format!("c{f}.csv"));
            let mut text = String::from("id,x\n");
            for i in 0..n {
                text.push_str(&format!("{},{}.5\n", f as u64 * 1_000_000 + i, i));
            }
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_string()
        })
        .collect()
}

/// The modes that read by position; every test of both runs in each.
const MODES: [ShuffleMode; 2] = [ShuffleMode::Global, ShuffleMode::Block];

/// Records per block in the tests' `block` mode (blocks span files).
const BLOCK: usize = 32;

fn ordered(mode: ShuffleMode, files: &[String], index_dir: &Path, seed: u64) -> LoaderBuilder {
    Loader::builder()
        .files(files.to_vec())
        .shard_from_env(false)
        .shuffle_mode(mode)
        .shuffle(BLOCK)
        .index_dir(index_dir)
        .batch(7)
        .chunk_records(5)
        .passes(2)
        .seed(seed)
}

fn global(files: &[String], index_dir: &Path, seed: u64) -> LoaderBuilder {
    ordered(ShuffleMode::Global, files, index_dir, seed)
}

fn all(loader: Loader) -> Vec<Got> {
    loader.into_iter().map(|d| got(&d.unwrap())).collect()
}

fn by_pass(batches: &[Got]) -> BTreeMap<u64, Vec<i64>> {
    let mut m: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (p, _, ids) in batches {
        m.entry(*p).or_default().extend(ids);
    }
    m
}

fn sorted(m: &BTreeMap<u64, Vec<i64>>) -> BTreeMap<u64, Vec<i64>> {
    m.iter()
        .map(|(p, v)| {
            let mut v = v.clone();
            v.sort();
            (*p, v)
        })
        .collect()
}

const COUNTS: [u64; 4] = [40, 25, 61, 14];

#[test]
fn every_record_once_per_pass_in_another_permutation_each_pass() {
    let dir = tempfile::tempdir().unwrap();
    let idx = dir.path().join("idx");
    let kinds = [
        tfrecord_files(dir.path(), &COUNTS),
        jsonl_files(dir.path(), &COUNTS),
        csv_files(dir.path(), &COUNTS),
    ];
    let want = all_ids(&COUNTS, &[]);
    for files in &kinds {
        let mut orders = Vec::new();
        for seed in [0u64, 1, 7, 19, 123] {
            let batches = all(global(files, &idx, seed).build().unwrap());
            let per_pass = by_pass(&batches);
            assert_exactly_once(&sorted(&per_pass), &want, 2);
            assert_ne!(
                per_pass[&0], per_pass[&1],
                "{files:?} seed {seed}: pass 1 repeats pass 0"
            );
            // Not the files' order, nor file by file.
            assert_ne!(per_pass[&0], want);
            let mut file_runs = 1;
            for w in per_pass[&0].windows(2) {
                if w[0] / 1_000_000 != w[1] / 1_000_000 {
                    file_runs += 1;
                }
            }
            assert!(
                file_runs > 40,
                "{files:?} seed {seed}: {file_runs} runs of one file"
            );
            orders.push(per_pass[&0].clone());
        }
        orders.dedup();
        assert_eq!(orders.len(), 5, "every seed its own order");
    }
    // The three formats hold the same ids: the same seed gives the same order.
    let order = |files: &Vec<String>| by_pass(&all(global(files, &idx, 5).build().unwrap()));
    assert_eq!(order(&kinds[0]), order(&kinds[1]));
    assert_eq!(order(&kinds[1]), order(&kinds[2]));
}

/// The blocks of `block` mode's order over files of `counts` records (at
/// most 16 files: one group), as position ranges: `K = ceil(total /
/// block)` blocks, block `k` holding records `floor(k c / K)..floor((k +
/// 1) c / K)` of each file of `c` records.
fn block_bounds(counts: &[u64], block: usize) -> Vec<std::ops::Range<usize>> {
    let total: u64 = counts.iter().sum();
    let k = total.div_ceil(block as u64);
    let start = |b: u64| counts.iter().map(|c| (b * c / k) as usize).sum::<usize>();
    (0..k).map(|b| start(b)..start(b + 1)).collect()
}

/// `block` mode: every record once per pass, each pass and seed another
/// order, and each block of the pass's order (its origins name a run and
/// a position in it) holds one range of records of each of the files —
/// all of them, as there are fewer than 16 — permuted.
#[test]
fn block_mode_permutes_within_blocks_of_files_in_a_permuted_order() {
    let dir = tempfile::tempdir().unwrap();
    let idx = dir.path().join("idx");
    let kinds = [
        tfrecord_files(dir.path(), &COUNTS),
        jsonl_files(dir.path(), &COUNTS),
        csv_files(dir.path(), &COUNTS),
    ];
    let want = all_ids(&COUNTS, &[]);
    let n: u64 = COUNTS.iter().sum();
    let mut orders = Vec::new();
    for files in &kinds {
        for seed in [0u64, 1, 7, 19, 123] {
            let loader = ordered(ShuffleMode::Block, files, &idx, seed)
                .build()
                .unwrap();
            // (pass, position in the order, id)
            let mut at: Vec<(u64, u64, i64)> = Vec::new();
            for d in loader {
                let d = d.unwrap();
                let ids: Vec<i64> = d.batch.i64("id").unwrap().iter().copied().collect();
                for (o, id) in d.batch.origins().iter().zip(ids) {
                    let name = o.source.name();
                    let run: u64 = name.rsplit('/').next().unwrap().parse().unwrap();
                    let (start, _) = feedline::global_order::segment_range(n, run);
                    at.push((d.pass, start + o.record, id));
                }
            }
            let per_pass = by_pass(
                &(at.iter())
                    .map(|&(p, _, id)| (p, 0, vec![id]))
                    .collect::<Vec<_>>(),
            );
            assert_exactly_once(&sorted(&per_pass), &want, 2);
            assert_ne!(
                per_pass[&0], per_pass[&1],
                "seed {seed}: pass 1 repeats pass 0"
            );
            assert_ne!(per_pass[&0], want, "seed {seed}: the files' order");
            at.sort();
            for pass in 0..2 {
                let order: Vec<i64> = (at.iter()).filter(|a| a.0 == pass).map(|a| a.2).collect();
                assert_eq!(order.len() as u64, n);
                for (b, range) in block_bounds(&COUNTS, BLOCK).into_iter().enumerate() {
                    let block = &order[range];
                    let mut per_file: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
                    for id in block {
                        (per_file.entry(id / 1_000_000).or_default()).push(id % 1_000_000);
                    }
                    for (f, rs) in &mut per_file {
                        rs.sort();
                        assert!(
                            rs.windows(2).all(|w| w[1] == w[0] + 1),
                            "seed {seed}: block {b}'s records of file {f} not one range: {rs:?}"
                        );
                    }
                    assert_eq!(
                        per_file.len(),
                        COUNTS.len(),
                        "seed {seed}: block {b} mixes every file"
                    );
                }
                orders.push(order);
            }
        }
    }
    // The three formats hold the same ids: the same seed gives the same order.
    assert_eq!(orders[..10], orders[10..20]);
    assert_eq!(orders[10..20], orders[20..]);
    let mut distinct = orders[..10].to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 10, "every seed and pass its own order");
    // Not every block in file order: the records of a block are permuted.
    let bounds = block_bounds(&COUNTS, BLOCK);
    assert!(orders
        .iter()
        .all(|o| (bounds.iter()).any(|r| o[r.clone()].windows(2).any(|w| w[1] < w[0]))));
}

/// `block` mode's settings: `shuffle 0` (no block) refused naming it.
#[test]
fn block_mode_refuses_blocks_of_no_records() {
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &[5]);
    let e = ordered(ShuffleMode::Block, &files, &dir.path().join("idx"), 0)
        .shuffle(0)
        .build()
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shuffle") && e.contains("block") && e.contains("not 0"),
        "{e}"
    );
}

#[test]
fn class_sorted_files_are_mixed_in_every_window() {
    // Four files, one class each: every window of 40 of 400 records holds
    // every class, near its share (a pool of 16 over sorted files would not).
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &[100, 100, 100, 100]);
    let mut worst = 0usize;
    for seed in 0..20u64 {
        let b = global(&files, &dir.path().join("idx"), seed).passes(1);
        let ids = by_pass(&all(b.build().unwrap())).remove(&0).unwrap();
        for w in ids.chunks(40) {
            let mut per_class = [0usize; 4];
            for id in w {
                per_class[(id / 1_000_000) as usize] += 1;
            }
            assert!(
                per_class.iter().all(|&c| c > 0),
                "seed {seed}: {per_class:?}"
            );
            worst = worst.max(*per_class.iter().max().unwrap());
        }
    }
    assert!(worst < 25, "a window of 40 held {worst} of one class");
}

#[test]
fn the_same_batches_whatever_the_readers_and_chunks() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = tfrecord_files(dir.path(), &COUNTS);
        let idx = dir.path().join("idx");
        for seed in [2u64, 9, 31] {
            let one = all(ordered(mode, &files, &idx, seed)
                .readers(1)
                .build()
                .unwrap());
            let three = all(ordered(mode, &files, &idx, seed)
                .readers(3)
                .chunk_records(3)
                .build()
                .unwrap());
            assert_eq!(one, three, "seed {seed}");
        }
    }
}

#[test]
fn file_sets_are_each_permuted_and_read_once_whatever_the_readers() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = tfrecord_files(dir.path(), &COUNTS);
        let idx = dir.path().join("idx");
        for seed in [1u64, 13] {
            let make = |readers: usize| {
                Loader::builder()
                    .shard_from_env(false)
                    .shuffle_mode(mode)
                    .shuffle(BLOCK)
                    .index_dir(&idx)
                    .batch(7)
                    .passes(2)
                    .seed(seed)
                    .file_set(
                        FileSet::new("a", files[..2].to_vec())
                            .readers(readers)
                            .weight(2.0),
                    )
                    .file_set(
                        FileSet::new("b", files[2..].to_vec())
                            .readers(readers)
                            .weight(1.0),
                    )
            };
            let one = all(make(1).build().unwrap());
            assert_exactly_once(&sorted(&by_pass(&one)), &all_ids(&COUNTS, &[]), 2);
            assert_eq!(one, all(make(2).build().unwrap()), "seed {seed}");
        }
    }
}

#[test]
fn ranks_are_disjoint_and_cover_every_pass() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = jsonl_files(dir.path(), &COUNTS);
        let idx = dir.path().join("idx");
        for seed in [4u64, 8] {
            for world in [2usize, 3] {
                let mut union: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
                for rank in 0..world {
                    let b = ordered(mode, &files, &idx, seed).shard(rank, world);
                    let loader = b.build().unwrap();
                    let len = loader.len_of_pass(0).unwrap();
                    let batches = all(loader);
                    let in_pass0 = batches.iter().filter(|b| b.0 == 0).count() as u64;
                    assert_eq!(
                        len, in_pass0,
                        "rank {rank} of {world}: len() and pass 0's batches"
                    );
                    for (p, ids) in by_pass(&batches) {
                        union.entry(p).or_default().extend(ids);
                    }
                }
                assert_exactly_once(&sorted(&union), &all_ids(&COUNTS, &[]), 2);
            }
        }
    }
}

/// Take `n` batches, then the checkpoint, through JSON.
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
    (out, back)
}

#[test]
fn a_resume_mid_pass_gives_the_uninterrupted_runs_batches() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = tfrecord_files(dir.path(), &COUNTS);
        let idx = dir.path().join("idx");
        for seed in [3u64, 12, 77] {
            let full = all(ordered(mode, &files, &idx, seed).build().unwrap());
            for stop in [1usize, 9, full.len() / 2 + 3, full.len() - 1] {
                let (before, cp) = take(ordered(mode, &files, &idx, seed).build().unwrap(), stop);
                let after = all(ordered(mode, &files, &idx, seed)
                    .readers(3)
                    .resume(cp)
                    .build()
                    .unwrap());
                let mut joined = before.clone();
                joined.extend(after);
                assert_eq!(joined, full, "seed {seed}, stopped after {stop}");
            }
        }
    }
}

#[test]
fn a_checkpoint_has_the_same_size_for_100_times_the_records() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let small = tfrecord_files(&dir.path().join("d1").tap_mkdir(), &[30, 20, 50]);
        let large = tfrecord_files(&dir.path().join("d2").tap_mkdir(), &[3000, 2000, 5000]);
        let idx = dir.path().join("idx");
        let size = |files: &[String], stop: usize| {
            let b = ordered(mode, files, &idx, 1).batch(4);
            let (_, cp) = take(b.build().unwrap(), stop);
            // Its size up to the digits of its numbers: each run of digits as one.
            let text = cp.to_json();
            let mut shape = String::new();
            for c in text.chars() {
                if !(c.is_ascii_hexdigit() && shape.ends_with('#')) {
                    shape.push(if c.is_ascii_hexdigit() { '#' } else { c });
                }
            }
            shape
        };
        // Stopped a fifth into the pass: the same fields, ranges and runs.
        let (s, l) = (size(&small, 5), size(&large, 500));
        assert_eq!(s, l, "checkpoint of 100 records, of 10,000");
    }
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

#[test]
fn two_ranks_resumed_as_three_deliver_every_record_once() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = jsonl_files(dir.path(), &COUNTS);
        let idx = dir.path().join("idx");
        for seed in [5u64, 6, 21] {
            let make = |rank, world| {
                ordered(mode, &files, &idx, seed)
                    .shard(rank, world)
                    .shard_by(ShardBy::Record)
            };
            let mut everything = Vec::new();
            let mut cps = Vec::new();
            for rank in 0..2 {
                let (before, cp) = take(make(rank, 2).build().unwrap(), 3 + rank);
                everything.extend(before);
                cps.push(cp);
            }
            for rank in 0..3 {
                let mut b = make(rank, 3);
                for cp in &cps {
                    b = b.resume(cp.clone());
                }
                everything.extend(all(b.build().unwrap()));
            }
            assert_exactly_once(&sorted(&by_pass(&everything)), &all_ids(&COUNTS, &[]), 2);
        }
    }
}

#[test]
fn a_rewritten_file_is_indexed_and_read_anew() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("idx");
        let files = tfrecord_files(dir.path(), &[10, 12]);
        let first = by_pass(&all(ordered(mode, &files, &idx, 0).build().unwrap()));
        assert_eq!(sorted(&first)[&0], all_ids(&[10, 12], &[]));
        // t1 rewritten with 30 records: its stale index is not used.
        tfrecord_files(dir.path(), &[10, 30]);
        let again = by_pass(&all(ordered(mode, &files, &idx, 0).build().unwrap()));
        assert_eq!(sorted(&again)[&0], all_ids(&[10, 30], &[]));
        assert_eq!(
            std::fs::read_dir(&idx).unwrap().count(),
            2,
            "one index per file"
        );
    }
}

#[test]
fn a_compressed_input_is_refused_naming_the_file_and_the_modes() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z.tfrecord.gz");
        let mut w = TfRecordWriter::create(&path, Compression::Gzip).unwrap();
        w.write_record(b"x").unwrap();
        w.finish().unwrap();
        let files = vec![path.to_str().unwrap().to_string()];
        let e = ordered(mode, &files, &dir.path().join("idx"), 0)
            .schema(
                feedline::Schema::builder()
                    .field("id", feedline::DType::I64, [])
                    .build()
                    .unwrap(),
            )
            .build()
            .and_then(|l| l.into_iter().next().unwrap().map(|_| ()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("z.tfrecord.gz")
                && e.contains("Gzip")
                && e.contains("shuffle_mode(\"buffer\")"),
            "{e}"
        );
    }
}

#[test]
fn a_bad_record_is_skipped_and_nothing_else_is_lost() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = jsonl_files(dir.path(), &[20, 20]);
        let text = std::fs::read_to_string(&files[1]).unwrap();
        let broken: Vec<String> = (text.lines().enumerate())
            .map(|(i, l)| {
                if i == 7 {
                    "{\"id\": oops}".into()
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&files[1], broken.join("\n") + "\n").unwrap();
        for seed in [0u64, 3] {
            let b = ordered(mode, &files, &dir.path().join("idx"), seed)
                .error_policy(ErrorPolicy::skip());
            let per_pass = sorted(&by_pass(&all(b.build().unwrap())));
            assert_exactly_once(&per_pass, &all_ids(&[20, 20], &[1_000_007]), 2);
        }
    }
}

#[test]
fn a_file_changed_during_a_run_is_refused_naming_it() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = tfrecord_files(dir.path(), &[5000, 5000]);
        let mut loader = ordered(mode, &files, &dir.path().join("idx"), 0)
            .batch(2)
            .readers(1)
            .build()
            .unwrap();
        let mut it = loader.iter();
        it.next().unwrap().unwrap();
        // t0 grows under the running loader.
        tfrecord_files(dir.path(), &[6000]);
        let e = it
            .find_map(|d| d.err())
            .expect("the change is found")
            .to_string();
        assert!(e.contains("t0.tfrecord") && e.contains("changed"), "{e}");
    }
}

#[test]
fn each_origin_stands_for_the_file_and_record_it_came_from() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let files = tfrecord_files(dir.path(), &COUNTS);
        let mut seen = 0;
        for d in ordered(mode, &files, &dir.path().join("idx"), 4)
            .build()
            .unwrap()
        {
            let d = d.unwrap();
            let ids = d
                .batch
                .i64("id")
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>();
            for (o, id) in d.batch.origins().iter().zip(ids) {
                let real = feedline_actors::real_origin(d.pass, *o);
                let want = format!("t{}.tfrecord", id / 1_000_000);
                assert!(real.source.name().ends_with(&want), "{real:?} for id {id}");
                assert_eq!(real.record as i64, id % 1_000_000);
                seen += 1;
            }
        }
        assert_eq!(seen, 2 * COUNTS.iter().sum::<u64>());
    }
}

/// The payload of record `id`: its id's bytes, then a byte pattern of its
/// own; 40 KiB in even files (left in the file, read whole), 80 KiB in odd
/// ones (framed from their ends alone).
fn payload(id: i64) -> Vec<u8> {
    let kib = if (id / 1_000_000) % 2 == 1 { 80 } else { 40 };
    let mut b = id.to_le_bytes().to_vec();
    b.extend((0..kib << 10).map(|k: usize| (k as i64 * 7 + id) as u8));
    b
}

/// TFRecord files of records with an id and a large `img` byte string
/// (left in its file by the readers, each row referring to its own file).
fn large_record_files(dir: &Path, records: &[u64]) -> Vec<String> {
    (records.iter().enumerate())
        .map(|(f, &n)| {
            let path = dir.join(format!("big{f}.tfrecord"));
            let mut w = TfRecordWriter::create(&path, Compression::None).unwrap();
            for i in 0..n {
                let id = (f as u64 * 1_000_000 + i) as i64;
                let tensor = |values| Tensor {
                    values,
                    shape: vec![],
                };
                let rec = Record {
                    fields: vec![
                        ("id".into(), tensor(Values::I64(vec![id]))),
                        (
                            "img".into(),
                            tensor(Values::Bytes(feedline::BytesList::from_iter([&payload(
                                id,
                            )[..]]))),
                        ),
                    ],
                    location: Location::new(SourceId::intern("w"), i, None),
                };
                w.write_example(&rec).unwrap();
            }
            w.finish().unwrap();
            path.to_str().unwrap().to_string()
        })
        .collect()
}

/// Large rows read by position from several files into one chunk keep
/// their bytes: every record once per pass with its own payload, for any
/// readers and chunk sizes; a payload damaged on disk is refused naming its
/// file and record (its CRC checked on the batch's copy).
#[test]
fn large_rows_from_many_files_in_one_chunk_keep_their_bytes() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let counts = [9u64, 13, 6, 11];
        let files = large_record_files(dir.path(), &counts);
        for (seed, readers, chunk) in [(0u64, 1usize, 5usize), (5, 2, 16), (8, 3, 3)] {
            let loader = ordered(mode, &files, &dir.path().join("idx"), seed)
                .readers(readers)
                .chunk_records(chunk)
                .build()
                .unwrap();
            let mut per_pass: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
            for d in loader {
                let d = d.unwrap();
                let ids: Vec<i64> = d.batch.i64("id").unwrap().iter().copied().collect();
                let img = d.batch.bytes("img").unwrap();
                for (k, id) in ids.iter().enumerate() {
                    assert!(img.get(k) == &payload(*id)[..], "record {id}'s bytes");
                }
                per_pass.entry(d.pass).or_default().extend(ids);
            }
            assert_exactly_once(&sorted(&per_pass), &all_ids(&counts, &[]), 2);
        }
        // One byte of record 4's payload flipped on disk, in a file of each size.
        for bad in [2, 1] {
            let path = &files[bad];
            let mut bytes = std::fs::read(path).unwrap();
            let frame = bytes.len() / counts[bad] as usize;
            bytes[4 * frame + frame / 2] ^= 0x55;
            std::fs::write(path, bytes).unwrap();
            let e = ordered(mode, &files, &dir.path().join("idx"), 1)
                .build()
                .unwrap()
                .into_iter()
                .find_map(|d| d.err())
                .expect("the damage is found")
                .to_string();
            let name = format!("big{bad}.tfrecord");
            assert!(e.contains(&name) && e.contains("record 4"), "{e}");
            large_record_files(dir.path(), &counts);
        }
    }
}

/// Files of several pages of offsets each (4,096 offsets a page), their
/// pages shared by every run's reader: every record once per pass, for 1
/// and 2 readers and several seeds.
#[test]
fn files_of_many_index_pages_read_every_record_once() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let counts = [9000u64, 4097, 4096, 12];
        let files = tfrecord_files(dir.path(), &counts);
        for (seed, readers) in [(0u64, 1usize), (2, 2), (7, 2)] {
            let loader = ordered(mode, &files, &dir.path().join("idx"), seed)
                .readers(readers)
                .batch(64)
                .chunk_records(100)
                .build()
                .unwrap();
            let per_pass = sorted(&by_pass(&all(loader)));
            assert_exactly_once(&per_pass, &all_ids(&counts, &[]), 2);
        }
    }
}
