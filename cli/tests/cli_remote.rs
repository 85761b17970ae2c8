//! The command over remote objects (moved from the actor crate's
//! `remote_http.rs`): `cat`, `run` and `inspect` of `http://` URLs served by
//! the examples' HTTP store on 127.0.0.1, with `--cache-dir`: each object is
//! read from the store once, later reads come from the cache; brace ranges
//! expand over URLs; `--cache-dir` without `--cache-max-bytes` is refused.

mod cli_common;
// The examples' HTTP object store (GET with `Range`, HEAD, ETags).
#[allow(dead_code)]
#[path = "../../examples/common/http_store.rs"]
mod http_store;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cli_common::{code, feedline, stderr, stdout};
use http_store::{HttpStore, Shape};

/// `files` JSON Lines files of `rows` records each: `{"id": f*1000+r, "v": …}`.
fn jsonl_files(files: u64, rows: u64) -> HashMap<String, Vec<u8>> {
    (0..files)
        .map(|f| {
            let mut text = String::new();
            for r in 0..rows {
                text.push_str(&format!(
                    "{{\"id\": {}, \"v\": [{}.5, {}.25]}}\n",
                    f * 1000 + r,
                    r,
                    f
                ));
            }
            (format!("/data/part{f}.jsonl"), text.into_bytes())
        })
        .collect()
}

/// The entries (`*.obj`) and temporary files (`.tmp-*`) in a cache
/// directory.
fn cache_files(dir: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let mut objs = Vec::new();
    let mut tmps = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") {
            tmps.push(name);
        } else if name.ends_with(".obj") {
            objs.push(name);
        }
    }
    (objs, tmps)
}

#[test]
fn cli_cat_and_run_with_cache_dir_read_each_object_from_the_store_once() {
    let files = jsonl_files(2, 80);
    let server = HttpStore::start(
        files,
        Shape {
            latency: Duration::ZERO,
            bytes_per_s: None,
        },
    )
    .unwrap();
    let urls: Vec<String> = (0..2)
        .map(|f| server.url(&format!("data/part{f}.jsonl")))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c");
    let cache_s = cache.to_string_lossy().into_owned();
    let flags = [
        "--cache-dir",
        cache_s.as_str(),
        "--cache-max-bytes",
        "1000000",
    ];
    let gets = || server.counts.gets.load(Ordering::SeqCst);

    let mut args = vec!["cat"];
    args.extend(urls.iter().map(String::as_str));
    args.extend(flags);
    let first = feedline(&args);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(stdout(&first).lines().count(), 160);
    let after_first = gets();
    assert!(after_first > 0);
    assert_eq!(cache_files(&cache).0.len(), 2);
    let second = feedline(&args);
    assert_eq!(stdout(&second), stdout(&first));
    assert_eq!(gets(), after_first, "cat: the second read made a GET");

    let mut args = vec!["run", "--passes", "2", "--batch", "16"];
    args.extend(urls.iter().map(String::as_str));
    args.extend(flags);
    let run = feedline(&args);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    assert_eq!(gets(), after_first, "run: a GET of a cached object");
    let out = stdout(&run);
    assert!(out.contains("320 records"), "{out}");
    assert!(out.contains("remote cache: 4 objects"), "{out}");

    // Brace ranges in cat and inspect, over URLs.
    let braces = server.url("data/part{0..1}.jsonl");
    let cat = feedline(&["cat", braces.as_str()]);
    assert_eq!(code(&cat), 0, "{}", stderr(&cat));
    assert_eq!(stdout(&cat), stdout(&first));
    let inspect = feedline(&["inspect", "--json", braces.as_str()]);
    assert_eq!(code(&inspect), 0, "{}", stderr(&inspect));
    let report: serde_json::Value = serde_json::from_str(&stdout(&inspect)).unwrap();
    let names: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, [urls[0].as_str(), urls[1].as_str()], "{report}");
    let bad = feedline(&["cat", &server.url("data/part{3..1}.jsonl")]);
    assert_ne!(code(&bad), 0);
    assert!(stderr(&bad).contains("{3..1}"), "{}", stderr(&bad));

    // One of the pair without the other: a usage error naming the flag.
    let lone = feedline(&["cat", urls[0].as_str(), "--cache-dir", cache_s.as_str()]);
    assert_eq!(code(&lone), 2);
    assert!(
        stderr(&lone).contains("--cache-max-bytes"),
        "{}",
        stderr(&lone)
    );
}
