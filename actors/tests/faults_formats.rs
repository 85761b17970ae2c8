//! Bad input in NPY/NPZ, JSON Lines and CSV files through the actor
//! pipeline (the TFRecord faults are `faults_matrix.rs`): under the fail
//! policy the consumer gets one error naming the file and the record, and
//! no bad or doubled record before it; under skip every good record arrives
//! exactly once (by identity: file and record) and the skipped places are
//! listed — for several reader counts and seeds.

mod common;
mod data_files;

use std::collections::BTreeSet;
use std::path::Path;

use data_files::{npy_bytes, write_npz};
use feedline::{DType, Schema};
use feedline_actors::{ErrorPolicy, Loader};

/// Records per file.
const ROWS: u64 = 40;

/// One case: files, the schema, the good (file, record) places, the places
/// the skip policy must list (file, record), and what the fail error names
/// (all the words of one of the alternatives: readers race to the first).
struct Case {
    name: &'static str,
    files: Vec<String>,
    schema: Schema,
    good: BTreeSet<(String, u64)>,
    skipped: Vec<(String, u64)>,
    needles: Vec<Vec<String>>,
}

fn id_schema() -> Schema {
    Schema::builder()
        .field("id", DType::I64, [])
        .field("v", DType::F32, [])
        .build()
        .unwrap()
}

fn places(file: &str, records: impl IntoIterator<Item = u64>) -> Vec<(String, u64)> {
    records.into_iter().map(|r| (file.to_string(), r)).collect()
}

/// Three JSON Lines files; record 7 of the second is not JSON, record 19 of
/// the third has a string where a number belongs.
fn jsonl(dir: &Path) -> Case {
    let mut files = Vec::new();
    let mut good = BTreeSet::new();
    for f in 0..3u64 {
        let path = dir.join(format!("part{f}.jsonl"));
        let mut text = String::new();
        for r in 0..ROWS {
            let id = f * 1000 + r;
            match (f, r) {
                (1, 7) => text.push_str("{\"id\": 1007, \"v\": [1.5\n"),
                (2, 19) => text.push_str("{\"id\": 2019, \"v\": \"oops\"}\n"),
                _ => {
                    text.push_str(&format!("{{\"id\": {id}, \"v\": {}.5}}\n", r));
                    good.insert((path.to_string_lossy().into_owned(), r));
                }
            }
        }
        std::fs::write(&path, text).unwrap();
        files.push(path.to_string_lossy().into_owned());
    }
    let skipped = [places(&files[1], [7]), places(&files[2], [19])].concat();
    Case {
        name: "jsonl",
        needles: vec![
            vec!["part1.jsonl".into(), "record 7,".into()],
            vec![
                "part2.jsonl".into(),
                "record 19,".into(),
                "field `v`".into(),
            ],
        ],
        files,
        schema: id_schema(),
        good,
        skipped,
    }
}

/// Three CSV files; record 3 of the first has a cell missing, record 30 of
/// the second a number that is not one.
fn csv(dir: &Path) -> Case {
    let mut files = Vec::new();
    let mut good = BTreeSet::new();
    for f in 0..3u64 {
        let path = dir.join(format!("table{f}.csv"));
        let mut text = String::from("id,v\n");
        for r in 0..ROWS {
            let id = f * 1000 + r;
            match (f, r) {
                (0, 3) => text.push_str("3\n"),
                (1, 30) => text.push_str("1030,1.2.3\n"),
                _ => {
                    text.push_str(&format!("{id},{r}.25\n"));
                    good.insert((path.to_string_lossy().into_owned(), r));
                }
            }
        }
        std::fs::write(&path, text).unwrap();
        files.push(path.to_string_lossy().into_owned());
    }
    let skipped = [places(&files[0], [3]), places(&files[1], [30])].concat();
    Case {
        name: "csv",
        needles: vec![
            vec!["table0.csv".into(), "record 3,".into()],
            vec!["table1.csv".into(), "record 30,".into(), "`v`".into()],
        ],
        files,
        schema: id_schema(),
        good,
        skipped,
    }
}

fn npz_entries(f: u64) -> (Vec<u8>, Vec<u8>) {
    let ids: Vec<u8> = (0..ROWS)
        .flat_map(|r| ((f * 1000 + r) as i64).to_le_bytes())
        .collect();
    let vs: Vec<u8> = (0..ROWS).flat_map(|r| (r as f32).to_le_bytes()).collect();
    (
        npy_bytes("<i8", &[ROWS as usize], &ids),
        npy_bytes("<f4", &[ROWS as usize], &vs),
    )
}

/// Three `.npz` files; in the second a data byte of row 25 of `v` is
/// flipped (the entry's CRC-32 no longer holds: no row of that entry may be
/// delivered, and the error must not blame another row's place).
fn npz(dir: &Path) -> Case {
    let mut files = Vec::new();
    let mut good = BTreeSet::new();
    for f in 0..3u64 {
        let path = dir.join(format!("arrays{f}.npz"));
        let (ids, vs) = npz_entries(f);
        write_npz(&path, &[("id", &ids), ("v", &vs)]);
        if f == 1 {
            // Flip a data byte of row 25 of `v` inside the archive: the
            // entry's CRC-32 (written for the intact bytes) no longer holds.
            let mut zip = std::fs::read(&path).unwrap();
            let at = zip
                .windows(vs.len())
                .position(|w| w == vs.as_slice())
                .expect("a stored entry holds its bytes as they are");
            let data_start = at + vs.len() - ROWS as usize * 4;
            zip[data_start + 25 * 4 + 1] ^= 0x40;
            std::fs::write(&path, zip).unwrap();
        } else {
            for r in 0..ROWS {
                good.insert((path.to_string_lossy().into_owned(), r));
            }
        }
        files.push(path.to_string_lossy().into_owned());
    }
    Case {
        name: "npz",
        needles: vec![vec!["arrays1.npz".into(), "CRC".into()]],
        skipped: Vec::new(), // checked apart: the whole entry is lost
        files,
        schema: id_schema(),
        good,
    }
}

