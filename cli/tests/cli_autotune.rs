//! `--autotune`, `--cpus`, `--memory-budget` on `run` and `bench`: what
//! the tuner chose is in `--json` (the `autotune` object, of exactly its
//! keys; in each pass's object of `bench`) and in the summary; the budgets
//! are refused in the flags' words as every setting is.

mod cli_common;

use cli_common::*;
use serde_json::Value;

fn files(dir: &std::path::Path) -> Vec<String> {
    small_files(dir, 3, 200)
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// The `autotune` object has its keys, and nothing else.
fn check_autotune(a: &Value) {
    assert_eq!(keys(a), ["changes", "values"], "{a}");
    assert_eq!(
        keys(&a["values"]),
        [
            "batches_in_flight",
            "chunks_in_flight",
            "readers",
            "workers"
        ],
        "{a}"
    );
    for v in a["values"].as_object().unwrap().values() {
        assert!(v.is_u64(), "{a}");
    }
    assert!(a["values"]["readers"].as_u64().unwrap() >= 1);
    for c in a["changes"].as_array().unwrap() {
        assert_eq!(
            keys(c),
            ["from", "rate_after", "rate_before", "setting", "t_s", "to"],
            "{c}"
        );
        let setting = c["setting"].as_str().unwrap();
        assert!(
            [
                "readers",
                "workers",
                "batches_in_flight",
                "chunks_in_flight"
            ]
            .contains(&setting),
            "{c}"
        );
    }
}

#[test]
fn run_json_and_summary_say_what_the_tuner_chose() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let mut args: Vec<&str> = vec!["run"];
    args.extend(f.iter().map(String::as_str));
    args.extend([
        "--batch",
        "16",
        "--autotune",
        "--cpus",
        "2",
        "--memory-budget",
        "2GiB",
    ]);
    let o = feedline(&[&args[..], &["--json"]].concat());
    assert_no_panic(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    check_autotune(&v["autotune"]);
    // Two CPUs: the readers it chose leave one to spare at most.
    assert!(v["autotune"]["values"]["readers"].as_u64().unwrap() <= 2);
    let o = feedline(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.starts_with("autotune: readers "))
        .unwrap_or_else(|| panic!("no autotune line in {text}"));
    assert!(line.contains("changes kept of"), "{line}");
    // Without --autotune: none.
    let mut plain: Vec<&str> = vec!["run"];
    plain.extend(f.iter().map(String::as_str));
    plain.extend(["--batch", "16", "--json"]);
    let o = feedline(&plain);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["autotune"].is_null(), "{}", v["autotune"]);
}

#[test]
fn bench_json_has_the_autotune_object_in_each_pass() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let mut args: Vec<&str> = vec!["bench"];
    args.extend(f.iter().map(String::as_str));
    args.extend(["--batch", "16", "--autotune", "--repeats", "2", "--json"]);
    let o = feedline(&args);
    assert_no_panic(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let passes: Vec<Value> = (stdout(&o).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(passes.len() >= 2, "{}", stdout(&o));
    for p in &passes {
        check_autotune(&p["autotune"]);
    }
}

#[test]
fn budgets_are_refused_in_the_flags_words() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--autotune", "--cpus", "0"],
            "--cpus must be at least 1, not 0",
        ),
        (
            vec!["--cpus", "4"],
            "--cpus 4 applies only with --autotune (the budget it tunes within)",
        ),
        (
            vec!["--memory-budget", "1GiB"],
            "--memory-budget 1024MiB applies only with --autotune (the budget it tunes within)",
        ),
    ];
    for (flags, sentence) in cases {
        let mut args: Vec<&str> = vec!["run", &f[0]];
        args.extend(&flags);
        assert_refused(&args, sentence);
    }
    // Deterministic mode holds a 64 MiB reorder window whatever the records.
    let o = feedline(&[
        "run",
        &f[0],
        "--deterministic",
        "--autotune",
        "--memory-budget",
        "1MiB",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--memory-budget 1MiB is below the least in-flight bound of these settings, 67108864 bytes"),
        "{err}"
    );
    // A size that is not one: clap's refusal, naming the flag.
    let o = feedline(&["run", &f[0], "--autotune", "--memory-budget", "lots"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--memory-budget"), "{}", stderr(&o));
}

/// `feedline run FILES ARGS --json` to a successful end: its JSON, and
/// the autotuner's log line of the settings it may change (`RUST_LOG` at
/// `info` for the tuner).
fn run_json(files: &[String], args: &[&str]) -> (Value, String) {
    let mut all: Vec<&str> = vec!["run"];
    all.extend(files.iter().map(String::as_str));
    all.extend(args);
    all.push("--json");
    let o = command(&all)
        .env("RUST_LOG", "feedline_actors::autotune=info")
        .output()
        .expect("run feedline");
    assert_no_panic(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let tunable = stderr(&o)
        .lines()
        .find(|l| l.contains("autotune: ["))
        .unwrap_or_default()
        .to_string();
    (serde_json::from_str(&stdout(&o)).unwrap(), tunable)
}

/// `--chunks-in-flight` given: the tuner leaves it (not among the settings
/// it may change, its value in the `autotune` object); 0 is refused naming
/// the flag. `--memory-budget` sizes the shuffle pool not given, so the
/// stated bound (`in_flight_bound_bytes`) is within the budget.
#[test]
fn chunks_in_flight_given_is_left_and_the_bound_is_within_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let tuned = ["--batch", "16", "--autotune"];
    let (_, tunable) = run_json(&f, &tuned);
    assert!(
        tunable.contains("ChunksInFlight"),
        "not given: the tuner's: {tunable}"
    );
    let (v, tunable) = run_json(&f, &[&tuned[..], &["--chunks-in-flight", "3"]].concat());
    check_autotune(&v["autotune"]);
    assert!(
        !tunable.is_empty() && !tunable.contains("ChunksInFlight"),
        "{tunable}"
    );
    assert_eq!(v["autotune"]["values"]["chunks_in_flight"], 3, "{v}");
    for c in v["autotune"]["changes"].as_array().unwrap() {
        assert_ne!(c["setting"], "chunks_in_flight", "{c}");
    }
    let o = feedline(&["run", &f[0], "--chunks-in-flight", "0"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--chunks-in-flight"), "{}", stderr(&o));

    let budget: u64 = 64 << 20;
    let with_budget = [&tuned[..], &["--memory-budget", "64MiB"]].concat();
    let (v, _) = run_json(&f, &with_budget);
    let bound = v["in_flight_bound_bytes"].as_u64().unwrap();
    assert!(
        bound <= budget,
        "bound {bound} over the budget {budget}: {v}"
    );
    // The pool's bound given: left, and then the bound is the default's.
    let (w, _) = run_json(&f, &[&with_budget[..], &["--shuffle-mib", "256"]].concat());
    assert!(w["in_flight_bound_bytes"].as_u64().unwrap() > bound, "{w}");
}
