//! Arrow IPC: fixtures written by Hugging Face `datasets` (`save_to_disk`)
//! and pyarrow (Feather v2 uncompressed, zstd and LZ4, a stream whose
//! dictionary is replaced between batches) read with the writer's values,
//! every record once (tests/fixtures/arrow/make.py, expected.json);
//! `start_record` and `skip_to` across batches; projection (a chunk decodes
//! only its schema's columns); the schema from
//! the Arrow schema; a `DatasetDict` refused naming its splits; an
//! unmapped type naming the column and its type; a null as a bad record;
//! truncated and damaged files (a damaged LZ4 buffer too) refused naming the
//! file, never a panic.

use std::path::{Path, PathBuf};

use feedline::format::arrow::ArrowFormat;
use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::plan::expand_inputs;
use feedline::{Chunk, DType, Dim, Schema};

mod format_helpers;
use format_helpers::{all_records, assert_contains, err_string};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/arrow")
        .join(name)
}

fn expected(name: &str) -> Vec<serde_json::Value> {
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    all[name].as_array().unwrap().clone()
}

fn open(path: &Path, start: u64) -> Box<dyn RecordReader> {
    let opts = OpenOptions {
        start_record: start,
        ..OpenOptions::default()
    };
    ArrowFormat.open(path, &opts).unwrap()
}

fn json(r: &mut dyn RecordReader) -> Vec<serde_json::Value> {
    all_records(r).iter().map(|r| r.to_json()).collect()
}

/// Every record of every spec, in order, through the registry.
fn read_specs(specs: &[String]) -> Vec<serde_json::Value> {
    let reg = Registry::with_builtin();
    let mut out = Vec::new();
    for s in specs {
        let mut r = reg.open(s, None, &OpenOptions::default()).unwrap();
        out.extend(json(r.as_mut()));
    }
    out
}

#[test]
fn a_save_to_disk_directory_is_its_files_in_state_json_order_with_the_writers_values() {
    let dir = fixture("hf");
    let specs = expand_inputs(&[dir.display().to_string()]).unwrap();
    assert_eq!(
        specs,
        vec![
            dir.join("data-00000-of-00002.arrow").display().to_string(),
            dir.join("data-00001-of-00002.arrow").display().to_string(),
        ]
    );
    assert_eq!(read_specs(&specs), expected("hf"));
    // With the prefix, the same files, prefixed.
    let prefixed = expand_inputs(&[format!("arrow:{}", dir.display())]).unwrap();
    assert!(
        prefixed.iter().all(|s| s.starts_with("arrow:")),
        "{prefixed:?}"
    );
    assert_eq!(read_specs(&prefixed), expected("hf"));
}

#[test]
fn ipc_files_uncompressed_and_zstd_give_the_writers_values() {
    for name in ["types.feather", "types-zstd.arrow"] {
        let mut r = open(&fixture(name), 0);
        assert_eq!(r.len_hint(), Some(10), "{name}");
        assert_eq!(json(r.as_mut()), expected(name), "{name}");
    }
}

#[test]
fn an_lz4_compressed_file_gives_the_writers_values_from_every_start() {
    // types-lz4.feather: pyarrow's write_feather with its default
    // compression (the LZ4 frame format), 10 rows in batches of 4.
    let path = fixture("types-lz4.feather");
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.windows(4).any(|w| w == LZ4_FRAME_MAGIC),
        "the fixture holds no LZ4 frame"
    );
    let want = expected("types-lz4.feather");
    assert_eq!(want.len(), 10);
    for start in 0..=10u64 {
        let mut r = open(&path, start);
        assert_eq!(r.len_hint(), Some(10));
        assert_eq!(json(r.as_mut()), want[start as usize..], "from {start}");
    }
    // In chunks of the schema's columns, too.
    let schema = Schema::builder()
        .field("big_text", DType::Bytes, [])
        .ragged("big_list", DType::I64, feedline::Ragged::Offsets)
        .build()
        .unwrap();
    let mut r = open(&path, 0);
    let mut got = Vec::new();
    loop {
        let mut chunk = Chunk::new(&schema);
        if r.read_chunk(&mut chunk, 3, usize::MAX).unwrap() == 0 {
            break;
        }
        for i in 0..chunk.len() {
            got.push(chunk.row(i).unwrap().to_json());
        }
    }
    let picked: Vec<_> = want
        .iter()
        .map(|w| serde_json::json!({"big_text": w["big_text"], "big_list": w["big_list"]}))
        .collect();
    assert_eq!(got, picked);
}

