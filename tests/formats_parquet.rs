//! Parquet: pyarrow-written fixtures (every codec, several row groups, list,
//! fixed-size-list and nested list columns, nulls) read as pyarrow reads
//! them; `start_record` across row groups; projection; nulls as bad
//! records naming file, row and column; the schema from the Parquet
//! schema; damaged files as errors, never a panic.

use std::path::{Path, PathBuf};

use feedline::format::parquet::ParquetFormat;
use feedline::format::{Compression, Format, OpenOptions, RecordReader, Registry};
use feedline::{Chunk, DType, Dim, Error, Ragged, Schema};

mod format_helpers;
use format_helpers::{all_records, assert_contains, err_string};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

const CODECS: [&str; 4] = ["none", "snappy", "zstd", "gzip"];

fn table(codec: &str) -> PathBuf {
    fixture(&format!("pq_table.{codec}.parquet"))
}

fn expected() -> Vec<serde_json::Value> {
    std::fs::read_to_string(fixture("pq_table.expected.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn open(path: &Path, start: u64) -> Box<dyn RecordReader> {
    let opts = OpenOptions {
        start_record: start,
        ..OpenOptions::default()
    };
    ParquetFormat.open(path, &opts).unwrap()
}

/// Read `path` to the end through `read_chunk` with `schema`, `max` rows a
/// call: each row as JSON, and its record index.
fn chunk_rows(
    r: &mut dyn RecordReader,
    schema: &Schema,
    max: usize,
) -> Vec<(u64, serde_json::Value)> {
    let mut out = Vec::new();
    loop {
        let mut chunk = Chunk::new(schema);
        let n = r.read_chunk(&mut chunk, max, usize::MAX).unwrap();
        if n == 0 {
            return out;
        }
        for i in 0..chunk.len() {
            let row = chunk.row(i).unwrap();
            out.push((row.origin().record, row.to_json()));
        }
    }
}

#[test]
fn every_codec_reads_as_pyarrow_reads() {
    let want = expected();
    assert_eq!(want.len(), 10);
    for codec in CODECS {
        let path = table(codec);
        let mut r = Registry::with_builtin()
            .open(path.to_str().unwrap(), None, &OpenOptions::default())
            .unwrap();
        assert_eq!(r.len_hint(), Some(10));
        let recs = all_records(&mut *r);
        let got: Vec<_> = recs.iter().map(|r| r.to_json()).collect();
        assert_eq!(got, want, "{codec}");
        for (i, rec) in recs.iter().enumerate() {
            assert_eq!(rec.location.record, i as u64);
            assert!(rec.location.source.name().ends_with(".parquet"));
        }
        // Shapes: a scalar, a fixed-size list, a list of lists.
        assert_eq!(recs[3].get("id").unwrap().shape, Vec::<usize>::new());
        assert_eq!(recs[3].get("x").unwrap().shape, vec![3]);
        assert_eq!(recs[3].get("tokens").unwrap().shape, vec![3]);
        assert_eq!(recs[3].get("grid").unwrap().shape, vec![2, 2]);
    }
}

#[test]
fn the_registry_knows_the_extension_and_the_prefix() {
    let reg = Registry::with_builtin();
    assert_eq!(
        reg.resolve("a/b.parquet", None).unwrap().0.name(),
        "parquet"
    );
    let (f, path, _) = reg.resolve("parquet:shard.bin", None).unwrap();
    assert_eq!(f.name(), "parquet");
    assert_eq!(path, PathBuf::from("shard.bin"));
    // The prefix opens a file whatever its name.
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join("shard.bin");
    std::fs::copy(table("zstd"), &renamed).unwrap();
    let spec = format!("parquet:{}", renamed.display());
    let mut r = reg.open(&spec, None, &OpenOptions::default()).unwrap();
    assert_eq!(all_records(&mut *r).len(), 10);
}

#[test]
fn start_record_skips_row_groups_then_rows() {
    let want = expected();
    for codec in ["none", "snappy"] {
        for start in 0..=11u64 {
            let mut r = open(&table(codec), start);
            assert_eq!(r.next_index(), start.min(10));
            let recs = all_records(&mut *r);
            let got: Vec<_> = recs.iter().map(|r| r.to_json()).collect();
            let s = (start as usize).min(10);
            assert_eq!(got, want[s..], "{codec} from {start}");
            let idx: Vec<u64> = recs.iter().map(|r| r.location.record).collect();
            assert_eq!(idx, (s as u64..10).collect::<Vec<_>>());
        }
    }
}

/// The schema the fixture declares, as inferred from the Parquet schema.
fn declared() -> Schema {
    Schema::builder()
        .field("blob", DType::Bytes, [])
        .field("grid", DType::I32, [2, 2])
        .field("id", DType::I64, [])
        .field("label", DType::I32, [])
        .field("name", DType::Bytes, [])
        .field("ok", DType::Bool, [])
        .field("score", DType::F64, [])
        .field("small", DType::I32, [])
        .ragged("tokens", DType::I64, Ragged::Offsets)
        .field("x", DType::F32, [3])
        .build()
        .unwrap()
}

#[test]
fn the_schema_is_the_parquet_schema() {
    let reg = Registry::with_builtin();
    let spec = table("snappy");
    let schema = reg.infer_schema(spec.to_str().unwrap(), None, 1).unwrap();
    let mut fields: Vec<_> = schema.fields().to_vec();
    fields.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(fields, declared().fields());
    assert_eq!(schema.field("tokens").unwrap().shape, vec![Dim::Var]);
    // Decoded with it, through chunks of every size, the rows are pyarrow's.
    let want = expected();
    for max in [1, 3, 4, 7, 100] {
        let mut r = open(&spec, 0);
        let rows = chunk_rows(&mut *r, &schema, max);
        let got: Vec<_> = rows.iter().map(|(_, j)| j.clone()).collect();
        assert_eq!(got, want, "chunks of {max}");
        assert!(rows
            .iter()
            .enumerate()
            .all(|(i, (rec, _))| *rec == i as u64));
    }
}

/// Tokens of row `i` of `pq_ragged.parquet` (see make_parquet_ragged.py):
/// `i, i+1, …`, 3 of them but 5 in row 80 and 1 in row 99.
fn ragged_tokens(i: i64) -> Vec<i64> {
    let n = match i {
        80 => 5,
        99 => 1,
        _ => 3,
    };
    (i..i + n).collect()
}

#[test]
fn a_list_column_is_ragged_whatever_its_first_rows_hold() {
    // `tokens` is list<int64> with 3 values in rows 0..80, `pairs`
    // list<fixed_size_list<int32, 2>> with 2 pairs in every row but 90: the
    // first 64 records alone would make both fixed, and row 80 misfit.
    let path = fixture("pq_ragged.parquet");
    let first: Vec<_> = all_records(&mut *open(&path, 0))
        .into_iter()
        .take(64)
        .collect();
    let guessed = Schema::infer(&first).unwrap();
    assert_eq!(guessed.field("tokens").unwrap().shape, vec![Dim::Fixed(3)]);
    // The Parquet schema says which columns are lists of any length.
    let schema = Registry::with_builtin()
        .infer_schema(path.to_str().unwrap(), None, 64)
        .unwrap();
    let shape = |name: &str| schema.field(name).unwrap().shape.clone();
    assert_eq!(shape("tokens"), vec![Dim::Var]);
    assert_eq!(shape("pairs"), vec![Dim::Var, Dim::Fixed(2)]);
    assert_eq!(shape("xy"), vec![Dim::Fixed(2)], "fixed_size_list: fixed");
    assert_eq!(shape("id"), Vec::<Dim>::new());
    assert_eq!(schema.inferred_source(), None, "declared, not inferred");
    // Every row decodes with it, the long and the short ones too.
    let rows = chunk_rows(&mut *open(&path, 0), &schema, 48);
    assert_eq!(rows.len(), 100);
    for (i, (rec, row)) in rows.iter().enumerate() {
        let i = i as i64;
        assert_eq!(*rec, i as u64);
        assert_eq!(row["id"], serde_json::json!([i]));
        assert_eq!(
            row["tokens"],
            serde_json::json!(ragged_tokens(i)),
            "row {i}"
        );
        let pairs = if i == 90 { 4 } else { 2 };
        let want: Vec<i64> = (0..pairs).flat_map(|k| [i + k, -(i + k)]).collect();
        assert_eq!(row["pairs"], serde_json::json!(want), "row {i}");
    }
}

#[test]
fn chunks_decode_only_the_schemas_columns() {
    // `when` is a timestamp: reading it is an error, so a chunk reader that
    // decoded it would fail. A schema without it reads the file.
    let path = fixture("pq_unsupported.parquet");
    let schema = Schema::builder()
        .field("id", DType::I64, [1])
        .build()
        .unwrap();
    let mut r = open(&path, 0);
    let rows = chunk_rows(&mut *r, &schema, 2);
    let ids: Vec<_> = rows
        .iter()
        .map(|(_, j)| j["id"][0].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![0, 1, 2]);
    // The whole record (what cat reads) names the column and its type.
    let msg = err_string(open(&path, 0).next_record());
    assert_contains(
        &msg,
        &["pq_unsupported.parquet", "column `when`", "Timestamp"],
    );
    // So does inferring a schema.
    let msg = err_string(Registry::with_builtin().infer_schema(path.to_str().unwrap(), None, 10));
    assert_contains(&msg, &["pq_unsupported.parquet", "column `when`"]);
    // A schema field the file lacks is an error naming it.
    let schema = Schema::builder()
        .field("id", DType::I64, [1])
        .field("nope", DType::F32, [1])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&schema);
    let msg = err_string(open(&path, 0).read_chunk(&mut chunk, 10, usize::MAX));
    assert_contains(&msg, &["record 0", "nope"]);
}

#[derive(serde::Deserialize)]
struct NullsExpected {
    rows: Vec<serde_json::Value>,
    nulls: Vec<NullAt>,
}

#[derive(serde::Deserialize)]
struct NullAt {
    record: u64,
    column: String,
}

fn nulls_expected() -> NullsExpected {
    serde_json::from_str(&std::fs::read_to_string(fixture("pq_nulls.expected.json")).unwrap())
        .unwrap()
}

#[test]
fn a_null_is_a_bad_record_naming_file_row_and_column() {
    let want = nulls_expected();
    assert_eq!(want.nulls.len(), 2);
    let mut r = open(&fixture("pq_nulls.parquet"), 0);
    let mut good = Vec::new();
    let mut bad = Vec::new();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => good.push(rec.to_json()),
            Ok(None) => break,
            Err(e) => {
                assert!(r.can_continue(), "{e}");
                let loc = e.location().unwrap().clone();
                bad.push((loc.record, e.to_string()));
            }
        }
    }
    assert_eq!(good, want.rows);
    assert_eq!(bad.len(), want.nulls.len());
    for ((record, msg), at) in bad.iter().zip(&want.nulls) {
        assert_eq!(*record, at.record);
        assert_contains(
            msg,
            &[
                "pq_nulls.parquet",
                &format!("record {}", at.record),
                &format!("field `{}`", at.column),
                "null",
            ],
        );
    }
    // The same through chunks with the declared schema.
    let schema = Registry::with_builtin()
        .infer_schema(fixture("pq_nulls.parquet").to_str().unwrap(), None, 1)
        .unwrap();
    let mut r = open(&fixture("pq_nulls.parquet"), 0);
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    loop {
        let mut chunk = Chunk::new(&schema);
        let res = r.read_chunk(&mut chunk, 4, usize::MAX);
        for i in 0..chunk.len() {
            rows.push(chunk.row(i).unwrap().to_json());
        }
        match res {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert!(r.can_continue());
                errors.push(e.location().unwrap().record);
            }
        }
    }
    assert_eq!(rows, want.rows);
    assert_eq!(errors, vec![2, 4]);
}

