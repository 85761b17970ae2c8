//! `feedline run --trace` end to end on generated TFRecord and npy files:
//! every record reaches exactly one device exactly once per pass (checked
//! from the provenance), passes come in order on every device, and
//! deterministic runs give identical traces whatever the reader count.

mod cli_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use cli_common::{npy_bytes, small_files};
use serde_json::Value;

fn feedline(args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cli_common::feedline(&args)
}

/// One trace line: pass, device, seq, records.
type Line = (u64, u64, u64, Vec<(String, u64)>);

fn read_trace(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let recs = v["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()))
                .collect();
            (
                v["pass"].as_u64().unwrap(),
                v["device"].as_u64().unwrap(),
                v["seq"].as_u64().unwrap(),
                recs,
            )
        })
        .collect()
}

fn tfrecord_files(dir: &Path, files: usize, records: usize) -> Vec<(String, u64)> {
    small_files(dir, files, records)
        .into_iter()
        .map(|p| (p, records as u64))
        .collect()
}

/// Hand-written .npy: int64 rows [file, i], shape (n, 2), all named x.npy.
fn npy_files(dir: &Path, counts: &[u64]) -> Vec<(String, u64)> {
    counts
        .iter()
        .enumerate()
        .map(|(f, &n)| {
            let sub = dir.join(format!("part{f}"));
            std::fs::create_dir_all(&sub).unwrap();
            let path = sub.join("x.npy");
            let rows: Vec<u8> = (0..n as i64)
                .flat_map(|i| [(f as i64).to_le_bytes(), i.to_le_bytes()])
                .flatten()
                .collect();
            let bytes = npy_bytes("<i8", &[n as usize, 2], &rows);
            std::fs::write(&path, bytes).unwrap();
            (path.to_string_lossy().into_owned(), n)
        })
        .collect()
}

fn run_trace(files: &[(String, u64)], extra: &[&str], trace: &Path) -> Output {
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(files.iter().map(|f| f.0.clone()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--trace".into());
    args.push(trace.to_string_lossy().into_owned());
    feedline(&args)
}

fn check_exactly_once(trace: &[Line], files: &[(String, u64)], passes: u64, devices: u64) {
    let mut per_pass: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    let mut last_pass: BTreeMap<u64, u64> = BTreeMap::new();
    for (pass, device, _, recs) in trace {
        assert!(*device < devices);
        let lp = last_pass.entry(*device).or_insert(0);
        assert!(
            *pass >= *lp,
            "device {device} went back from pass {lp} to {pass}"
        );
        *lp = *pass;
        per_pass
            .entry(*pass)
            .or_default()
            .extend(recs.iter().cloned());
    }
    let mut want: Vec<(String, u64)> = files
        .iter()
        .flat_map(|(f, n)| (0..*n).map(move |i| (f.clone(), i)))
        .collect();
    want.sort();
    assert_eq!(per_pass.len() as u64, passes, "passes in the trace");
    for (p, mut got) in per_pass {
        got.sort();
        assert_eq!(got.len(), want.len(), "pass {p}: count");
        assert!(got == want, "pass {p}: not exactly once");
    }
}

#[test]
fn every_record_exactly_once_on_tfrecord_and_npy() {
    let dir = tempfile::tempdir().unwrap();
    let tf = tfrecord_files(&dir.path().join("tf"), 5, 300);
    let npy = npy_files(&dir.path().join("npy"), &[250, 0, 97, 400]);
    let trace = dir.path().join("trace.jsonl");
    let mut combos = 0;
    for (files, name) in [(&tf, "tfrecord"), (&npy, "npy")] {
        for readers in [1, 2, 4, 8] {
            for devices in [1, 3, 4] {
                let passes = if (readers + devices) % 2 == 0 { 3 } else { 1 };
                let seed = (readers * 10 + devices) as u64;
                let r = readers.to_string();
                let d = devices.to_string();
                let p = passes.to_string();
                let s = seed.to_string();
                let out = run_trace(
                    files,
                    &[
                        "--readers",
                        &r,
                        "--devices",
                        &d,
                        "--passes",
                        &p,
                        "--seed",
                        &s,
                        "--batch",
                        "64",
                        "--shuffle",
                        "500",
                        "--chunk-records",
                        "50",
                    ],
                    &trace,
                );
                assert!(
                    out.status.success(),
                    "{name}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                check_exactly_once(&read_trace(&trace), files, passes, devices as u64);
                combos += 1;
            }
        }
    }
    assert_eq!(combos, 24);
}

#[test]
fn deterministic_traces_are_identical_across_reader_counts() {
    let dir = tempfile::tempdir().unwrap();
    let tf = tfrecord_files(&dir.path().join("tf"), 6, 257);
    let mut traces = Vec::new();
    for readers in ["1", "3", "8"] {
        let trace = dir.path().join(format!("trace-{readers}.jsonl"));
        let out = run_trace(
            &tf,
            &[
                "--readers",
                readers,
                "--devices",
                "3",
                "--round-robin",
                "--deterministic",
                "--passes",
                "2",
                "--seed",
                "42",
                "--batch",
                "50",
                "--shuffle",
                "300",
                "--chunk-records",
                "20",
            ],
            &trace,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut t = read_trace(&trace);
        check_exactly_once(&t, &tf, 2, 3);
        t.sort_by_key(|l| (l.0, l.2));
        traces.push(t);
    }
    assert_eq!(traces[0], traces[1]);
    assert_eq!(traces[0], traces[2]);
    // And the shuffle did shuffle: pass 0 and pass 1 differ, and neither is file order.
    let pass_records = |p: u64| -> Vec<(String, u64)> {
        traces[0]
            .iter()
            .filter(|l| l.0 == p)
            .flat_map(|l| l.3.clone())
            .collect()
    };
    assert_ne!(pass_records(0), pass_records(1));
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_corrupt_file_fails_the_run_with_file_record_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let bad = fixture("corrupt_record3.tfrecord");
    let out = run_trace(
        &[(bad.clone(), 10)],
        &["--shuffle", "0"],
        &dir.path().join("t.jsonl"),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt_record3.tfrecord: record 3, offset 277"),
        "{err}"
    );
}

#[test]
fn skip_policy_delivers_every_good_record_and_names_the_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let bad = fixture("corrupt_record3.tfrecord");
    let good = fixture("examples.tfrecord");
    let trace = dir.path().join("t.jsonl");
    let mut args: Vec<String> = ["run", &bad, &good, "--on-error", "skip", "--trace"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(trace.to_string_lossy().into_owned());
    let out = feedline(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("skipped bad records: 1"), "{stdout}");
    let mut got: Vec<(String, u64)> = read_trace(&trace).into_iter().flat_map(|l| l.3).collect();
    got.sort();
    let mut want: Vec<(String, u64)> = (0..10)
        .filter(|&i| i != 3)
        .map(|i| (bad.clone(), i))
        .collect();
    want.extend((0..10).map(|i| (good.clone(), i)));
    want.sort();
    assert_eq!(got, want);
}