/// The magic number that starts an LZ4 frame (little-endian 0x184D2204).
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// Where the first record batch of the IPC file `bytes` starts (its
/// footer's first block); the dictionary batches are before it.
fn first_record_batch_offset(bytes: &[u8]) -> usize {
    let n = bytes.len();
    let footer_len = i32::from_le_bytes(bytes[n - 10..n - 6].try_into().unwrap()) as usize;
    let footer = arrow_ipc::root_as_footer(&bytes[n - 10 - footer_len..n - 10]).unwrap();
    footer.recordBatches().unwrap().get(0).offset() as usize
}

/// `bytes` with `damage` applied at the first LZ4 frame at or after
/// `from` (its magic at `at`), written to a file of the same name in `dir`.
fn damage_first_lz4_frame(
    dir: &Path,
    bytes: &[u8],
    from: usize,
    damage: impl Fn(&mut Vec<u8>, usize),
) -> PathBuf {
    let at = from
        + bytes[from..]
            .windows(4)
            .position(|w| w == LZ4_FRAME_MAGIC)
            .expect("an LZ4 frame");
    let mut b = bytes.to_vec();
    damage(&mut b, at);
    let path = dir.join("types-lz4.feather");
    std::fs::write(&path, &b).unwrap();
    path
}

/// A damage's name and what it does to the file's bytes at an LZ4 frame.
type Damage<'a> = (&'a str, &'a dyn Fn(&mut Vec<u8>, usize));

#[test]
fn a_damaged_lz4_buffer_is_refused_naming_the_file_and_its_batch() {
    let bytes = std::fs::read(fixture("types-lz4.feather")).unwrap();
    let want = expected("types-lz4.feather");
    let dir = tempfile::tempdir().unwrap();
    // The frame's magic number broken; the length the buffer's 8-byte
    // prefix states (before the frame) made smaller than what the frame
    // holds; the frame cut short (its first block's stated size beyond the
    // buffer: the descriptor is 3 bytes after the magic, pyarrow writes no
    // content size).
    let damages: [Damage; 3] = [
        ("magic", &|b, at| b[at] ^= 0xff),
        ("stated length", &|b, at| {
            let stated = i64::from_le_bytes(b[at - 8..at].try_into().unwrap());
            assert!(stated > 1, "a compressed buffer states its length");
            b[at - 8..at].copy_from_slice(&(stated / 2).to_le_bytes());
        }),
        ("block size", &|b, at| {
            let block = at + 4 + 3;
            b[block..block + 4].copy_from_slice(&0x0000_ffffu32.to_le_bytes());
        }),
    ];
    let batch0 = first_record_batch_offset(&bytes);
    for (what, damage) in damages {
        let path = damage_first_lz4_frame(dir.path(), &bytes, batch0, damage);
        let mut r = ArrowFormat.open(&path, &OpenOptions::default()).unwrap();
        let msg = err_string(r.next_record());
        assert_contains(
            &msg,
            &[
                &path.display().to_string(),
                "record batch 0 (rows 0..4",
                "rows 0..4 cannot be read",
            ],
        );
        assert!(!msg.contains("panicked"), "{what}: {msg}");
        // The batch's rows are one bad record; the next batches read.
        assert_eq!(r.records_skipped(), 4, "{what}");
        assert!(r.can_continue(), "{what}");
        assert_eq!(json(r.as_mut()), want[4..], "{what}");
    }
    // A damaged dictionary (the `word` column's, before the batches): no
    // batch can be decoded; one error naming the file, then none read.
    assert!(bytes[..batch0].windows(4).any(|w| w == LZ4_FRAME_MAGIC));
    let path = damage_first_lz4_frame(dir.path(), &bytes, 0, |b, at| b[at] ^= 0xff);
    let mut r = ArrowFormat.open(&path, &OpenOptions::default()).unwrap();
    let msg = err_string(r.next_record());
    assert_contains(&msg, &[&path.display().to_string(), "dictionary batch 0"]);
    assert!(!r.can_continue());
}

