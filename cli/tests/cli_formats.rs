//! `feedline cat` and `inspect` on Parquet files written by pyarrow and
//! WebDataset shards written by webdataset's ShardWriter: the output is
//! what those libraries read (the repository's fixtures, made by
//! tests/fixtures/make_parquet.py and make_wds.py); a null is an error
//! naming file, record and column.

mod cli_common;
use cli_common::{assert_no_panic, feedline, stderr, stdout};

use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    p.to_str().unwrap().to_string()
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn expected(name: &str) -> Vec<serde_json::Value> {
    json_lines(&std::fs::read_to_string(fixture(name)).unwrap())
}

#[test]
fn cat_prints_what_pyarrow_reads() {
    let want = expected("pq_table.expected.jsonl");
    for codec in ["none", "snappy", "zstd", "gzip"] {
        let out = feedline(&["cat", &fixture(&format!("pq_table.{codec}.parquet"))]);
        assert!(out.status.success(), "{codec}: {}", stderr(&out));
        assert_eq!(json_lines(&stdout(&out)), want, "{codec}");
    }
}

#[test]
fn cat_prints_what_webdataset_reads() {
    let want = expected("wds.expected.jsonl");
    let out = feedline(&[
        "cat",
        &fixture("wds-000000.tar"),
        &fixture("wds-000001.tar"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_lines(&stdout(&out)), want);
    let out = feedline(&["cat", &fixture("wds-gz-000000.tar.gz")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_lines(&stdout(&out)), want);
}

#[test]
fn a_null_stops_cat_with_file_record_and_column() {
    let out = feedline(&["cat", &fixture("pq_nulls.parquet")]);
    assert_no_panic(&out);
    assert!(!out.status.success());
    assert_eq!(json_lines(&stdout(&out)).len(), 2);
    let err = stderr(&out);
    for part in ["pq_nulls.parquet", "record 2", "field `label`", "null"] {
        assert!(err.contains(part), "{err}");
    }
}

#[test]
fn inspect_shows_the_parquet_and_webdataset_schemas() {
    let out = feedline(&["inspect", &fixture("pq_table.snappy.parquet")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for part in [
        "(parquet): 10 records",
        "tokens: [?] i64",
        "x: [3] f32",
        "grid: [2, 2] i32",
    ] {
        assert!(text.contains(part), "{text}");
    }
    let out = feedline(&["inspect", &fixture("wds-000000.tar")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for part in [
        "(wds): 7 records",
        "cls: [] i64",
        "jpg: [] bytes",
        "__key__: [] bytes",
    ] {
        assert!(text.contains(part), "{text}");
    }
}
