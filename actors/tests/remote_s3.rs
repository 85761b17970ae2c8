//! Remote sources on an S3-compatible server: moto's server mode
//! (`moto_server`, from PyPI's `moto[server]`) started on 127.0.0.1 by the
//! test, configured only through the standard environment (AWS_ENDPOINT_URL,
//! AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP).
//! `./test.sh` installs `moto[server]` in its venv and sets
//! `FEEDLINE_MOTO_SERVER` and `FEEDLINE_REQUIRE_S3`, so that the test runs
//! (and a server that cannot start fails it). Run alone without either,
//! it looks for `moto_server` on the PATH and, if there is none, says
//! SKIPPED and checks nothing.
//!
//! The client talks to moto through a fault-injecting proxy of the test's
//! own (loopback only): every 7th request (14 %) gets 503, 429, or its
//! answer cut in the middle — several faults in every run, so that some
//! land on the pipeline's own requests whatever the schedule.
//!
//! Checked: a glob `s3://bucket/train/*.jsonl` expands by listing (only the
//! matching keys, sorted), every record arrives exactly once per pass with
//! 1, 4 and 16 readers while the proxy injects faults, the retries are
//! counted, and a key that does not exist is an error naming its URL.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::s3::{request, start_moto, start_proxy};

fn jsonl(f: u64, rows: u64) -> Vec<u8> {
    (0..rows)
        .map(|r| format!("{{\"id\": {}, \"x\": [{r}.5, 1.0]}}\n", f * 1000 + r))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn s3_glob_lists_and_every_record_arrives_once_per_pass() {
    let Some(moto) = start_moto() else { return };
    let (proxy, injected) = start_proxy(moto.port, 7);
    feedline::remote::set_options(feedline::remote::RemoteOptions {
        part_bytes: 2048,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        ..Default::default()
    });
    // The standard environment, set before any S3 client exists (this
    // binary has this one test).
    for (k, v) in [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{proxy}")),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ] {
        std::env::set_var(k, v);
    }
    assert_eq!(request(moto.port, "PUT", "/bucket", b""), 200);
    for f in 0..4 {
        let key = format!("/bucket/train/part{f}.jsonl");
        assert_eq!(request(moto.port, "PUT", &key, &jsonl(f, 250)), 200);
    }
    assert_eq!(
        request(moto.port, "PUT", "/bucket/train/notes.txt", b"x"),
        200
    );
    assert_eq!(
        request(moto.port, "PUT", "/bucket/other/part9.jsonl", &jsonl(9, 5)),
        200
    );
    let urls: Vec<String> = (0..4)
        .map(|f| format!("s3://bucket/train/part{f}.jsonl"))
        .collect();
    let expanded =
        feedline::plan::expand_inputs(&["s3://bucket/train/*.jsonl".to_string()]).unwrap();
    assert_eq!(expanded, urls);
    let mut want: Vec<(String, u64)> = urls
        .iter()
        .flat_map(|u| (0..250).map(move |r| (u.clone(), r)))
        .collect();
    want.sort();
    for readers in [1, 4, 16] {
        let faults = injected.load(Ordering::SeqCst);
        let s =
            common::each_object_record_once_per_pass("s3://bucket/train/*.jsonl", readers, &want);
        let faults = injected.load(Ordering::SeqCst) - faults;
        // The pipeline's own count (the listing at build is not the
        // pipeline's; a fault on a read-ahead part dropped at the end of a
        // file is not retried).
        let retries = s.remote_retries;
        assert!(
            faults > 0 && retries > 0 && retries <= faults,
            "{readers} readers: {faults} faults injected, {retries} retries counted"
        );
        assert_eq!(s.remote_give_ups, 0, "{readers} readers");
        assert!(s.remote_requests > retries, "{readers} readers: {s:?}");
        assert!(
            s.summary_line().contains(&format!("{retries} retried")),
            "{}",
            s.summary_line()
        );
    }
    common::a_missing_object_is_one_attempt("s3://bucket/train/nope.jsonl");
}