/// Three `.npy` files of one field `v`; the second is cut short inside row
/// 12 (its header promises `ROWS`): the whole file is a bad file.
fn npy(dir: &Path) -> Case {
    let mut files = Vec::new();
    let mut good = BTreeSet::new();
    for f in 0..3u64 {
        // The field is named after the file stem: `d{f}/v.npy` is field `v`.
        let path = subdir(dir, &format!("d{f}")).join("v.npy");
        let (_, vs) = npz_entries(f);
        if f == 1 {
            let data_start = vs.len() - ROWS as usize * 4;
            // The header promises more rows than the file holds: the file
            // is refused as it is opened, none of its rows delivered.
            std::fs::write(&path, &vs[..data_start + 12 * 4 + 2]).unwrap();
        } else {
            std::fs::write(&path, &vs).unwrap();
            for r in 0..ROWS {
                good.insert((path.to_string_lossy().into_owned(), r));
            }
        }
        files.push(path.to_string_lossy().into_owned());
    }
    Case {
        name: "npy",
        needles: vec![vec!["d1/v.npy".into()]],
        skipped: Vec::new(), // checked apart: the rest of the file is lost
        files,
        schema: Schema::builder()
            .field("v", DType::F32, [])
            .build()
            .unwrap(),
        good,
    }
}

fn run(case: &Case, readers: usize, seed: u64, policy: ErrorPolicy) -> Run {
    let loader = Loader::builder()
        .files(case.files.clone())
        .schema(case.schema.clone())
        .readers(readers)
        .batch(6)
        .shuffle(25)
        .chunk_records(5)
        .seed(seed)
        .shard_from_env(false)
        .error_policy(policy)
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let stats = loader.stats_handle();
    let (per_pass, errors) = common::origins(loader);
    let got = per_pass.into_values().flatten().collect();
    let skipped = stats
        .skipped()
        .into_iter()
        .map(|s| (s.source, s.record, s.rest_of_file))
        .collect();
    Run {
        got,
        errors,
        skipped,
    }
}

struct Run {
    got: Vec<(String, u64)>,
    errors: Vec<String>,
    skipped: Vec<(String, u64, bool)>,
}

#[test]
fn bad_input_in_every_text_and_numpy_format_under_both_policies() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        jsonl(&subdir(dir.path(), "j")),
        csv(&subdir(dir.path(), "c")),
        npz(&subdir(dir.path(), "z")),
        npy(&subdir(dir.path(), "y")),
    ];
    for case in &cases {
        for (readers, seed) in [(1, 0), (2, 1), (3, 2), (2, 7)] {
            let what = format!("{} readers {readers} seed {seed}", case.name);

            // Skip: every good record once, nothing else, the places listed.
            let r = run(case, readers, seed, ErrorPolicy::skip());
            assert!(r.errors.is_empty(), "{what}: {:?}", r.errors);
            let got: BTreeSet<(String, u64)> = r.got.iter().cloned().collect();
            assert_eq!(got.len(), r.got.len(), "{what}: a record came twice");
            let lost: Vec<_> = case.good.difference(&got).collect();
            let bad: Vec<_> = got.difference(&case.good).collect();
            assert!(
                lost.is_empty() && bad.is_empty(),
                "{what}: good records lost {lost:?}, bad ones delivered {bad:?}"
            );
            if case.skipped.is_empty() {
                // The bad file is named, from the first record it lost on.
                assert_eq!(r.skipped.len(), 1, "{what}: {:?}", r.skipped);
                assert!(
                    r.skipped[0].0.ends_with(&case.needles[0][0]),
                    "{what}: {:?}",
                    r.skipped
                );
            } else {
                let mut listed: Vec<(String, u64)> = r
                    .skipped
                    .iter()
                    .map(|(s, rec, _)| (s.clone(), *rec))
                    .collect();
                listed.sort();
                assert_eq!(listed, case.skipped, "{what}");
            }

            // Fail: one error naming the place; no bad or doubled record first.
            let r = run(case, readers, seed, ErrorPolicy::Fail);
            assert_eq!(r.errors.len(), 1, "{what}: {:?}", r.errors);
            assert!(
                case.needles
                    .iter()
                    .any(|words| words.iter().all(|w| r.errors[0].contains(w.as_str()))),
                "{what}: `{}` names none of {:?}",
                r.errors[0],
                case.needles
            );
            let got: BTreeSet<(String, u64)> = r.got.iter().cloned().collect();
            assert_eq!(got.len(), r.got.len(), "{what}: a record came twice");
            assert!(
                got.is_subset(&case.good),
                "{what}: a bad record was delivered"
            );
        }
    }
}

/// A new directory `name` under `dir`.
fn subdir(dir: &Path, name: &str) -> std::path::PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}