#[test]
fn a_compressed_dictionary_stating_a_huge_size_is_an_error_not_an_allocation() {
    // The `word` column's dictionary (before the record batches), its first
    // compressed buffer's 8-byte prefix (the length uncompressed) made 1
    // TiB: refused before the decoder allocates it, naming the file and
    // the dictionary batch; LZ4 and zstd (the zstd frame's magic
    // 0xFD2FB528).
    for (name, magic) in [
        ("types-lz4.feather", LZ4_FRAME_MAGIC),
        ("types-zstd.arrow", [0x28, 0xb5, 0x2f, 0xfd]),
    ] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let batch0 = first_record_batch_offset(&bytes);
        let at = bytes[..batch0]
            .windows(4)
            .position(|w| w == magic)
            .expect("a compressed dictionary buffer");
        let mut b = bytes.clone();
        b[at - 8..at].copy_from_slice(&(1i64 << 40).to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &b).unwrap();
        let mut r = ArrowFormat.open(&path, &OpenOptions::default()).unwrap();
        let msg = err_string(r.next_record());
        assert_contains(
            &msg,
            &[
                &path.display().to_string(),
                "dictionary batch 0",
                "states 1099511627776 bytes uncompressed",
            ],
        );
        assert!(!r.can_continue(), "{name}");
    }
}

#[test]
fn a_stream_whose_dictionary_is_replaced_reads_each_batch_with_its_own() {
    let want = expected("dict-stream.arrow");
    for start in 0..=want.len() as u64 {
        let mut r = open(&fixture("dict-stream.arrow"), start);
        assert_eq!(json(r.as_mut()), want[start as usize..], "from {start}");
    }
}

#[test]
fn start_record_and_skip_to_land_on_the_record_across_batches() {
    let want = expected("types.feather");
    for name in ["types.feather", "types-zstd.arrow"] {
        for start in 0..=10u64 {
            let mut r = open(&fixture(name), start);
            assert_eq!(r.next_index(), start);
            assert_eq!(
                json(r.as_mut()),
                want[start as usize..],
                "{name} from {start}"
            );
        }
        let mut r = open(&fixture(name), 0);
        assert_eq!(r.next_record().unwrap().unwrap().to_json(), want[0]);
        r.skip_to(7).unwrap();
        assert_eq!(r.next_index(), 7);
        assert_eq!(json(r.as_mut()), want[7..], "{name}");
        r.skip_to(100).unwrap();
        assert_eq!(r.next_index(), 10);
        assert!(r.next_record().unwrap().is_none());
    }
}

#[test]
fn read_chunk_decodes_the_schemas_columns() {
    let schema = Schema::builder()
        .field("u64", DType::I64, [])
        .field("word", DType::Bytes, [])
        .build()
        .unwrap();
    let want = expected("types.feather");
    let mut r = open(&fixture("types.feather"), 3);
    let mut got = Vec::new();
    loop {
        let mut chunk = Chunk::new(&schema);
        if r.read_chunk(&mut chunk, 3, usize::MAX).unwrap() == 0 {
            break;
        }
        for i in 0..chunk.len() {
            let row = chunk.row(i).unwrap();
            got.push((row.origin().record, row.to_json()));
        }
    }
    assert_eq!(got.len(), 7);
    for (k, (record, row)) in got.iter().enumerate() {
        assert_eq!(*record, 3 + k as u64);
        let w = &want[3 + k];
        assert_eq!(
            row,
            &serde_json::json!({"u64": w["u64"], "word": w["word"]})
        );
    }
}

