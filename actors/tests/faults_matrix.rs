//! Fault matrix on real TFRecord files: a bad payload CRC, a bad length CRC,
//! a truncated file, an undecodable payload and a missing file, each under
//! the fail and the skip policy; and a bad byte in a large image that stays
//! in the mapped file (its CRC is checked as collation copies it under the
//! fail policy, as it is read under skip) for a `u8` and a `bytes` schema,
//! also when it is collated in the end-of-pass drain. With fail, the consumer gets an error naming
//! file, record and offset, and every pipeline thread ends; with skip, every
//! good record arrives exactly once and the stats list every skipped place.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use feedline::format::tfrecord::{TfRecordReader, TfRecordWriter};
use feedline::format::{Compression, OpenOptions};
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline_actors::{ErrorPolicy, Loader, SkippedRecord};

#[derive(Clone, Copy, Debug)]
enum Fault {
    PayloadCrc,
    LengthCrc,
    Truncated,
    Undecodable,
    Missing,
    /// A bad byte inside record 17's image, large-preset files.
    MappedImageCrc {
        bytes: bool,
    },
}

impl Fault {
    fn preset(self) -> Preset {
        match self {
            Fault::MappedImageCrc { .. } => Preset::Large,
            _ => Preset::Small,
        }
    }

    /// The schema to read the files with.
    fn schema(self) -> feedline::Schema {
        match self {
            Fault::MappedImageCrc { bytes: true } => feedline::Schema::builder()
                .field("image", feedline::DType::Bytes, [1])
                .field("label", feedline::DType::I64, [1])
                .build()
                .unwrap(),
            _ => feedline::synthetic::preset_schema(self.preset()),
        }
    }
}

struct Case {
    files: Vec<String>,
    /// (file, record) pairs that are good.
    good: Vec<(String, u64)>,
    /// What the error must say.
    needle: String,
    /// Skipped places expected under skip: (file, record, offset, rest_of_file).
    skipped: Vec<(String, u64, Option<u64>, bool)>,
}

fn frame_offsets(path: &Path) -> Vec<u64> {
    let mut r = TfRecordReader::open(path, &OpenOptions::default()).unwrap();
    let mut v = Vec::new();
    while let Some((_, loc)) = r.next_frame().unwrap() {
        v.push(loc.offset.unwrap());
    }
    v
}

fn setup(dir: &Path, fault: Fault) -> Case {
    let records = match fault.preset() {
        Preset::Small => 50,
        Preset::Large => 24,
    };
    let mut opts = GenOptions::new(fault.preset(), dir);
    opts.files = Some(3);
    opts.records = Some(records);
    let paths: Vec<PathBuf> = generate(&opts).unwrap();
    let victim = paths[1].clone();
    let v = victim.to_string_lossy().into_owned();
    let offsets = frame_offsets(&victim);
    let k = 17u64;
    let off = offsets[k as usize];
    let mut bytes = std::fs::read(&victim).unwrap();
    let mut good: Vec<(String, u64)> = paths
        .iter()
        .flat_map(|p| (0..records as u64).map(move |i| (p.to_string_lossy().into_owned(), i)))
        .collect();
    let mut files: Vec<String> = paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let (needle, skipped) = match fault {
        Fault::PayloadCrc | Fault::MappedImageCrc { .. } => {
            let at = match fault {
                Fault::PayloadCrc => 5,
                _ => 75_000,
            };
            bytes[off as usize + 12 + at] ^= 0x40;
            good.retain(|(f, i)| !(f == &v && *i == k));
            (
                format!("{v}: record {k}, offset {off}: bad payload CRC"),
                vec![(v.clone(), k, Some(off), false)],
            )
        }
        Fault::LengthCrc => {
            bytes[off as usize] ^= 0x01;
            good.retain(|(f, i)| !(f == &v && *i >= k));
            (
                format!("{v}: record {k}, offset {off}: bad length CRC"),
                vec![(v.clone(), k, Some(off), true)],
            )
        }
        Fault::Truncated => {
            bytes.truncate(off as usize + 30);
            good.retain(|(f, i)| !(f == &v && *i >= k));
            (
                format!("{v}: record {k}, offset {off}: truncated"),
                vec![(v.clone(), k, Some(off), true)],
            )
        }
        Fault::Undecodable => {
            // Rewrite the file with record k replaced by framed garbage.
            let mut r = TfRecordReader::open(&victim, &OpenOptions::default()).unwrap();
            let mut w = TfRecordWriter::new(Vec::new(), Compression::None);
            let mut i = 0;
            while let Some(p) = r.next_payload().unwrap() {
                if i == k {
                    w.write_record(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x01])
                        .unwrap();
                } else {
                    w.write_record(p).unwrap();
                }
                i += 1;
            }
            bytes = w.finish().unwrap();
            good.retain(|(f, i)| !(f == &v && *i == k));
            (
                format!("{v}: record {k}, offset {off}: undecodable"),
                vec![(v.clone(), k, Some(off), false)],
            )
        }
        Fault::Missing => {
            let missing = dir.join("gone.tfrecord").to_string_lossy().into_owned();
            files.push(missing.clone());
            (missing.clone(), vec![(missing, 0, None, true)])
        }
    };
    std::fs::write(&victim, bytes).unwrap();
    good.sort();
    Case {
        files,
        good,
        needle,
        skipped,
    }
}

