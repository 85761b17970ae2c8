//! JSON Lines and CSV: fixtures, value kinds, every error path (file, record,
//! offset, field), compression, start_record, the typed paths, round trips
//! and the chunk path against the generic one.

use std::io::Write;
use std::path::{Path, PathBuf};

use feedline::format::csv::CsvFormat;
use feedline::format::jsonl::JsonlFormat;
use feedline::format::{csv, jsonl, Compression, Format, OpenOptions, RecordReader, Registry};
use feedline::{Chunk, DType, Ragged, Schema, Values};
use proptest::prelude::*;

mod format_helpers;
use format_helpers::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn expected_lines(name: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(fixture(name))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn opts() -> OpenOptions {
    OpenOptions::default()
}

fn open(p: &Path) -> Box<dyn RecordReader> {
    Registry::with_builtin()
        .open(p.to_str().unwrap(), None, &opts())
        .unwrap()
}

/// Reading in chunks gives what the generic path gives, errors included.
fn chunk_equals_generic(path: &Path, schema: &Schema, max_records: usize, max_bytes: usize) {
    let run = |fast| chunk_log(open(path), schema, max_records, max_bytes, fast);
    assert!(run(true) == run(false));
}

// ---------------------------------------------------------------------------
// JSON Lines
// ---------------------------------------------------------------------------

#[test]
fn jsonl_fixture_matches_expected() {
    let mut r = open(&fixture("records.jsonl"));
    let recs = all_records(&mut *r);
    let want = expected_lines("records.expected.jsonl");
    assert_eq!(recs.len(), want.len());
    let mut offset = 0u64;
    let text = std::fs::read_to_string(fixture("records.jsonl")).unwrap();
    for (i, ((rec, w), line)) in recs.iter().zip(&want).zip(text.lines()).enumerate() {
        assert_eq!(&rec.to_json(), w, "record {i}");
        assert_eq!(rec.location.record, i as u64);
        assert_eq!(rec.location.offset, Some(offset));
        offset += line.len() as u64 + 1;
        assert_eq!(rec.get("x").unwrap().shape, vec![4]);
        assert_eq!(rec.get("x").unwrap().values.dtype(), DType::F64);
        assert_eq!(rec.get("y").unwrap().shape, Vec::<usize>::new());
        assert_eq!(rec.get("y").unwrap().values.dtype(), DType::I64);
    }
    let schema = Schema::builder()
        .field("x", DType::F32, [4])
        .field("y", DType::I64, [])
        .build()
        .unwrap();
    chunk_equals_generic(&fixture("records.jsonl"), &schema, 3, 1 << 20);
}

#[test]
fn jsonl_value_kinds_and_field_order() {
    let dir = tempfile::tempdir().unwrap();
    let text = concat!(
        r#"{"z": 1, "a": -2.5, "m": [[1, 2, 3], [4, 5, 6]], "f": [1, 2.0], "b": true, "bs": [[true], [false]], "s": "hé", "ss": ["a", "bc"], "e": [], "ee": [[], []], "big": -9223372036854775808}"#,
        "\r\n",
        "   \n",
        "\n",
        r#"{"only": 1e3}"#,
    );
    let p = write(dir.path(), "k.jsonl", text.as_bytes());
    let recs = all_records(&mut *open(&p));
    assert_eq!(recs.len(), 2);
    let r = &recs[0];
    let names: Vec<&str> = r.fields.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        ["z", "a", "m", "f", "b", "bs", "s", "ss", "e", "ee", "big"]
    );
    let t = |n: &str| r.get(n).unwrap().clone();
    assert_eq!(t("z").values, Values::I64(vec![1]));
    assert_eq!(t("z").shape, Vec::<usize>::new());
    assert_eq!(t("a").values, Values::F64(vec![-2.5]));
    assert_eq!(t("m").values, Values::I64(vec![1, 2, 3, 4, 5, 6]));
    assert_eq!(t("m").shape, vec![2, 3]);
    assert_eq!(t("f").values, Values::F64(vec![1.0, 2.0]));
    assert_eq!(t("b").values, Values::Bool(vec![true]));
    assert_eq!(t("bs").values, Values::Bool(vec![true, false]));
    assert_eq!(t("bs").shape, vec![2, 1]);
    assert_eq!(t("s").values.as_bytes().unwrap().get(0), "hé".as_bytes());
    assert_eq!(t("ss").values.as_bytes().unwrap().len(), 2);
    assert_eq!(t("ss").shape, vec![2]);
    assert_eq!((t("e").shape, t("e").values.len()), (vec![0], 0));
    assert_eq!((t("ee").shape, t("ee").values.len()), (vec![2, 0], 0));
    assert_eq!(t("big").values, Values::I64(vec![i64::MIN]));
    assert_eq!(recs[1].location.record, 1);
    assert_eq!(
        recs[1].location.offset,
        Some(text.find(r#"{"only""#).unwrap() as u64)
    );
    assert_eq!(
        recs[1].get("only").unwrap().values,
        Values::F64(vec![1000.0])
    );
}

#[test]
fn jsonl_errors_name_file_record_offset_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"x": 1}"#;
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        ("null", r#"{"x": 1, "y": null}"#, vec!["field `y`", "null"]),
        ("nullin", r#"{"y": [1, null]}"#, vec!["field `y`", "null"]),
        ("syntax", r#"{"x": [1, 2}"#, vec!["invalid JSON"]),
        ("eof", r#"{"x": [1, 2"#, vec!["invalid JSON"]),
        (
            "trailing",
            r#"{"x": 1} {"y": 2}"#,
            vec!["invalid JSON", "trailing"],
        ),
        (
            "ragged",
            r#"{"r": [[1, 2], [3]]}"#,
            vec!["field `r`", "ragged", "element 1"],
        ),
        ("ragged2", r#"{"r": [1, [3]]}"#, vec!["field `r`", "ragged"]),
        (
            "mixed",
            r#"{"q": [1, true]}"#,
            vec!["field `q`", "mixes numbers and booleans"],
        ),
        (
            "mixed2",
            r#"{"q": ["a", 2]}"#,
            vec!["field `q`", "mixes strings and numbers"],
        ),
        (
            "object",
            r#"{"o": {"a": 1}}"#,
            vec!["field `o`", "nested objects"],
        ),
        (
            "dup",
            r#"{"d": 1, "d": 2}"#,
            vec!["field `d` appears twice"],
        ),
        ("notobj", r#"[1, 2, 3]"#, vec!["expected a JSON object"]),
        (
            "toobig",
            r#"{"n": 9223372036854775808}"#,
            vec!["field `n`", "does not fit i64"],
        ),
    ];
    for (name, bad, parts) in cases {
        let text = format!("{good}\n\n{bad}\n{good}\n");
        let p = write(dir.path(), &format!("{name}.jsonl"), text.as_bytes());
        let mut r = open(&p);
        r.next_record().unwrap().unwrap();
        let msg = err_string(r.next_record());
        let offset = format!("record 1, offset {}", good.len() + 2);
        assert_contains(&msg, &[&format!("{name}.jsonl"), &offset]);
        assert_contains(&msg, &parts);
        assert!(r.can_continue(), "{name}");
        let last = r.next_record().unwrap().unwrap();
        assert_eq!(last.location.record, 2, "{name}");
        assert!(r.next_record().unwrap().is_none());
    }
}

#[test]
fn byte_order_marks_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "b.jsonl", b"\xef\xbb\xbf{\"a\": 1}\n");
    assert_eq!(
        all_records(&mut *open(&p))[0].to_json(),
        serde_json::json!({"a": [1]})
    );
    let p = write(dir.path(), "b.csv", b"\xef\xbb\xbfa,b\n1,2\n");
    assert_eq!(
        all_records(&mut *open(&p))[0].to_json(),
        serde_json::json!({"a": [1], "b": [2]})
    );
}

#[test]
fn jsonl_lines_longer_than_max_record_bytes_are_skipped_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("{{\"x\": \"{}\"}}", "a".repeat(5000));
    let text = format!("{{\"x\": \"ok\"}}\n{long}\n{{\"x\": \"after\"}}\n");
    let p = write(dir.path(), "long.jsonl", text.as_bytes());
    let o = OpenOptions {
        max_record_bytes: 1000,
        ..opts()
    };
    let mut r = JsonlFormat.open(&p, &o).unwrap();
    r.next_record().unwrap().unwrap();
    let msg = err_string(r.next_record());
    assert_contains(
        &msg,
        &[
            "long.jsonl",
            "record 1, offset 12",
            &format!("line of {} bytes", long.len()),
            "max_record_bytes (1000)",
        ],
    );
    assert!(r.can_continue());
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.location.record, 2);
    assert_eq!(rec.location.offset, Some(12 + long.len() as u64 + 1));
}

#[test]
fn jsonl_compressed_and_start_record() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..10).map(|i| format!("{{\"i\": {i}}}\n\n")).collect();
    let paths = [
        write(dir.path(), "p.jsonl", text.as_bytes()),
        write(dir.path(), "p.jsonl.gz", &gzip(text.as_bytes())),
        write(dir.path(), "p.ndjson.zz", &zlib(text.as_bytes())),
    ];
    for p in &paths {
        for start in [0u64, 3, 10, 12] {
            let o = OpenOptions {
                start_record: start,
                ..opts()
            };
            let mut r = Registry::with_builtin()
                .open(p.to_str().unwrap(), None, &o)
                .unwrap();
            assert_eq!(r.next_index(), start.min(10));
            let recs = all_records(&mut *r);
            assert_eq!(recs.len() as u64, 10 - start.min(10), "{p:?}");
            for (j, rec) in recs.iter().enumerate() {
                let i = start + j as u64;
                assert_eq!(rec.location.record, i);
                assert_eq!(rec.location.offset, Some(i * 10));
                assert_eq!(rec.get("i").unwrap().values, Values::I64(vec![i as i64]));
            }
        }
    }
}

