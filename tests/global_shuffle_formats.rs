//! `shuffle_mode` `global` and `block` over class-sorted files (each file
//! one class) of every format the issue names — TFRecord, JSON Lines, CSV,
//! WebDataset tar and Parquet — by identity, with many seeds: every record
//! once per pass, each pass another permutation, uniform by its measures
//! (the neighbour distance of the order delivered, every class in every
//! window), and the same batches for 1 and 3 readers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::Compression;
use feedline::{Location, Record, SourceId, Tensor, Values};
use feedline_actors::{Loader, ShuffleMode};

/// Classes (files) and records per class.
const CLASSES: u64 = 4;
const PER_CLASS: u64 = 100;

/// The id of record `i` of class `c`: its original position is
/// `c * PER_CLASS + i` (file order, then record).
fn id(c: u64, i: u64) -> i64 {
    (c * 1_000_000 + i) as i64
}

fn position(id: i64) -> u64 {
    (id as u64 / 1_000_000) * PER_CLASS + id as u64 % 1_000_000
}

/// One file per class in `format`, its records' field `id` as [`id`].
fn class_files(format: &str, dir: &Path) -> Vec<String> {
    (0..CLASSES)
        .map(|c| {
            let ids: Vec<i64> = (0..PER_CLASS).map(|i| id(c, i)).collect();
            let path = dir.join(format!("class{c}.{format}"));
            match format {
                "tfrecord" => {
                    let mut w = TfRecordWriter::create(&path, Compression::None).unwrap();
                    for (i, &v) in ids.iter().enumerate() {
                        let rec = Record {
                            fields: vec![(
                                "id".into(),
                                Tensor {
                                    values: Values::I64(vec![v]),
                                    shape: vec![],
                                },
                            )],
                            location: Location::new(SourceId::intern("w"), i as u64, None),
                        };
                        w.write_example(&rec).unwrap();
                    }
                    w.finish().unwrap();
                }
                "jsonl" => {
                    let text: String = ids.iter().map(|v| format!("{{\"id\": {v}}}\n")).collect();
                    std::fs::write(&path, text).unwrap();
                }
                "csv" => {
                    let text: String = std::iter::once("id,x\n".to_string())
                        .chain(ids.iter().map(|v| format!("{v},{v}.5\n")))
                        .collect();
                    std::fs::write(&path, text).unwrap();
                }
                "tar" => {
                    let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
                    for (i, v) in ids.iter().enumerate() {
                        for (ext, data) in [("id", v.to_string()), ("txt", format!("text {v}"))] {
                            let mut h = tar::Header::new_ustar();
                            h.set_size(data.len() as u64);
                            h.set_cksum();
                            b.append_data(&mut h, format!("s{i:05}.{ext}"), data.as_bytes())
                                .unwrap();
                        }
                    }
                    b.finish().unwrap();
                }
                "parquet" => {
                    let col: arrow_array::ArrayRef =
                        Arc::new(arrow_array::Int64Array::from(ids.clone()));
                    let batch = arrow_array::RecordBatch::try_from_iter([("id", col)]).unwrap();
                    // Row groups of 16 rows: a position is a row group and
                    // a row in it.
                    let props = parquet::file::properties::WriterProperties::builder()
                        .set_max_row_group_row_count(Some(16))
                        .build();
                    let file = std::fs::File::create(&path).unwrap();
                    let mut w =
                        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))
                            .unwrap();
                    w.write(&batch).unwrap();
                    w.close().unwrap();
                }
                other => panic!("no writer for {other}"),
            }
            path.to_str().unwrap().to_string()
        })
        .collect()
}

const FORMATS: [&str; 5] = ["tfrecord", "jsonl", "csv", "tar", "parquet"];

/// Each pass's ids in the order delivered.
type PerPass = BTreeMap<u64, Vec<i64>>;

/// The batches delivered, as (pass, ids).
type Batches = Vec<(u64, Vec<i64>)>;