#[test]
fn damaged_files_are_errors_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    // Not Parquet at all.
    let junk = dir.path().join("junk.parquet");
    std::fs::write(&junk, b"definitely not parquet").unwrap();
    let msg = err_string(ParquetFormat.open(&junk, &OpenOptions::default()));
    assert_contains(&msg, &["junk.parquet", "not a readable Parquet file"]);
    // Missing.
    let e = ParquetFormat
        .open(&dir.path().join("missing.parquet"), &OpenOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // Stream compression asked for.
    let opts = OpenOptions {
        compression: Some(Compression::Gzip),
        ..OpenOptions::default()
    };
    let msg = err_string(ParquetFormat.open(&table("none"), &opts));
    assert_contains(&msg, &["pq_table.none.parquet", "compressed inside"]);
    // Every truncation, and a byte flipped at many places: an error or
    // records, never a panic; after a decoding error the reader stops.
    let bytes = std::fs::read(table("none")).unwrap();
    let cut = dir.path().join("cut.parquet");
    for len in (0..bytes.len()).step_by(97) {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        assert!(ParquetFormat.open(&cut, &OpenOptions::default()).is_err());
    }
    let flipped = dir.path().join("flipped.parquet");
    let mut outcomes = [0usize; 2];
    for at in (0..bytes.len()).step_by(13) {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        std::fs::write(&flipped, &b).unwrap();
        let Ok(mut r) = ParquetFormat.open(&flipped, &OpenOptions::default()) else {
            outcomes[1] += 1;
            continue;
        };
        for _ in 0..100 {
            match r.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    outcomes[1] += 1;
                    assert!(e.to_string().contains("flipped.parquet"), "{e}");
                    if !r.can_continue() {
                        assert!(r.next_record().is_err());
                        break;
                    }
                }
            }
        }
        outcomes[0] += 1;
    }
    assert!(outcomes[1] > 0, "{outcomes:?}");
}