#[test]
fn jsonl_corrupt_gzip_stops_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..2000).map(|i| format!("{{\"i\": {i}}}\n")).collect();
    let mut gz = gzip(text.as_bytes());
    let n = gz.len();
    gz.truncate(n - 20);
    let p = write(dir.path(), "c.jsonl.gz", &gz);
    let mut r = open(&p);
    let mut count = 0;
    let err = loop {
        match r.next_record() {
            Ok(Some(_)) => count += 1,
            Ok(None) => panic!("a truncated gzip stream must not end cleanly"),
            Err(e) => break e.to_string(),
        }
    };
    assert_contains(
        &err,
        &[
            "c.jsonl.gz",
            &format!("record {count}"),
            "reading the stream",
        ],
    );
    assert!(!r.can_continue());
    assert!(r.next_record().is_err());
}

#[test]
fn jsonl_empty_values_fit_ragged_fields_and_fail_fixed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "e.jsonl",
        b"{\"t\": [\"a\", \"b\"], \"v\": [1.5]}\n{\"t\": [], \"v\": []}\n",
    );
    let ragged = Schema::builder()
        .ragged("t", DType::Bytes, Ragged::Offsets)
        .ragged("v", DType::F32, Ragged::Padded)
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&ragged);
    assert_eq!(open(&p).read_chunk(&mut chunk, 10, 1 << 20).unwrap(), 2);
    assert_eq!(chunk.columns()[0].ends, vec![2, 2]);
    let fixed = Schema::builder()
        .field("v", DType::F32, [1])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&fixed);
    let msg = err_string(open(&p).read_chunk(&mut chunk, 10, 1 << 20));
    assert_contains(
        &msg,
        &[
            "e.jsonl",
            "record 1",
            "field `v`",
            "expected [1] f32",
            "0 elements",
        ],
    );
    assert_eq!(chunk.len(), 1);
    chunk_equals_generic(&p, &fixed, 10, 1 << 20);
    chunk_equals_generic(&p, &ragged, 1, 1 << 20);
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Row {
    x: Vec<f32>,
    y: i64,
}

