//! Every flag of the `feedline` command is checked before anything starts:
//! a number outside its range is refused naming the flag, the value and the
//! range (never wrapped, never a panic, never silently replaced); a flag
//! that would be ignored in combination with another is an error that says
//! what to do; an output path that is one of the inputs is refused before
//! it is opened; a failed run says its error once.

mod cli_common;

use cli_common::*;
use feedline::synthetic::{generate, GenOptions, Preset};

fn fixture(name: &str) -> String {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// A refused usage: exit code 2, no panic, and the message names all of `parts`.
fn assert_refused(args: &[&str], parts: &[&str]) {
    let o = feedline(args);
    assert_no_panic(&o);
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{args:?} was not refused: {err}{}", stdout(&o));
    for p in parts {
        assert!(err.contains(p), "{args:?}: `{p}` not in: {err}");
    }
}

#[test]
fn every_number_outside_its_range_is_refused_by_flag_value_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(dir.path(), 2, 50);
    let f = files[0].as_str();
    let out = dir.path().join("gen").to_string_lossy().into_owned();
    // (command and flag, value, the range it states)
    let cases: &[(&[&str], &str, &str)] = &[
        (&["run", f, "--chunk-mib"], "17592186044416", "1..=4096"),
        (&["run", f, "--chunk-mib"], "0", "1..=4096"),
        (&["run", f, "--shuffle-mib"], "0", "1..=1048576"),
        (
            &["run", f, "--shuffle-mib"],
            "18446744073709551615",
            "1..=1048576",
        ),
        (&["run", f, "--readers"], "0", "1..=256"),
        (&["run", f, "--readers"], "100000", "1..=256"),
        (&["run", f, "--batch"], "0", "1..=1048576"),
        (&["run", f, "--batch"], "1000000000000", "1..=1048576"),
        (&["run", f, "--shuffle"], "99999999999", "0..=1073741824"),
        (&["run", f, "--min-pool"], "0", "1..=1073741824"),
        (&["run", f, "--chunk-records"], "0", "1..=1048576"),
        (&["run", f, "--capacity"], "0", "1..=1024"),
        (&["run", f, "--passes"], "0", "1..=1000000000"),
        (&["run", f, "--passes"], "1000000001", "1..=1000000000"),
        (&["run", f, "--devices"], "0", "1..=256"),
        (&["run", f, "--devices"], "100000", "1..=256"),
        (&["run", f, "--world-size"], "0", "1..=65536"),
        (&["run", f, "--rank"], "70000", "0..=65535"),
        (&["run", f, "--step-ms"], "inf", "0..=3600000"),
        (&["run", f, "--step-ms"], "NaN", "0..=3600000"),
        (&["run", f, "--step-ms"], "-1", "0..=3600000"),
        (&["run", f, "--step-ms"], "1e300", "0..=3600000"),
        (&["bench", f, "--repeats"], "0", "1..=10000"),
        (
            &["bench", f, "--warmup"],
            "18446744073709551615",
            "0..=10000",
        ),
        (&["bench", f, "--consumer-sleep-ms"], "inf", "0..=3600000"),
        (
            &["gen", "--preset", "small", "--out", &out, "--files"],
            "0",
            "1..=65536",
        ),
        (
            &["gen", "--preset", "small", "--out", &out, "--records"],
            "0",
            "1..=16777216",
        ),
    ];
    for (args, value, range) in cases {
        let flag = args.last().unwrap();
        let mut all = args.to_vec();
        all.push(value);
        assert_refused(&all, &[flag, value, range]);
    }
}

#[test]
fn max_bad_without_skip_is_refused_and_says_to_add_skip() {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(dir.path(), 1, 20);
    assert_refused(
        &["run", &files[0], "--max-bad", "3"],
        &["--max-bad 3", "--on-error skip"],
    );
    let ok = feedline(&["run", &files[0], "--max-bad", "3", "--on-error", "skip"]);
    assert_eq!(code(&ok), 0, "{}", stderr(&ok));
}

#[test]
fn readers_with_set_is_refused_and_says_where_readers_go() {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(dir.path(), 1, 20);
    let set = format!("a,1,2,{}", files[0]);
    assert_refused(
        &["run", "--set", &set, "--readers", "7"],
        &["--readers 7", "--set", "each set gives its own readers"],
    );
    assert_refused(&["run", &files[0], "--set", &set], &["--set", "not both"]);
}

