//! Regression tests for the bugs that fuzzing found (`fuzz/`, see
//! `tests/fuzz_targets/mod.rs`): one test per bug, each with the smallest
//! input that showed it. The inputs are in `fuzz/corpus/` too, so
//! `tests/fuzz_smoke.rs` replays them through the full set of invariants.

#[path = "fuzz_targets/mod.rs"]
mod fuzz_targets;

use std::io::Write;

use feedline::format::tfrecord::{TfRecordReader, TfRecordWriter};
use feedline::format::{Compression, OpenOptions, RecordReader, Registry};
use feedline::{Error, SourceId};

#[global_allocator]
static ALLOC: fuzz_targets::CountingAlloc = fuzz_targets::CountingAlloc;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// An NPY v1 file with this header dict and data.
fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let text = format!("{dict:<117}\n");
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

fn corrupt_location(e: &Error) -> (u64, Option<u64>) {
    let loc = e.location().unwrap_or_else(|| panic!("no location: {e}"));
    (loc.record, loc.offset)
}

/// Bug: a compressed npy stream cut inside row 2, opened at
/// `start_record = 3`, failed at row 2 and then reported every later error
/// at "record 3, offset 176": a row (and a byte offset) past the end of the
/// 167-byte stream. A dead reader now names the row that could not be read.
#[test]
fn npy_dead_stream_names_the_row_that_failed_not_one_past_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy.gz");
    let data: Vec<u8> = (0..39).collect();
    let file = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 4), }",
        &data,
    );
    assert_eq!(file.len(), 167);
    std::fs::write(&path, gzip(&file)).unwrap();
    let opts = OpenOptions {
        start_record: 3,
        ..OpenOptions::default()
    };
    let mut r = Registry::with_builtin()
        .open(path.to_str().unwrap(), None, &opts)
        .unwrap();
    let first = r.next_record().unwrap_err();
    assert_eq!(corrupt_location(&first), (2, Some(160)), "{first}");
    assert!(
        first.to_string().contains("stream ends inside row 2"),
        "{first}"
    );
    assert!(!r.can_continue());
    let again = r.next_record().unwrap_err();
    assert_eq!(corrupt_location(&again), (2, Some(160)), "{again}");
    assert!(
        again
            .to_string()
            .contains("the file cannot be read past an earlier error"),
        "{again}"
    );
    let mut chunk = feedline::Chunk::new(
        &feedline::Schema::builder()
            .field("x", feedline::DType::F32, [4])
            .build()
            .unwrap(),
    );
    let e = r.read_chunk(&mut chunk, 10, 1 << 20).unwrap_err();
    assert_eq!(corrupt_location(&e), (2, Some(160)), "{e}");
}

/// Bug: `TfRecordReader::from_stream` called an empty gzip or zlib input a
/// corrupt stream ("unexpected end of file" at record 0), while `open` and
/// `from_bytes` read an empty input as an empty stream, whatever its
/// compression. Now all three agree.
#[test]
fn tfrecord_from_stream_reads_an_empty_compressed_input_as_empty() {
    for c in [Compression::Gzip, Compression::Zlib] {
        let opts = OpenOptions {
            compression: Some(c),
            ..OpenOptions::default()
        };
        let src = SourceId::intern("empty.tfrecord.z");
        let mut r = TfRecordReader::from_stream(std::io::Cursor::new(Vec::new()), src, &opts);
        assert!(r.next_record().unwrap().is_none(), "{c:?}");
        assert!(r.next_record().unwrap().is_none(), "{c:?}");
        let mut r = TfRecordReader::from_bytes(Vec::new(), src, &opts);
        assert!(r.next_record().unwrap().is_none(), "{c:?}");

        // A non-empty stream still decodes, and a broken one still fails.
        let mut w = TfRecordWriter::new(Vec::new(), c);
        w.write_record(b"payload").unwrap();
        let bytes = w.finish().unwrap();
        let mut r = TfRecordReader::from_stream(std::io::Cursor::new(bytes.clone()), src, &opts);
        assert_eq!(r.next_payload().unwrap(), Some(&b"payload"[..]));
        assert_eq!(r.next_payload().unwrap(), None);
        let cut = bytes[..bytes.len() / 2].to_vec();
        let mut r = TfRecordReader::from_stream(std::io::Cursor::new(cut), src, &opts);
        let e = r.next_payload().unwrap_err();
        assert!(e.to_string().contains("corrupt compressed stream"), "{e}");
        // One byte of garbage is not an empty stream.
        let mut r = TfRecordReader::from_stream(std::io::Cursor::new(vec![0x1f]), src, &opts);
        assert!(r.next_payload().is_err(), "{c:?}");
    }
}