#[test]
fn jsonl_typed_path() {
    let dir = tempfile::tempdir().unwrap();
    let text = "{\"x\": [1.5, 2], \"y\": 3}\n\n{\"x\": [], \"y\": \"no\"}\n{bad\n{\"x\": [0.25], \"y\": -1}\n";
    for (name, bytes, c) in [
        ("t.jsonl", text.as_bytes().to_vec(), Compression::None),
        ("t.jsonl.gz", gzip(text.as_bytes()), Compression::Gzip),
    ] {
        let p = write(dir.path(), name, &bytes);
        let rows: Vec<_> = jsonl::read_typed::<Row>(&p, c).unwrap().collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[0].as_ref().unwrap(),
            &Row {
                x: vec![1.5, 2.0],
                y: 3
            }
        );
        assert_contains(
            &rows[1].as_ref().unwrap_err().to_string(),
            &[name, "record 1, offset 25", "invalid type"],
        );
        assert_contains(
            &rows[2].as_ref().unwrap_err().to_string(),
            &[
                name,
                &format!("record 2, offset {}", text.find("{bad").unwrap()),
                "invalid JSON",
            ],
        );
        assert_eq!(rows[3].as_ref().unwrap().y, -1);
    }
    let missing = jsonl::read_typed::<Row>(dir.path().join("nope.jsonl"), Compression::None);
    assert_contains(&err_string(missing), &["nope.jsonl"]);
}

