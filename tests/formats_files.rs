//! Input files that change under a reader or are not regular files.
//!
//! - A file shortened while a reader holds it (re-synced datasets do this)
//!   gives an error naming the file — never a `SIGBUS` that kills the
//!   process: TFRecord with small records, with large ones read from their
//!   ends, with the CRC checked as read (the actors' skip mode) or
//!   deferred, rows left in the file and collated later, NPY (C and
//!   Fortran order) and stored NPZ entries.
//! - A FIFO, a pipe (`<(cat x)`) or a character device is read as a stream,
//!   never taken for an empty file: its records come through, and
//!   `/dev/urandom` is an error at once (its first length CRC fails), not
//!   a hang and not an allocation of what a random length claims.

use std::io::Write;
use std::path::{Path, PathBuf};

use feedline::format::npy::{NpyFormat, NpzFormat};
use feedline::format::{Format, OpenOptions, Registry};
use feedline::synthetic::{self, GenOptions, Preset};
use feedline::{collate, Chunk, Error, Schema, Values};

mod format_helpers;
use format_helpers::{all_records, assert_contains};

/// One generated file of `preset` with `records` records.
fn preset_file(dir: &Path, preset: Preset, records: usize) -> PathBuf {
    let mut o = GenOptions::new(preset, dir);
    o.files = Some(1);
    o.records = Some(records);
    synthetic::generate(&o).unwrap().remove(0)
}

fn shorten(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Read `path` in chunks of `per` records; after the first chunk, cut the
/// file to `keep` of its bytes. Returns the chunks read and the error that
/// ends the reading (there must be one).
fn read_while_shortened(
    path: &Path,
    schema: &Schema,
    opts: &OpenOptions,
    per: usize,
    keep: f64,
) -> (Vec<Chunk>, Error) {
    let mut r = Registry::with_builtin()
        .open(path.to_str().unwrap(), None, opts)
        .unwrap();
    let len = std::fs::metadata(path).unwrap().len();
    let mut chunks = Vec::new();
    loop {
        let mut c = Chunk::new(schema);
        match r.read_chunk(&mut c, per, usize::MAX) {
            Ok(0) => panic!("{}: read to the end of a shortened file", path.display()),
            Ok(_) => chunks.push(c),
            Err(e) => {
                assert!(!r.can_continue(), "{e}");
                // Every later call repeats the failure.
                let again = r.read_chunk(&mut Chunk::new(schema), per, usize::MAX);
                assert!(again.is_err());
                return (chunks, e);
            }
        }
        if chunks.len() == 1 {
            shorten(path, (len as f64 * keep) as u64);
        }
    }
}

fn assert_names_the_file(e: &Error, path: &Path) {
    let msg = e.to_string();
    let name = path.file_name().unwrap().to_str().unwrap();
    assert_contains(&msg, &[name, "shortened"]);
}

#[test]
fn a_tfrecord_file_shortened_under_its_reader_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (preset, records, per) in [(Preset::Small, 4000, 100), (Preset::Large, 24, 2)] {
        let schema = synthetic::preset_schema(preset);
        for defer in [false, true] {
            let path = preset_file(dir.path(), preset, records);
            let opts = OpenOptions {
                defer_checksums: defer,
                ..OpenOptions::default()
            };
            let (chunks, e) = read_while_shortened(&path, &schema, &opts, per, 0.5);
            assert!(matches!(e, Error::Io { .. }), "{preset:?} {defer}: {e:?}");
            assert_names_the_file(&e, &path);
            // What was read before the cut is whole; rows left in the file
            // past the cut fail to collate with the same kind of error.
            let n: usize = chunks.iter().map(Chunk::len).sum();
            assert!(n >= per && n < records, "{n}");
            let collated = chunks
                .iter()
                .map(|c| collate(&schema, (0..c.len()).map(|i| (c, i))))
                .collect::<Vec<_>>();
            assert!(collated[0].is_ok());
            for res in collated {
                if let Err(e) = res {
                    assert!(matches!(e, Error::Io { .. }), "{e:?}");
                    assert_names_the_file(&e, &path);
                }
            }
            std::fs::remove_file(&path).unwrap();
        }
    }
}

#[test]
fn a_tfrecord_file_shortened_before_a_frame_is_read_record_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = preset_file(dir.path(), Preset::Small, 3000);
    let mut r = Registry::with_builtin()
        .open(path.to_str().unwrap(), None, &OpenOptions::default())
        .unwrap();
    assert!(r.next_record().unwrap().is_some());
    shorten(&path, 1000);
    let e = loop {
        match r.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end of a shortened file"),
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_names_the_file(&e, &path);
}

/// An `.npy` of `rows` rows of 1,000 little-endian i32 (row `r` holds
/// `r * 1000 + j`), C or Fortran order.
fn npy_bytes(rows: usize, fortran: bool) -> Vec<u8> {
    let header = format!(
        "{{'descr': '<i4', 'fortran_order': {}, 'shape': ({rows}, 1000), }}",
        if fortran { "True" } else { "False" }
    );
    let header = format!("{header:<117}\n");
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for k in 0..rows * 1000 {
        let (r, j) = if fortran {
            (k % rows, k / rows)
        } else {
            (k / 1000, k % 1000)
        };
        out.extend_from_slice(&((r * 1000 + j) as i32).to_le_bytes());
    }
    out
}