#[test]
fn chunks_decode_only_the_schemas_columns() {
    // timestamp.arrow: `ok` (int64) and `when` (a timestamp, which feedline
    // does not map: decoding it is an error). A chunk of a schema without
    // `when` reads the file, so its columns alone were decoded.
    let path = fixture("timestamp.arrow");
    let schema = Schema::builder()
        .field("ok", DType::I64, [])
        .build()
        .unwrap();
    let mut r = open(&path, 0);
    let mut chunk = Chunk::new(&schema);
    assert_eq!(r.read_chunk(&mut chunk, 10, usize::MAX).unwrap(), 2);
    let rows: Vec<_> = (0..chunk.len())
        .map(|i| chunk.row(i).unwrap().to_json())
        .collect();
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"ok": [1]}),
            serde_json::json!({"ok": [2]})
        ]
    );
    // The whole record (what cat reads) names the column and its type.
    let msg = err_string(open(&path, 0).next_record());
    assert_contains(&msg, &["timestamp.arrow", "column `when`", "Timestamp"]);
    // A schema field the file lacks is an error naming it.
    let schema = Schema::builder()
        .field("ok", DType::I64, [])
        .field("nope", DType::F32, [])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&schema);
    let msg = err_string(open(&path, 0).read_chunk(&mut chunk, 10, usize::MAX));
    assert_contains(&msg, &["record 0", "nope"]);
}

#[test]
fn every_column_fits_the_inferred_schema_in_chunks() {
    // types.feather's `grid` is a list of lists (int32 [[i, i+1], [i+2,
    // i+3]]): the inferred schema makes it a flat ragged field, and its
    // rows must fit it (they came as [2, 2], which a `[?]` field refuses);
    // `big_list` a list, the rest scalars.
    let path = fixture("types.feather");
    let reg = Registry::with_builtin();
    let schema = reg.infer_schema(path.to_str().unwrap(), None, 10).unwrap();
    let mut r = open(&path, 0);
    let mut got = Vec::new();
    loop {
        let mut chunk = Chunk::new(&schema);
        if r.read_chunk(&mut chunk, 4, usize::MAX).unwrap() == 0 {
            break;
        }
        for i in 0..chunk.len() {
            got.push(chunk.row(i).unwrap().to_json());
        }
    }
    assert_eq!(got, expected("types.feather"));
    // A record read whole gives the flat shape too.
    let rec = open(&path, 0).next_record().unwrap().unwrap();
    let (_, grid) = rec.fields.iter().find(|(n, _)| n == "grid").unwrap();
    assert_eq!(grid.shape, vec![4]);
}

#[test]
fn the_schema_comes_from_the_arrow_schema() {
    let reg = Registry::with_builtin();
    let file = fixture("hf/data-00000-of-00002.arrow");
    let s = reg.infer_schema(file.to_str().unwrap(), None, 10).unwrap();
    let field = |n: &str| s.fields().iter().find(|f| f.name == n).unwrap().clone();
    assert_eq!((field("id").dtype, field("id").shape), (DType::I64, vec![]));
    assert_eq!(
        (field("score").dtype, field("score").shape),
        (DType::F64, vec![])
    );
    assert_eq!(
        (field("text").dtype, field("text").shape),
        (DType::Bytes, vec![])
    );
    assert_eq!(
        (field("tokens").dtype, field("tokens").shape),
        (DType::I32, vec![Dim::Var])
    );
    assert_eq!(
        (field("vec").dtype, field("vec").shape),
        (DType::F32, vec![Dim::Fixed(3)])
    );
    assert_eq!(
        (field("image").dtype, field("image").shape),
        (DType::Bytes, vec![])
    );
    let t = reg
        .infer_schema(fixture("types.feather").to_str().unwrap(), None, 10)
        .unwrap();
    let grid = t.fields().iter().find(|f| f.name == "grid").unwrap();
    assert_eq!(
        (grid.dtype, grid.shape.clone()),
        (DType::I32, vec![Dim::Var])
    );
    let word = t.fields().iter().find(|f| f.name == "word").unwrap();
    assert_eq!(word.dtype, DType::Bytes);
}

#[test]
fn a_dataset_dict_is_refused_naming_its_splits() {
    let dir = fixture("dict");
    let msg = err_string(expand_inputs(&[dir.display().to_string()]));
    assert_contains(
        &msg,
        &[
            "DatasetDict",
            "train",
            "test",
            "give the directory of one split",
        ],
    );
    // One split is a save_to_disk directory.
    let specs = expand_inputs(&[dir.join("train").display().to_string()]).unwrap();
    assert_eq!(
        read_specs(&specs),
        vec![serde_json::json!({"x": [1]}), serde_json::json!({"x": [2]})]
    );
}