// ---------------------------------------------------------------------------
// CSV
// ---------------------------------------------------------------------------

#[test]
fn csv_fixture_matches_expected() {
    let mut r = open(&fixture("table.csv"));
    let recs = all_records(&mut *r);
    let want = expected_lines("table.expected.jsonl");
    assert_eq!(recs.len(), want.len());
    for (i, (rec, w)) in recs.iter().zip(&want).enumerate() {
        assert_eq!(&rec.to_json(), w, "record {i}");
        assert_eq!(rec.location.record, i as u64);
        let names: Vec<&str> = rec.fields.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["f1", "f2", "label"]);
        assert_eq!(rec.get("label").unwrap().values.dtype(), DType::I64);
        assert_eq!(rec.get("f1").unwrap().shape, Vec::<usize>::new());
    }
    assert_eq!(recs[0].location.offset, Some(12));
    let schema = Registry::with_builtin()
        .infer_schema(fixture("table.csv").to_str().unwrap(), None, 100)
        .unwrap();
    chunk_equals_generic(&fixture("table.csv"), &schema, 4, 1 << 20);
}

#[test]
fn csv_cell_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let text = "i,f,b,s,q,e\n-7,1e-3,True,hello,\"a,b \"\"c\"\"\n2\",\n";
    let p = write(dir.path(), "k.csv", text.as_bytes());
    let recs = all_records(&mut *open(&p));
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.get("i").unwrap().values, Values::I64(vec![-7]));
    assert_eq!(r.get("f").unwrap().values, Values::F64(vec![0.001]));
    assert_eq!(r.get("b").unwrap().values, Values::Bool(vec![true]));
    assert_eq!(
        r.get("s").unwrap().values.as_bytes().unwrap().get(0),
        b"hello"
    );
    assert_eq!(r.get("s").unwrap().shape, Vec::<usize>::new());
    assert_eq!(
        r.get("q").unwrap().values.as_bytes().unwrap().get(0),
        b"a,b \"c\"\n2"
    );
    let e = r.get("e").unwrap();
    assert_eq!((e.shape.clone(), e.values.len()), (vec![0], 0));
}

#[test]
fn csv_options_delimiter_no_header_trim_and_tsv() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "s.txt", b"1;x\n2;y\n");
    let f = CsvFormat::default().delimiter(b';').has_header(false);
    let recs = all_records(&mut *f.open(&p, &opts()).unwrap());
    assert_eq!(recs.len(), 2);
    assert_eq!(
        recs[1].to_json(),
        serde_json::json!({"c0": [2], "c1": ["eQ=="]})
    );
    assert_eq!(recs[0].location.offset, Some(0));

    let p = write(dir.path(), "t.tsv", b"a\t b\n 1 \t2.5\n");
    let tsv = CsvFormat::tsv();
    assert_eq!((tsv.name(), tsv.extensions()), ("tsv", &["tsv", "tab"][..]));
    let recs = all_records(&mut *tsv.clone().trim(true).open(&p, &opts()).unwrap());
    assert_eq!(recs[0].to_json(), serde_json::json!({"a": [1], "b": [2.5]}));
    let recs = all_records(&mut *tsv.open(&p, &opts()).unwrap());
    assert_eq!(recs[0].fields[1].0, " b");
    assert_eq!(recs[0].get("a").unwrap().values.dtype(), DType::Bytes);

    let mut reg = Registry::with_builtin();
    reg.register(std::sync::Arc::new(CsvFormat::tsv()));
    assert_eq!(reg.resolve("x/data.tsv.gz", None).unwrap().0.name(), "tsv");
}