fn npy_schema(name: &str) -> Schema {
    Schema::builder()
        .field(name, feedline::DType::I32, [1000])
        .build()
        .unwrap()
}

#[test]
fn an_npy_or_npz_file_shortened_under_its_reader_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for fortran in [false, true] {
        // 4 MB: more than one block of rows.
        let path = dir.path().join("x.npy");
        std::fs::write(&path, npy_bytes(1000, fortran)).unwrap();
        let (chunks, e) =
            read_while_shortened(&path, &npy_schema("x"), &OpenOptions::default(), 50, 0.3);
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert_names_the_file(&e, &path);
        assert!(!chunks.is_empty());
        let first = chunks[0].row(7).unwrap();
        let want: Vec<i32> = (7000..8000).collect();
        assert_eq!(first.get("x").unwrap(), &Values::I32(want));
    }
    // A stored npz entry (its CRC checked first, then read in blocks).
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let o =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file("x.npy", o).unwrap();
    z.write_all(&npy_bytes(1000, false)).unwrap();
    let path = dir.path().join("x.npz");
    std::fs::write(&path, z.finish().unwrap().into_inner()).unwrap();
    let (_, e) = read_while_shortened(&path, &npy_schema("x"), &OpenOptions::default(), 50, 0.3);
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_names_the_file(&e, &path);
}

/// A FIFO at `dir/name` that a thread fills with `bytes` once it is opened.
fn fifo(dir: &Path, name: &str, bytes: Vec<u8>) -> (PathBuf, std::thread::JoinHandle<()>) {
    let path = dir.join(name);
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let p = path.clone();
    let writer = std::thread::spawn(move || {
        // Opening blocks until the reader opens its end.
        let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        // The reader may stop early (an error): a broken pipe is fine.
        let _ = f.write_all(&bytes);
    });
    (path, writer)
}

#[test]
fn a_fifo_or_a_pipe_is_read_as_a_stream_not_as_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = preset_file(dir.path(), Preset::Small, 300);
    let bytes = std::fs::read(&file).unwrap();
    let reg = Registry::with_builtin();
    let opts = OpenOptions::default();
    let expected = all_records(&mut *reg.open(file.to_str().unwrap(), None, &opts).unwrap());
    assert_eq!(expected.len(), 300);

    // A FIFO named like a TFRecord file.
    let (path, writer) = fifo(dir.path(), "fifo.tfrecord", bytes.clone());
    let got = all_records(&mut *reg.open(path.to_str().unwrap(), None, &opts).unwrap());
    writer.join().unwrap();
    assert_eq!(got.len(), 300);
    for (a, b) in got.iter().zip(&expected) {
        assert_eq!(a.fields, b.fields);
    }

    // A pipe, as `<(cat x.tfrecord)` gives it: /dev/fd/N of a child's stdout.
    let mut cat = std::process::Command::new("cat")
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let fd = {
        use std::os::unix::io::AsRawFd;
        cat.stdout.as_ref().unwrap().as_raw_fd()
    };
    let spec = format!("tfrecord:/dev/fd/{fd}");
    let schema = synthetic::preset_schema(Preset::Small);
    let mut r = reg.open(&spec, None, &opts).unwrap();
    let mut n = 0;
    loop {
        let mut c = Chunk::new(&schema);
        match r.read_chunk(&mut c, 64, usize::MAX).unwrap() {
            0 => break,
            k => n += k,
        }
    }
    assert_eq!(n, 300);
    assert!(cat.wait().unwrap().success());

    // An .npy through a FIFO is a stream too; an .npz cannot be one.
    let (path, writer) = fifo(dir.path(), "fifo.npy", npy_bytes(20, false));
    let recs = all_records(&mut *NpyFormat.open(&path, &opts).unwrap());
    writer.join().unwrap();
    assert_eq!(recs.len(), 20);
    assert_eq!(recs[19].get("fifo").unwrap().values.len(), 1000);
    let (path, writer) = fifo(dir.path(), "fifo.npz", Vec::new());
    let e = NpzFormat.open(&path, &opts).err().expect("an error");
    writer.join().unwrap();
    assert_contains(&e.to_string(), &["fifo.npz", "not a regular file"]);
}

#[test]
fn dev_urandom_is_an_error_at_once_not_empty_and_not_a_hang() {
    let reg = Registry::with_builtin();
    let schema = synthetic::preset_schema(Preset::Small);
    let mut r = reg
        .open("tfrecord:/dev/urandom", None, &OpenOptions::default())
        .unwrap();
    let mut c = Chunk::new(&schema);
    let e = r.read_chunk(&mut c, 64, usize::MAX).unwrap_err();
    assert_contains(
        &e.to_string(),
        &["/dev/urandom", "record 0", "bad length CRC"],
    );
    assert!(!r.can_continue());
    let e = r.next_record().unwrap_err();
    assert!(e.to_string().contains("bad length CRC"), "{e}");
    // An empty regular file is still empty.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("e.tfrecord");
    std::fs::write(&empty, b"").unwrap();
    let mut r = reg
        .open(empty.to_str().unwrap(), None, &OpenOptions::default())
        .unwrap();
    assert_eq!(r.read_chunk(&mut c, 64, usize::MAX).unwrap(), 0);
}