#[test]
fn a_set_out_of_range_is_refused_by_its_part() {
    let dir = tempfile::tempdir().unwrap();
    let f = &small_files(dir.path(), 1, 20)[0];
    for (set, part) in [
        (format!("a,1,0,{f}"), "READERS \"0\" is not in 1..=256"),
        (
            format!("a,1,100000,{f}"),
            "READERS \"100000\" is not in 1..=256",
        ),
        (
            format!("a,NaN,2,{f}"),
            "WEIGHT NaN must be a positive finite number",
        ),
        (
            format!("a,inf,2,{f}"),
            "WEIGHT inf must be a positive finite number",
        ),
        (
            format!("a,-1,2,{f}"),
            "WEIGHT -1 must be a positive finite number",
        ),
        ("a,1,2".to_string(), "no files"),
    ] {
        assert_refused(&["run", "--set", &set], &["--set", part]);
    }
}

#[test]
fn pool_flags_beyond_the_pool_or_without_one_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = &small_files(dir.path(), 1, 20)[0];
    assert_refused(
        &["run", f, "--shuffle", "10", "--min-pool", "100"],
        &["--min-pool 100", "--shuffle 10", "at most 10"],
    );
    assert_refused(
        &["run", f, "--shuffle", "0", "--min-pool", "5"],
        &["--min-pool 5", "--shuffle 0"],
    );
    assert_refused(
        &["run", f, "--shuffle", "0", "--shuffle-mib", "64"],
        &["--shuffle-mib 64", "--shuffle 0"],
    );
}

#[test]
fn flags_a_benchmark_would_ignore_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = &small_files(dir.path(), 1, 20)[0];
    // What only a run of simulated devices has is not a benchmark's flag.
    for flag in [
        "--passes",
        "--round-robin",
        "--devices",
        "--step-ms",
        "--trace",
    ] {
        assert_refused(&["bench", f, flag, "3"], &[flag]);
    }
    for flag in [
        &["--readers", "3"][..],
        &["--capacity", "2"],
        &["--deterministic"],
    ] {
        let mut args = vec!["bench", f, "--single-thread"];
        args.extend_from_slice(flag);
        assert_refused(&args, &["--single-thread", flag[0]]);
    }
    assert_refused(
        &["bench", f, "--single-thread", "--on-error", "skip"],
        &["--on-error skip", "--single-thread"],
    );
    assert_refused(
        &["run", f, "--no-checksums", "--crc-on-read"],
        &["--crc-on-read", "--no-checksums"],
    );
}

#[test]
fn a_rank_outside_the_world_is_refused_naming_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let f = &small_files(dir.path(), 2, 20)[0];
    assert_refused(
        &["run", f, "--rank", "3", "--world-size", "2"],
        &["RANK=3", "WORLD_SIZE=2", "--rank", "--world-size"],
    );
    let o = command(&["run", f, "--world-size", "2"])
        .env("RANK", "5")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("RANK=5"), "{}", stderr(&o));
    // A rank given alone takes the world size from the environment (the
    // one rule of every face, `shard_given`), and a refusal says which
    // value came from a flag.
    let o = command(&["run", f, "--rank", "2"])
        .env("WORLD_SIZE", "2")
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim_end(),
        "feedline: error: invalid configuration: RANK=2 is out of range for WORLD_SIZE=2 \
         (ranks are 0..2) (RANK from --rank)"
    );
    let o = command(&["run", f, "--rank", "1"])
        .env("WORLD_SIZE", "2")
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The flag overrides a bad variable.
    let o = command(&["run", f, "--rank", "0"])
        .env("RANK", "x")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// The run fails with `what` in its error, said once.
fn assert_fails_saying_once(args: &[&str], what: &str) {
    let o = feedline(args);
    assert_eq!(code(&o), 1, "{args:?}");
    let err = stderr(&o);
    assert_eq!(err.matches(what).count(), 1, "{err}");
    assert!(err.starts_with("feedline: error: "), "{err}");
}