#[test]
fn csv_errors_name_file_record_offset_and_field() {
    let dir = tempfile::tempdir().unwrap();
    // Too few cells, too many, invalid UTF-8; each skipped, the file goes on.
    let mut text = b"a,b\n1,2\n3\n4,5,6\n7,\xff\xfe\n8,9\n".to_vec();
    let p = write(dir.path(), "bad.csv", &text);
    let mut r = open(&p);
    assert_eq!(r.next_record().unwrap().unwrap().location.record, 0);
    assert_contains(
        &err_string(r.next_record()),
        &[
            "bad.csv",
            "record 1, offset 8",
            "expected 2 cells",
            "header row",
            "got 1",
        ],
    );
    assert!(r.can_continue());
    assert_contains(
        &err_string(r.next_record()),
        &["bad.csv", "record 2, offset 10", "got 3"],
    );
    assert_contains(
        &err_string(r.next_record()),
        &[
            "bad.csv",
            "record 3, offset 16",
            "field `b` (column 1)",
            "invalid UTF-8",
        ],
    );
    let last = r.next_record().unwrap().unwrap();
    assert_eq!((last.location.record, last.location.offset), (4, Some(21)));
    assert!(r.next_record().unwrap().is_none());

    // Without a header, the first row sets the count.
    let p = write(dir.path(), "nh.csv", b"1,2\n3\n");
    let mut r = CsvFormat::default()
        .has_header(false)
        .open(&p, &opts())
        .unwrap();
    r.next_record().unwrap().unwrap();
    assert_contains(
        &err_string(r.next_record()),
        &["nh.csv", "record 1, offset 4", "first row"],
    );

    // Header problems are file errors.
    text = b"a,\xff\n1,2\n".to_vec();
    let p = write(dir.path(), "h.csv", &text);
    let e = CsvFormat::default().open(&p, &opts()).err().unwrap();
    assert!(matches!(e, feedline::Error::BadFile { .. }));
    assert_contains(&e.to_string(), &["h.csv", "column 1", "invalid UTF-8"]);
    let p = write(dir.path(), "d.csv", b"a,b,a\n1,2,3\n");
    assert_contains(
        &err_string(CsvFormat::default().open(&p, &opts())),
        &["d.csv", "columns 0 and 2", "`a`"],
    );
    // An empty header cell is named after its column.
    let p = write(dir.path(), "n.csv", b"a,,c\n1,2,3\n");
    let recs = all_records(&mut *open(&p));
    assert_eq!(recs[0].fields[1].0, "c1");
}

#[test]
fn csv_rows_longer_than_max_record_bytes() {
    let dir = tempfile::tempdir().unwrap();
    // An unterminated quote would swallow the whole file into one record.
    let mut text = b"a,b\n1,\"".to_vec();
    text.extend(vec![b'x'; 300_000]);
    let p = write(dir.path(), "q.csv", &text);
    let o = OpenOptions {
        max_record_bytes: 1000,
        ..opts()
    };
    let mut r = CsvFormat::default().open(&p, &o).unwrap();
    assert_contains(
        &err_string(r.next_record()),
        &["q.csv", "record 0", "max_record_bytes"],
    );
    assert!(!r.can_continue());
    // A long row within the reader's slack is still refused, and skipped.
    let long = "y".repeat(5000);
    let p = write(dir.path(), "l.csv", format!("a\n{long}\nz\n").as_bytes());
    let mut r = CsvFormat::default().open(&p, &o).unwrap();
    assert_contains(
        &err_string(r.next_record()),
        &[
            "l.csv",
            "record 0, offset 2",
            "longer than max_record_bytes (1000)",
        ],
    );
    assert!(r.can_continue());
    assert_eq!(r.next_record().unwrap().unwrap().location.record, 1);
}

#[test]
fn csv_compressed_and_start_record() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = std::iter::once("i,s\n".to_string())
        .chain((0..10).map(|i| format!("{i},s{i}\n")))
        .collect();
    let paths = [
        write(dir.path(), "p.csv", text.as_bytes()),
        write(dir.path(), "p.csv.gz", &gzip(text.as_bytes())),
        write(dir.path(), "p.csv.zz", &zlib(text.as_bytes())),
    ];
    for p in &paths {
        for start in [0u64, 4, 10, 11] {
            let o = OpenOptions {
                start_record: start,
                ..opts()
            };
            let mut r = Registry::with_builtin()
                .open(p.to_str().unwrap(), None, &o)
                .unwrap();
            assert_eq!(r.next_index(), start.min(10));
            let recs = all_records(&mut *r);
            assert_eq!(recs.len() as u64, 10 - start.min(10));
            for (j, rec) in recs.iter().enumerate() {
                let i = start + j as u64;
                assert_eq!(rec.location.record, i);
                assert_eq!(rec.location.offset, Some(4 + i * 5));
                assert_eq!(rec.get("i").unwrap().values, Values::I64(vec![i as i64]));
            }
        }
    }
}