/// `pq_crc.parquet` (pyarrow, `write_page_checksum=True`, uncompressed,
/// plain) with the last byte of row group 1's `score` chunk — row 7's
/// value — flipped, as `make_parquet.py`'s `crc_fixture` checks pyarrow
/// refuses it.
fn crc_flipped(dir: &Path) -> PathBuf {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let good = fixture("pq_crc.parquet");
    let reader = SerializedFileReader::new(std::fs::File::open(&good).unwrap()).unwrap();
    let group = reader.metadata().row_group(1);
    let col = (group.columns().iter())
        .find(|c| c.column_path().string() == "score")
        .unwrap();
    let (start, len) = col.byte_range();
    let mut bytes = std::fs::read(&good).unwrap();
    bytes[(start + len - 1) as usize] ^= 0x01;
    let path = dir.join("crc_flipped.parquet");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Page checksums are verified when present (issue 28 item 5: a flipped
/// byte in a data page read as 34.087890625 for 34.0, exit 0): the page's
/// row group is one bad record naming the file, the row group, its rows
/// and the column — its rows counted as lost — and reading goes on with
/// the next row group, whose rows are pyarrow's. Mutations caught: the
/// parquet crate's `crc` feature off (row 7 reads a wrong value, no
/// error); `skip_bad_group` not moving `next` past the row group (the
/// error repeats: the second one fails the test).
#[test]
fn a_page_checksum_mismatch_is_a_bad_row_group_naming_file_group_column_and_rows() {
    let want = expected();
    let intact: Vec<_> = all_records(&mut *open(&fixture("pq_crc.parquet"), 0))
        .iter()
        .map(|r| r.to_json())
        .collect();
    assert_eq!(intact, want, "the fixture reads as pyarrow reads it");
    let dir = tempfile::tempdir().unwrap();
    let path = crc_flipped(dir.path());
    let schema = declared();
    for by_chunks in [false, true] {
        let mut r = open(&path, 0);
        let (mut rows, mut errors) = (Vec::new(), Vec::new());
        loop {
            let got = if by_chunks {
                let mut chunk = Chunk::new(&schema);
                let res = r.read_chunk(&mut chunk, 3, usize::MAX);
                for i in 0..chunk.len() {
                    let row = chunk.row(i).unwrap();
                    rows.push((row.origin().record, row.to_json()));
                }
                res.map(|n| n > 0)
            } else {
                r.next_record().map(|rec| match rec {
                    Some(rec) => {
                        rows.push((rec.location.record, rec.to_json()));
                        true
                    }
                    None => false,
                })
            };
            match got {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    assert!(r.can_continue(), "{e}");
                    errors.push((e.to_string(), r.records_skipped(), r.next_index()));
                    // Once: a reader that does not move past the bad row
                    // group repeats its error (fail here, not loop).
                    assert_eq!(errors.len(), 1, "chunks {by_chunks}: {errors:?}");
                }
            }
        }
        assert_eq!(errors.len(), 1, "chunks {by_chunks}: {errors:?}");
        let (msg, skipped, next) = &errors[0];
        assert_contains(
            msg,
            &[
                "crc_flipped.parquet",
                "record 4",
                "row group 1 (rows 4..8)",
                "column `score`",
                "CRC",
                "rows 4..8 cannot be read",
            ],
        );
        assert_eq!((*skipped, *next), (4, 8), "{msg}");
        let read: Vec<u64> = rows.iter().map(|(i, _)| *i).collect();
        assert_eq!(read, [0, 1, 2, 3, 8, 9], "chunks {by_chunks}");
        for (i, row) in &rows {
            assert_eq!(row, &want[*i as usize], "row {i}");
        }
    }
}