/// Bug (a panic): a `descr` whose type character is not ASCII (`'é4'`, or
/// invalid UTF-8, read as U+FFFD) was sliced at byte 1, inside the
/// character: "byte index 1 is not a char boundary". Now it is an
/// "unsupported dtype" error naming the file.
#[test]
fn npy_non_ascii_descr_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::with_builtin();
    for (i, descr) in [
        &b"|\x92\xce"[..],
        "é4".as_bytes(),
        "<é".as_bytes(),
        "\u{20ac}".as_bytes(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut dict = b"{'descr': '".to_vec();
        dict.extend_from_slice(descr);
        dict.extend_from_slice(b"', 'fortran_order': False, 'shape': (3, 2), }");
        let mut text = dict.clone();
        text.resize(117, b' ');
        text.push(b'\n');
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend_from_slice(&(text.len() as u16).to_le_bytes());
        file.extend_from_slice(&text);
        file.extend_from_slice(&[0; 24]);
        for name in [format!("d{i}.npy"), format!("d{i}.npy.gz")] {
            let path = dir.path().join(&name);
            let bytes = if name.ends_with(".gz") {
                gzip(&file)
            } else {
                file.clone()
            };
            std::fs::write(&path, bytes).unwrap();
            let e = reg
                .open(path.to_str().unwrap(), None, &OpenOptions::default())
                .map(|_| ())
                .unwrap_err();
            assert!(matches!(e, Error::BadFile { .. }), "{name}: {e:?}");
            let msg = e.to_string();
            assert!(msg.starts_with(path.to_str().unwrap()), "{msg}");
            assert!(msg.contains("unsupported dtype"), "{name}: {msg}");
        }
    }
}

/// Bug (memory): reading a row of an npy stream (`.npy.gz`, or a deflated
/// npz entry) allocated the row's values from the header's shape before
/// reading the row: a 200-byte file declaring `shape (1, 60000000)` of `i1`
/// (a 60 MB row, within `max_record_bytes`) made a 240 MB allocation (the
/// row widened to i32) before finding that the stream ends. The values are
/// now sized by the bytes actually read.
#[test]
fn npy_stream_row_is_not_allocated_from_the_header_shape() {
    assert!(fuzz_targets::counting_active());
    let dir = tempfile::tempdir().unwrap();
    let file = npy(
        "{'descr': '|i1', 'fortran_order': False, 'shape': (1, 60000000), }",
        &[7; 40],
    );
    let reg = Registry::with_builtin();
    for (name, bytes) in [("big.npy.gz", gzip(&file)), ("big.npy", file.clone())] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let (res, grew) = fuzz_targets::heap_growth(|| {
            let mut r = reg.open(path.to_str().unwrap(), None, &OpenOptions::default())?;
            r.next_record()
        });
        let e = res.unwrap_err();
        assert!(e.to_string().contains("60000000"), "{name}: {e}");
        assert!(grew < 8 << 20, "{name}: the heap grew by {grew} bytes");
    }
}

/// Bug (silent corruption): the CRC-32 of a stored npz entry is fed row
/// block by row block as `read_chunk` reads them. When a block failed to
/// convert (a value out of range for the schema's dtype) and was re-read
/// row by row, the next block started inside the bytes already fed, was not
/// fed at all, and the check at the last row never ran: `read_chunk`
/// delivered the rest of a corrupt entry without an error, while
/// `next_record` reported the CRC mismatch. Now the whole entry is
/// checked before any row is read (a CRC covers the entry as a whole), and
/// both paths report it at once, delivering no row.
#[test]
fn npz_crc_is_checked_after_a_block_is_reread() {
    use zip::write::SimpleFileOptions;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npz");
    let values: [i64; 10] = [0, 1, 2, 300, 4, 5, 6, 7, 8, 9];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let entry = npy(
        "{'descr': '<i8', 'fortran_order': False, 'shape': (10,), }",
        &data,
    );
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("x.npy", o).unwrap();
    w.write_all(&entry).unwrap();
    let mut file = w.finish().unwrap().into_inner();
    // Corrupt the last row (9 → 10): the entry's stored CRC no longer fits.
    let at = file.windows(6).position(|w| w == b"\x93NUMPY").unwrap() + 128 + 9 * 8;
    assert_eq!(file[at], 9);
    file[at] = 10;
    std::fs::write(&path, &file).unwrap();

    let schema = feedline::Schema::builder()
        .ragged("x", feedline::DType::U8, feedline::Ragged::Offsets)
        .build()
        .unwrap();
    let reg = Registry::with_builtin();
    let open = || {
        reg.open(path.to_str().unwrap(), None, &OpenOptions::default())
            .unwrap()
    };
    // next_record: the CRC mismatch before any record.
    let mut r = open();
    let e = r.next_record().unwrap_err();
    assert!(matches!(e, feedline::Error::BadFile { .. }), "{e:?}");
    assert!(e.to_string().contains("CRC-32 mismatch"), "{e}");
    assert!(!r.can_continue());

    // read_chunk, 3 rows at a time: the same error, no row.
    let mut r = open();
    let mut chunk = feedline::Chunk::new(&schema);
    let e2 = r.read_chunk(&mut chunk, 3, usize::MAX).unwrap_err();
    assert_eq!(e2.to_string(), e.to_string());
    assert!(chunk.is_empty());
    assert!(!r.can_continue());
}