#[test]
fn csv_empty_cells_fit_ragged_fields_and_fail_fixed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "e.csv", b"name,score\nann,1.5\n,\n");
    let ragged = Schema::builder()
        .ragged("name", DType::Bytes, Ragged::Offsets)
        .ragged("score", DType::F32, Ragged::Offsets)
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&ragged);
    assert_eq!(open(&p).read_chunk(&mut chunk, 10, 1 << 20).unwrap(), 2);
    assert_eq!(chunk.columns()[1].ends, vec![1, 1]);
    let fixed = Schema::builder()
        .field("score", DType::F32, [])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&fixed);
    let msg = err_string(open(&p).read_chunk(&mut chunk, 10, 1 << 20));
    assert_contains(
        &msg,
        &[
            "e.csv",
            "record 1, offset 19",
            "field `score`",
            "expected [] f32",
            "0 elements",
        ],
    );
    chunk_equals_generic(&p, &fixed, 10, 1 << 20);
    chunk_equals_generic(&p, &ragged, 1, 1 << 20);
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct CsvRow {
    f1: f32,
    label: i64,
}

#[test]
fn csv_typed_path() {
    let rows: Vec<CsvRow> = csv::read_typed::<CsvRow>(fixture("table.csv"), Compression::None)
        .unwrap()
        .collect::<feedline::Result<_>>()
        .unwrap();
    assert_eq!(rows.len(), 10);
    assert_eq!(
        rows[2],
        CsvRow {
            f1: -0.2741,
            label: 4
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let text = "f1,label\n0.5,1\n0.5,x\n0.5\n0.25,3\n";
    let p = write(dir.path(), "t.csv.gz", &gzip(text.as_bytes()));
    let rows: Vec<_> = csv::read_typed::<CsvRow>(&p, Compression::Gzip)
        .unwrap()
        .collect();
    assert_eq!(rows.len(), 4);
    assert_contains(
        &rows[1].as_ref().unwrap_err().to_string(),
        &["t.csv.gz", "record 1, offset 15", "column 1"],
    );
    assert_contains(
        &rows[2].as_ref().unwrap_err().to_string(),
        &["t.csv.gz", "record 2, offset 21", "expected 2 cells, got 1"],
    );
    assert_eq!(rows[3].as_ref().unwrap().label, 3);
    let p = write(dir.path(), "s.csv", b"f1;label\n1;2\n");
    let rows: Vec<_> = CsvFormat::default()
        .delimiter(b';')
        .read_typed_with::<CsvRow>(&p, Compression::None)
        .unwrap()
        .collect();
    assert_eq!(rows[0].as_ref().unwrap().label, 2);
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

/// A JSON value of one of the kinds the reader knows, and what it must become.
#[derive(Clone, Debug)]
enum JVal {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// Nested array of ints or floats with its shape.
    Arr(Vec<usize>, Vec<f64>, bool),
}

impl JVal {
    fn json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            JVal::Int(i) => json!(i),
            JVal::Float(f) => serde_json::Value::Number(serde_json::Number::from_f64(*f).unwrap()),
            JVal::Bool(b) => json!(b),
            JVal::Str(s) => json!(s),
            JVal::Arr(shape, v, ints) => nest(shape, v, *ints),
        }
    }

    fn values(&self) -> (Values, Vec<usize>) {
        match self {
            JVal::Int(i) => (Values::I64(vec![*i]), vec![]),
            JVal::Float(f) => (Values::F64(vec![*f]), vec![]),
            JVal::Bool(b) => (Values::Bool(vec![*b]), vec![]),
            JVal::Str(s) => (
                Values::Bytes(std::iter::once(s.as_bytes()).collect()),
                vec![],
            ),
            JVal::Arr(shape, v, true) => (
                Values::I64(v.iter().map(|&x| x as i64).collect()),
                shape.clone(),
            ),
            JVal::Arr(shape, v, false) => (Values::F64(v.clone()), shape.clone()),
        }
    }
}

fn nest(shape: &[usize], v: &[f64], ints: bool) -> serde_json::Value {
    if shape.is_empty() {
        return if ints {
            serde_json::json!(v[0] as i64)
        } else {
            serde_json::Value::Number(serde_json::Number::from_f64(v[0]).unwrap())
        };
    }
    let per: usize = shape[1..].iter().product();
    serde_json::Value::Array(
        (0..shape[0])
            .map(|i| nest(&shape[1..], &v[i * per..(i + 1) * per], ints))
            .collect(),
    )
}

fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |x| x.is_finite())
}