#[test]
fn an_unmapped_type_is_an_error_naming_the_column_and_its_type() {
    let path = fixture("timestamp.arrow");
    let reg = Registry::with_builtin();
    let msg = err_string(reg.infer_schema(path.to_str().unwrap(), None, 10));
    assert_contains(&msg, &["timestamp.arrow", "column `when`", "Timestamp(s"]);
    let mut r = open(&path, 0);
    let msg = err_string(r.next_record());
    assert_contains(&msg, &["timestamp.arrow", "column `when`", "Timestamp(s"]);
}

#[test]
fn a_null_is_a_bad_record_naming_the_row_and_the_column() {
    let mut r = open(&fixture("null.arrow"), 0);
    assert_eq!(
        r.next_record().unwrap().unwrap().to_json(),
        serde_json::json!({"v": [1]})
    );
    let msg = err_string(r.next_record());
    assert_contains(&msg, &["null.arrow", "record 1", "`v`", "null"]);
    assert!(r.can_continue());
    assert_eq!(
        r.next_record().unwrap().unwrap().to_json(),
        serde_json::json!({"v": [3]})
    );
    assert!(r.next_record().unwrap().is_none());
}

#[test]
fn starting_past_a_batch_or_skipping_it_does_not_decode_it() {
    // null.arrow: three batches of one row; the second holds a null. Opened
    // at row 2, or skipped to it, the second batch is never decoded.
    let mut r = open(&fixture("null.arrow"), 2);
    assert_eq!(
        r.next_record().unwrap().unwrap().to_json(),
        serde_json::json!({"v": [3]})
    );
    let mut r = open(&fixture("null.arrow"), 0);
    assert_eq!(
        r.next_record().unwrap().unwrap().to_json(),
        serde_json::json!({"v": [1]})
    );
    r.skip_to(2).unwrap();
    assert_eq!(
        r.next_record().unwrap().unwrap().to_json(),
        serde_json::json!({"v": [3]})
    );
    assert!(r.next_record().unwrap().is_none());
}

/// Every truncation of `path` fails to open, naming the file; none panics.
fn every_truncation_is_refused(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join(path.file_name().unwrap());
    for len in 0..bytes.len() {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        match ArrowFormat.open(&cut, &OpenOptions::default()) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(&cut.display().to_string()), "{len}: {msg}");
            }
            Ok(_) => panic!("{} cut to {len} bytes opened", path.display()),
        }
    }
}

#[test]
fn truncated_streams_and_files_are_refused_naming_the_file() {
    every_truncation_is_refused(&fixture("dict-stream.arrow"));
    every_truncation_is_refused(&fixture("hf/data-00001-of-00002.arrow"));
    every_truncation_is_refused(&fixture("types.feather"));
}

#[test]
fn flipped_bytes_are_an_error_or_a_value_never_a_panic() {
    for name in ["dict-stream.arrow", "types-zstd.arrow", "types-lz4.feather"] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join(name);
        for at in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[at] ^= 0x5a;
            std::fs::write(&bad, &b).unwrap();
            let Ok(mut r) = ArrowFormat.open(&bad, &OpenOptions::default()) else {
                continue;
            };
            for _ in 0..100 {
                match r.next_record() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        assert!(e.to_string().contains(name), "{at}: {e}");
                        if !r.can_continue() {
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn stream_compression_is_refused() {
    let opts = OpenOptions {
        compression: Some(feedline::format::Compression::Gzip),
        ..OpenOptions::default()
    };
    let msg = err_string(ArrowFormat.open(&fixture("null.arrow"), &opts));
    assert_contains(&msg, &["null.arrow", "compressed inside"]);
}

#[test]
fn the_format_name_and_extensions_resolve() {
    let reg = Registry::with_builtin();
    for spec in ["x.arrow", "x.feather", "arrow:x.dat"] {
        assert_eq!(reg.resolve(spec, None).unwrap().0.name(), "arrow", "{spec}");
    }
}