/// A loader of `case`'s files: 2 readers, batches of 16, chunks of 10.
fn loader(case: &Case, fault: Fault, shuffle: usize, seed: u64, policy: ErrorPolicy) -> Loader {
    Loader::builder()
        .files(case.files.clone())
        .schema(fault.schema())
        .readers(2)
        .batch(16)
        .shuffle(shuffle)
        .seed(seed)
        .chunk_records(10)
        .error_policy(policy)
        .build()
        .unwrap()
}

/// The tests of this file run one at a time: each counts the process's
/// pipeline threads after its loaders are dropped.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pipeline_threads() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with("feedline-system"))
        .count()
}

#[test]
fn every_fault_under_both_policies() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for fault in [
        Fault::PayloadCrc,
        Fault::LengthCrc,
        Fault::Truncated,
        Fault::Undecodable,
        Fault::Missing,
        Fault::MappedImageCrc { bytes: false },
        Fault::MappedImageCrc { bytes: true },
    ] {
        for skip in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let case = setup(dir.path(), fault);
            let policy = if skip {
                ErrorPolicy::skip()
            } else {
                ErrorPolicy::Fail
            };
            let loader = loader(&case, fault, 64, 0, policy);
            let stats = loader.stats_handle();
            let (per_pass, errors) = common::origins(loader);
            let mut got: Vec<(String, u64)> = per_pass.into_values().flatten().collect();
            // The loader was dropped: its system thread must be gone at once.
            let t0 = Instant::now();
            while pipeline_threads() > 0 && t0.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(pipeline_threads(), 0, "{fault:?}: threads left");
            got.sort();
            if skip {
                assert!(errors.is_empty(), "{fault:?}: {errors:?}");
                assert!(
                    got == case.good,
                    "{fault:?}: good records lost or repeated ({} vs {})",
                    got.len(),
                    case.good.len()
                );
                let skipped: Vec<(String, u64, Option<u64>, bool)> = stats
                    .skipped()
                    .into_iter()
                    .map(|s: SkippedRecord| (s.source, s.record, s.offset, s.rest_of_file))
                    .collect();
                assert_eq!(skipped, case.skipped, "{fault:?}");
            } else {
                assert_eq!(errors.len(), 1, "{fault:?}: {errors:?}");
                assert!(
                    errors[0].contains(&case.needle),
                    "{fault:?}: {} lacks {}",
                    errors[0],
                    case.needle
                );
                // Nothing was delivered twice before the failure, and not
                // the bad record.
                let n = got.len();
                got.dedup();
                assert_eq!(got.len(), n, "{fault:?}: duplicates");
                assert!(
                    got.iter().all(|r| case.good.binary_search(r).is_ok()),
                    "{fault:?}: a bad record was delivered"
                );
            }
        }
    }
}

/// A bad image collated in the end-of-pass drain (a shuffle pool larger
/// than the data: every batch comes from the drain) fails the pass with its
/// error: the queue must not be closed as if the pass had ended.
#[test]
fn a_bad_image_in_the_end_of_pass_drain_fails_the_pass() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for bytes in [false, true] {
        let fault = Fault::MappedImageCrc { bytes };
        for seed in 0..8 {
            let dir = tempfile::tempdir().unwrap();
            let case = setup(dir.path(), fault);
            let loader = loader(&case, fault, 10_000, seed, ErrorPolicy::Fail);
            let mut got = 0;
            let mut errors = Vec::new();
            for d in loader {
                match d {
                    Ok(d) => got += d.batch.len(),
                    Err(e) => errors.push(e.to_string()),
                }
            }
            assert_eq!(
                errors.len(),
                1,
                "{fault:?} seed {seed}: {got} records, {errors:?}"
            );
            assert!(errors[0].contains(&case.needle), "{}", errors[0]);
            assert!(got < case.good.len() + 1, "{got}");
        }
    }
}