fn jval() -> impl Strategy<Value = JVal> {
    prop_oneof![
        any::<i64>().prop_map(JVal::Int),
        finite().prop_map(JVal::Float),
        any::<bool>().prop_map(JVal::Bool),
        ".{0,12}".prop_map(JVal::Str),
        (prop::collection::vec(1usize..4, 1..4), any::<bool>()).prop_flat_map(|(shape, ints)| {
            let n: usize = shape.iter().product();
            let elem = if ints {
                (-1_000_000i64..1_000_000).prop_map(|x| x as f64).boxed()
            } else {
                // Keep one non-integer so the array is f64.
                finite()
                    .prop_map(|x| if x.fract() == 0.0 { x + 0.5 } else { x })
                    .prop_filter("finite", |x| x.is_finite())
                    .boxed()
            };
            prop::collection::vec(elem, n).prop_map(move |v| JVal::Arr(shape.clone(), v, ints))
        }),
    ]
}

fn csv_cell() -> impl Strategy<Value = (String, Values)> {
    prop_oneof![
        any::<i64>().prop_map(|i| (i.to_string(), Values::I64(vec![i]))),
        finite().prop_map(|f| {
            // `{:?}` always has a `.` or exponent, so it is not an integer.
            (format!("{f:?}"), Values::F64(vec![f]))
        }),
        any::<bool>().prop_map(|b| (b.to_string(), Values::Bool(vec![b]))),
        "[a-z ,\"\n]{1,8}"
            .prop_filter("not a number or bool", |s| {
                s.parse::<f64>().is_err() && !matches!(s.as_str(), "true" | "false")
            })
            .prop_map(|s| {
                let v = Values::Bytes(std::iter::once(s.as_bytes()).collect());
                (s, v)
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn jsonl_round_trip(
        records in prop::collection::vec(prop::collection::vec(jval(), 1..5), 0..8),
        gz in any::<bool>(),
        start in 0u64..9,
    ) {
        let mut text = String::new();
        for rec in &records {
            let mut obj = serde_json::Map::new();
            for (i, v) in rec.iter().enumerate() {
                obj.insert(format!("f{i}"), v.json());
            }
            text.push_str(&serde_json::to_string(&obj).unwrap());
            text.push('\n');
        }
        let dir = tempfile::tempdir().unwrap();
        let p = if gz {
            write(dir.path(), "r.jsonl.gz", &gzip(text.as_bytes()))
        } else {
            write(dir.path(), "r.jsonl", text.as_bytes())
        };
        let o = OpenOptions { start_record: start, ..opts() };
        let mut r = Registry::with_builtin().open(p.to_str().unwrap(), None, &o).unwrap();
        let got = all_records(&mut *r);
        let first = (start as usize).min(records.len());
        prop_assert_eq!(got.len(), records.len() - first);
        for (j, rec) in got.iter().enumerate() {
            let want = &records[first + j];
            prop_assert_eq!(rec.fields.len(), want.len());
            for (i, v) in want.iter().enumerate() {
                let (values, shape) = v.values();
                let t = rec.get(&format!("f{i}")).unwrap();
                prop_assert_eq!(&t.values, &values);
                prop_assert_eq!(&t.shape, &shape);
            }
        }
    }

    #[test]
    fn csv_round_trip(
        rows in (1usize..5).prop_flat_map(|w| prop::collection::vec(prop::collection::vec(csv_cell(), w), 0..8)),
        tsv in any::<bool>(),
        start in 0u64..9,
    ) {
        let width = rows.first().map_or(1, |r| r.len());
        let mut wr = ::csv::WriterBuilder::new()
            .delimiter(if tsv { b'\t' } else { b',' })
            .from_writer(Vec::new());
        wr.write_record((0..width).map(|i| format!("col{i}"))).unwrap();
        for row in &rows {
            wr.write_record(row.iter().map(|c| c.0.as_str())).unwrap();
        }
        let bytes = wr.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (p, f) = if tsv {
            (write(dir.path(), "r.tsv", &bytes), CsvFormat::tsv())
        } else {
            (write(dir.path(), "r.csv", &bytes), CsvFormat::default())
        };
        let o = OpenOptions { start_record: start, ..opts() };
        let got = all_records(&mut *f.open(&p, &o).unwrap());
        let first = (start as usize).min(rows.len());
        prop_assert_eq!(got.len(), rows.len() - first);
        for (j, rec) in got.iter().enumerate() {
            for (i, (_, v)) in rows[first + j].iter().enumerate() {
                let t = rec.get(&format!("col{i}")).unwrap();
                prop_assert_eq!(&t.values, v);
                prop_assert!(t.shape.is_empty());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Declared shapes, unterminated quotes
// ---------------------------------------------------------------------------

#[test]
fn a_nested_json_array_must_have_the_declared_shape() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "n.jsonl",
        b"{\"x\": [[1, 2, 3], [4, 5, 6]]}\n{\"x\": [1, 2, 3, 4, 5, 6]}\n",
    );
    let read = |shape: &[usize]| {
        let schema = Schema::builder()
            .field("x", DType::I64, shape.to_vec())
            .build()
            .unwrap();
        chunk_equals_generic(&p, &schema, 10, 1 << 20);
        let mut r = open(&p);
        let mut c = Chunk::new(&schema);
        let res = r.read_chunk(&mut c, 10, 1 << 20);
        (res.map_err(|e| e.to_string()), c.len())
    };
    // The nested array's own shape: both records read (the flat one is a
    // list of 6, which fits any shape of 6 elements).
    assert_eq!(read(&[2, 3]), (Ok(2), 2));
    // Same element count, transposed or flattened: an error naming the
    // file, the record, the field and both shapes.
    for (shape, want) in [
        (&[3, 2][..], "expected [3, 2] i64"),
        (&[6][..], "expected [6] i64"),
    ] {
        let (res, n) = read(shape);
        let e = res.unwrap_err();
        assert_contains(
            &e,
            &["n.jsonl", "record 0", "field `x`", want, "shape [2, 3] i64"],
        );
        assert_eq!(n, 0);
    }
}

#[test]
fn an_unterminated_csv_quote_is_reported_where_it_opens_with_what_it_loses() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("a,b\n");
    for i in 0..10 {
        text.push_str(&format!("{i},x{i}\n"));
    }
    // Record 10 opens a quote in its last column that nothing closes: the
    // csv crate would make the 60 lines after it part of that one cell.
    let row10 = text.len();
    text.push_str("10,\"oops\n");
    for i in 11..71 {
        text.push_str(&format!("{i},x{i}\n"));
    }
    let quote = row10 + 3;
    let p = write(dir.path(), "q.csv", text.as_bytes());
    let schema = Schema::builder()
        .field("a", DType::I64, [])
        .field("b", DType::Bytes, [])
        .build()
        .unwrap();
    let check = |e: &str| {
        assert_contains(
            e,
            &[
                "q.csv",
                &format!("record 10, offset {row10}"),
                "unterminated quote",
                &format!("opens at byte {quote}"),
                "the 60 lines after it are lost",
            ],
        )
    };
    // Record by record.
    let mut r = open(&p);
    for i in 0..10 {
        assert_eq!(r.next_record().unwrap().unwrap().location.record, i);
    }
    check(&err_string(r.next_record()));
    assert!(!r.can_continue());
    assert_eq!(r.next_index(), 10);
    assert_eq!(r.records_lost(), Some(61));
    // In chunks: the ten good rows, then the same error.
    let mut r = open(&p);
    let mut c = Chunk::new(&schema);
    check(&r.read_chunk(&mut c, 100, 1 << 20).unwrap_err().to_string());
    assert_eq!(c.len(), 10);
    assert_eq!(r.records_lost(), Some(61));
    chunk_equals_generic(&p, &schema, 4, 1 << 20);
    // The typed path says the same.
    #[derive(serde::Deserialize)]
    struct Row {
        #[allow(dead_code)]
        a: i64,
        #[allow(dead_code)]
        b: String,
    }
    let rows: Vec<_> = csv::read_typed::<Row>(&p, Compression::None)
        .unwrap()
        .collect();
    assert_eq!(rows.len(), 11);
    assert!(rows[..10].iter().all(Result::is_ok));
    let e = rows[10].as_ref().err().unwrap().to_string();
    assert_contains(
        &e,
        &["q.csv", "record 10", "unterminated quote", "60 lines"],
    );
    // Quotes that close — across lines, doubled, at the end of the file —
    // are fine, and a quote inside an unquoted cell is a character.
    let ok = write(
        dir.path(),
        "ok.csv",
        b"a,b\n1,\"two\nlines\"\n2,\"say \"\"hi\"\"\"\n3,4\"5\n4,\"end\"",
    );
    let recs = all_records(&mut *open(&ok));
    assert_eq!(recs.len(), 4);
    assert_eq!(
        recs[2].get("b").unwrap().values,
        Values::Bytes(std::iter::once(&b"4\"5"[..]).collect())
    );
}