#[test]
fn a_failed_run_says_its_error_once() {
    // A bad record among the first (the schema is inferred from the ones before).
    let bad = fixture("corrupt_record3.tfrecord");
    assert_fails_saying_once(
        &["run", &bad, "--shuffle", "0"],
        "corrupt_record3.tfrecord: record 3, offset 277",
    );
    // A bad large record whose CRC is checked as collation copies it.
    let dir = tempfile::tempdir().unwrap();
    let mut opts = GenOptions::new(Preset::Large, dir.path());
    (opts.files, opts.records) = (Some(1), Some(20));
    let file = generate(&opts).unwrap().remove(0);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let file = file.to_str().unwrap();
    assert_fails_saying_once(
        &["run", file, "--shuffle", "0", "--batch", "4"],
        "bad payload CRC",
    );
}

/// `--trace` at `trace` is refused, naming it, and `victim` keeps its bytes.
fn assert_trace_refused(run: &[&str], trace: &str, victim: &std::path::Path) {
    let before = std::fs::read(victim).unwrap();
    let mut args = run.to_vec();
    args.extend(["--trace", trace]);
    assert_refused(&args, &["--trace", "input", "another path"]);
    assert_eq!(
        std::fs::read(victim).unwrap(),
        before,
        "{args:?} changed the input"
    );
}

#[test]
fn a_trace_onto_an_input_is_refused_before_the_input_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = small_files(&d.join("data"), 2, 30);
    let f0 = std::path::Path::new(&files[0]);
    let glob = format!("{}/*.tfrecord", d.join("data").display());
    // The same path, another spelling of it, a symbolic link to it, and the
    // file reached through a glob.
    let other = format!(
        "{}/../data/{}",
        d.join("data").display(),
        f0.file_name().unwrap().to_string_lossy()
    );
    let link = d.join("link.tfrecord");
    std::os::unix::fs::symlink(f0, &link).unwrap();
    for trace in [files[0].as_str(), other.as_str(), link.to_str().unwrap()] {
        assert_trace_refused(&["run", &glob], trace, f0);
    }
    // A file of a set, a list file, the schema file.
    let set = format!("s,1,1,{}", files[1]);
    assert_trace_refused(
        &["run", "--set", &set],
        &files[1],
        std::path::Path::new(&files[1]),
    );
    let list = d.join("train.list");
    std::fs::write(&list, format!("{}\n", files[0])).unwrap();
    let at_list = format!("@{}", list.display());
    assert_trace_refused(&["run", &at_list], list.to_str().unwrap(), &list);
    let schema = d.join("schema.json");
    std::fs::write(
        &schema,
        r#"{"fields": [{"name": "x", "dtype": "f32", "shape": [64]}, {"name": "y", "dtype": "i64", "shape": [1]}]}"#,
    )
    .unwrap();
    let schema_path = schema.to_str().unwrap();
    assert_trace_refused(
        &["run", &files[0], "--schema", schema_path],
        schema_path,
        &schema,
    );
    // Another path is fine.
    let trace = d.join("trace.jsonl");
    let o = feedline(&["run", &glob, "--trace", trace.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&trace).unwrap().lines().count(), 1);
}

#[test]
fn the_same_file_given_twice_is_refused_once_naming_both_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(&dir.path().join("data"), 2, 20);
    let glob = format!("{}/*.tfrecord", dir.path().join("data").display());
    for cmd in ["run", "bench"] {
        let o = feedline(&[cmd, &glob, &files[0]]);
        assert_no_panic(&o);
        assert_eq!(code(&o), 1, "{cmd}: {}", stdout(&o));
        let err = stderr(&o);
        let said = format!("is given twice, by `{glob}` and by `{}`", files[0]);
        assert_eq!(err.matches(&said).count(), 1, "{cmd}: {err}");
        assert!(err.starts_with("feedline: error: "), "{err}");
    }
}

#[test]
fn a_compression_an_npz_cannot_take_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y) = image_arrays(3);
    let npz = dir.path().join("a.npz");
    write_npz(&npz, &[("x", &x), ("y", &y)]);
    let npz = npz.to_str().unwrap();
    for args in [
        &["cat", npz, "--compression", "gzip"][..],
        &["run", npz, "--compression", "zlib"],
    ] {
        let o = feedline(args);
        assert_no_panic(&o);
        let printed = stdout(&o);
        assert_eq!(code(&o), 1, "{args:?} printed {} bytes", printed.len());
        let err = stderr(&o);
        assert!(
            err.contains("a.npz") && err.contains("not read through"),
            "{err}"
        );
    }
    let o = feedline(&["cat", npz, "--compression", "none"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}