/// Every pass's ids in the order delivered, and the batches as (pass, ids).
fn run(
    mode: ShuffleMode,
    files: &[String],
    index_dir: &Path,
    seed: u64,
    readers: usize,
) -> (PerPass, Batches) {
    let loader = Loader::builder()
        .files(files.to_vec())
        .shard_from_env(false)
        .shuffle_mode(mode)
        .shuffle(64)
        .index_dir(index_dir)
        .batch(10)
        .chunk_records(7)
        .readers(readers)
        .passes(2)
        .seed(seed)
        .build()
        .unwrap();
    let mut per_pass = PerPass::new();
    let mut batches = Vec::new();
    for d in loader {
        let d = d.unwrap();
        let ids: Vec<i64> = d.batch.i64("id").unwrap().iter().copied().collect();
        per_pass.entry(d.pass).or_default().extend(&ids);
        batches.push((d.pass, ids));
    }
    (per_pass, batches)
}

fn all_ids() -> Vec<i64> {
    let mut v: Vec<i64> = (0..CLASSES)
        .flat_map(|c| (0..PER_CLASS).map(move |i| id(c, i)))
        .collect();
    v.sort();
    v
}

/// The mean distance between consecutive records' original positions,
/// over a uniform permutation's expectation, (n + 1) / 3.
fn neighbour_distance(ids: &[i64]) -> f64 {
    let n = ids.len() as f64;
    let total: u64 = ids
        .windows(2)
        .map(|w| position(w[0]).abs_diff(position(w[1])))
        .sum();
    total as f64 / (n - 1.0) / ((n + 1.0) / 3.0)
}

fn assert_each_pass_exactly_once(what: &str, per_pass: &PerPass) {
    let want = all_ids();
    assert_eq!(per_pass.len(), 2, "{what}: passes delivered");
    for (p, ids) in per_pass {
        let mut ids = ids.clone();
        ids.sort();
        assert!(
            ids == want,
            "{what}, pass {p}: {} of {} ids, or repeats",
            ids.len(),
            want.len()
        );
    }
}

#[test]
fn global_mode_reads_every_format_once_per_pass_uniformly() {
    for format in FORMATS {
        let dir = tempfile::tempdir().unwrap();
        let files = class_files(format, dir.path());
        let mut worst_window = 0usize;
        let mut distances = Vec::new();
        for seed in 0..6u64 {
            let what = format!("{format}, seed {seed}");
            let (per_pass, _) = run(
                ShuffleMode::Global,
                &files,
                &dir.path().join("idx"),
                seed,
                2,
            );
            assert_each_pass_exactly_once(&what, &per_pass);
            assert_ne!(per_pass[&0], per_pass[&1], "{what}: a pass repeated");
            for ids in per_pass.values() {
                distances.push(neighbour_distance(ids));
                for w in ids.chunks(40) {
                    let mut per_class = [0usize; CLASSES as usize];
                    for &id in w {
                        per_class[(id / 1_000_000) as usize] += 1;
                    }
                    assert!(
                        per_class.iter().all(|&c| c > 0),
                        "{what}: a window of 40 lacks a class: {per_class:?}"
                    );
                    worst_window = worst_window.max(*per_class.iter().max().unwrap());
                }
            }
        }
        // 12 permutations of 400: their mean neighbour distance is 1 within
        // a few per cent; a streaming order over sorted files is near 0.
        let mean = distances.iter().sum::<f64>() / distances.len() as f64;
        assert!(
            (0.9..1.1).contains(&mean),
            "{format}: neighbour distance {mean:.3} ({distances:?})"
        );
        assert!(
            worst_window < 25,
            "{format}: a window of 40 held {worst_window} of one class"
        );
    }
}

#[test]
fn both_modes_give_the_same_batches_for_one_and_three_readers() {
    for format in FORMATS {
        let dir = tempfile::tempdir().unwrap();
        let files = class_files(format, dir.path());
        for mode in [ShuffleMode::Global, ShuffleMode::Block] {
            for seed in [3u64, 17, 40] {
                let what = format!("{format}, {mode:?}, seed {seed}");
                let idx = dir.path().join("idx");
                let (per_pass, one) = run(mode, &files, &idx, seed, 1);
                assert_each_pass_exactly_once(&what, &per_pass);
                let (_, three) = run(mode, &files, &idx, seed, 3);
                assert!(one == three, "{what}: 1 and 3 readers differ");
            }
        }
    }
}
