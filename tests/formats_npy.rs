//! NPY and NPZ: fixtures written by NumPy, every dtype / byte order / memory
//! order written by hand, hostile headers, npz (stored and deflated),
//! start_record, and the fast `read_chunk` path against the generic one.

use std::io::Write;
use std::path::{Path, PathBuf};

use feedline::format::npy::{NpyFormat, NpzFormat};
use feedline::format::{Compression, Format, OpenOptions, RecordReader, Registry};
use feedline::{Chunk, DType, Error, Field, Ragged, Schema, Values};
use proptest::prelude::*;

mod format_helpers;
use format_helpers::*;

// ---------------------------------------------------------------------------
// Helpers: writing NPY files by hand
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum K {
    B1,
    I1,
    I2,
    I4,
    I8,
    U1,
    U2,
    U4,
    U8,
    F2,
    F4,
    F8,
}

const KINDS: [K; 12] = [
    K::B1,
    K::I1,
    K::I2,
    K::I4,
    K::I8,
    K::U1,
    K::U2,
    K::U4,
    K::U8,
    K::F2,
    K::F4,
    K::F8,
];

impl K {
    fn code(self) -> &'static str {
        match self {
            K::B1 => "b1",
            K::I1 => "i1",
            K::I2 => "i2",
            K::I4 => "i4",
            K::I8 => "i8",
            K::U1 => "u1",
            K::U2 => "u2",
            K::U4 => "u4",
            K::U8 => "u8",
            K::F2 => "f2",
            K::F4 => "f4",
            K::F8 => "f8",
        }
    }

    fn size(self) -> usize {
        self.code()[1..].parse().unwrap()
    }

    fn dtype(self) -> DType {
        match self {
            K::B1 => DType::Bool,
            K::I1 | K::I2 | K::I4 => DType::I32,
            K::I8 | K::U2 | K::U4 | K::U8 => DType::I64,
            K::U1 => DType::U8,
            K::F2 | K::F4 => DType::F32,
            K::F8 => DType::F64,
        }
    }
}

/// One element: raw bits (of the element's size) as a u64.
type Bits = u64;

/// The value a record holds for element `bits` of kind `k`.
fn expected_push(k: K, bits: Bits, out: &mut Values) {
    match (k, out) {
        (K::B1, Values::Bool(v)) => v.push(bits != 0),
        (K::I1, Values::I32(v)) => v.push(bits as u8 as i8 as i32),
        (K::I2, Values::I32(v)) => v.push(bits as u16 as i16 as i32),
        (K::I4, Values::I32(v)) => v.push(bits as u32 as i32),
        (K::I8, Values::I64(v)) => v.push(bits as i64),
        (K::U1, Values::U8(v)) => v.push(bits as u8),
        (K::U2 | K::U4 | K::U8, Values::I64(v)) => v.push(bits as i64),
        (K::F2, Values::F32(v)) => v.push(half_reference(bits as u16) as f32),
        (K::F4, Values::F32(v)) => v.push(f32::from_bits(bits as u32)),
        (K::F8, Values::F64(v)) => v.push(f64::from_bits(bits)),
        (k, out) => panic!("{k:?} into {:?}", out.dtype()),
    }
}

/// Half to f64 from the definition (independent of the crate's converter).
fn half_reference(h: u16) -> f64 {
    let s = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    match e {
        0 => s * m * 2f64.powi(-24),
        31 if m == 0.0 => s * f64::INFINITY,
        31 => f64::NAN,
        _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

fn encode(k: K, bits: Bits, big: bool, out: &mut Vec<u8>) {
    let n = k.size();
    let le = bits.to_le_bytes();
    let mut b = le[..n].to_vec();
    if big {
        b.reverse();
    }
    out.extend_from_slice(&b);
}

/// A whole NPY file: header of `version` (1, 2 or 3) + data.
fn npy_file(version: u8, descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let py_bool = if fortran { "True" } else { "False" };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': {py_bool}, 'shape': {shape_s}, }}");
    npy_raw_header(version, &dict, data)
}

/// An NPY file with an arbitrary header text.
fn npy_raw_header(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let pre = if version == 1 { 10 } else { 12 };
    let mut text = dict.as_bytes().to_vec();
    while (pre + text.len() + 1) % 64 != 0 {
        text.push(b' ');
    }
    text.push(b'\n');
    let mut f = b"\x93NUMPY".to_vec();
    f.push(version);
    f.push(0);
    if version == 1 {
        f.extend_from_slice(&(text.len() as u16).to_le_bytes());
    } else {
        f.extend_from_slice(&(text.len() as u32).to_le_bytes());
    }
    f.extend_from_slice(&text);
    f.extend_from_slice(data);
    f
}

/// An array: kind, shape, C-order element bits.
#[derive(Clone, Debug)]
struct Arr {
    k: K,
    shape: Vec<usize>,
    elems: Vec<Bits>,
}

impl Arr {
    fn rows(&self) -> usize {
        self.shape[0]
    }

    fn row_elems(&self) -> usize {
        self.shape[1..].iter().product()
    }

    /// The data bytes in the given byte and memory order.
    fn data(&self, big: bool, fortran: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if !fortran {
            for &b in &self.elems {
                encode(self.k, b, big, &mut out);
            }
            return out;
        }
        let total: usize = self.shape.iter().product();
        let mut cstrides = vec![1usize; self.shape.len()];
        for d in (0..self.shape.len().saturating_sub(1)).rev() {
            cstrides[d] = cstrides[d + 1] * self.shape[d + 1];
        }
        let mut idx = vec![0usize; self.shape.len()];
        for _ in 0..total {
            let c: usize = idx.iter().zip(&cstrides).map(|(i, s)| i * s).sum();
            encode(self.k, self.elems[c], big, &mut out);
            // Fortran order: first index fastest.
            for (i, &n) in idx.iter_mut().zip(&self.shape) {
                *i += 1;
                if *i < n {
                    break;
                }
                *i = 0;
            }
        }
        out
    }

    fn file(&self, version: u8, big: bool, fortran: bool) -> Vec<u8> {
        let order = if self.k.size() == 1 {
            "|"
        } else if big {
            ">"
        } else {
            "<"
        };
        npy_file(
            version,
            &format!("{order}{}", self.k.code()),
            fortran,
            &self.shape,
            &self.data(big, fortran),
        )
    }

    /// The values record `i` must hold.
    fn row_values(&self, i: usize) -> Values {
        let n = self.row_elems();
        let mut v = Values::new(self.k.dtype());
        for &b in &self.elems[i * n..(i + 1) * n] {
            expected_push(self.k, b, &mut v);
        }
        v
    }
}

/// Random element bits for kind `k` (u8 kept within i64).
fn bits_strategy(k: K) -> BoxedStrategy<Bits> {
    match k {
        K::B1 => (0u64..2).boxed(),
        K::U8 => (0u64..=i64::MAX as u64).boxed(),
        K::F2 => any::<u16>()
            .prop_filter("finite half", |h| (h >> 10) & 0x1f != 0x1f)
            .prop_map(|h| h as u64)
            .boxed(),
        K::F4 => any::<f32>()
            .prop_filter("not NaN", |x| !x.is_nan())
            .prop_map(|x| x.to_bits() as u64)
            .boxed(),
        K::F8 => any::<f64>()
            .prop_filter("not NaN", |x| !x.is_nan())
            .prop_map(f64::to_bits)
            .boxed(),
        k => {
            let bits = k.size() * 8;
            any::<u64>()
                .prop_map(move |x| if bits == 64 { x } else { x & ((1 << bits) - 1) })
                .boxed()
        }
    }
}

fn arr_strategy() -> impl Strategy<Value = Arr> {
    (
        prop::sample::select(KINDS.to_vec()),
        prop::collection::vec(0usize..4, 1..4),
        0usize..7,
    )
        .prop_flat_map(|(k, mut shape, rows)| {
            shape[0] = rows;
            let n: usize = shape.iter().product();
            prop::collection::vec(bits_strategy(k), n).prop_map(move |elems| Arr {
                k,
                shape: shape.clone(),
                elems,
            })
        })
}

fn arr(k: K, shape: &[usize], f: impl Fn(usize) -> Bits) -> Arr {
    let n: usize = shape.iter().product();
    Arr {
        k,
        shape: shape.to_vec(),
        elems: (0..n).map(f).collect(),
    }
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

/// An npz of `(entry name, npy bytes)`, stored or deflated.
fn npz_file(entries: &[(&str, Vec<u8>)], deflated: bool) -> Vec<u8> {
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = if deflated {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, bytes) in entries {
        z.start_file(*name, opts).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap().into_inner()
}

fn opts() -> OpenOptions {
    OpenOptions::default()
}

fn open_npy(p: &Path) -> feedline::Result<Box<dyn RecordReader>> {
    NpyFormat.open(p, &opts())
}

/// Read everything both ways, in chunks of `(max_records, max_bytes)`,
/// continuing after errors while the reader can; the chunks, counts and
/// error messages must be identical.
fn fast_equals_generic(
    open: &dyn Fn() -> Box<dyn RecordReader>,
    schema: &Schema,
    max_records: usize,
    max_bytes: usize,
) {
    let run = |fast| chunk_log(open(), schema, max_records, max_bytes, fast);
    let (a, b) = (run(true), run(false));
    assert_eq!(a.len(), b.len(), "number of read_chunk calls");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x.0, y.0, "call {i}: result");
        assert_eq!(x.2, y.2, "call {i}: next_index");
        assert!(x.1 == y.1, "call {i}: chunks differ:\n{:?}\n{:?}", x.1, y.1);
    }
}

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

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

#[test]
fn fixture_x_npy_matches_expected() {
    let reg = Registry::with_builtin();
    let mut r = reg
        .open(fixture("x.npy").to_str().unwrap(), None, &opts())
        .unwrap();
    assert_eq!(r.len_hint(), Some(10));
    let recs = all_records(&mut *r);
    let want = expected_lines("x.expected.jsonl");
    assert_eq!(recs.len(), want.len());
    for (i, (rec, w)) in recs.iter().zip(&want).enumerate() {
        assert_eq!(&rec.to_json(), w, "record {i}");
        assert_eq!(rec.location.record, i as u64);
        assert_eq!(rec.location.offset, Some(128 + 16 * i as u64));
        let t = rec.get("x").unwrap();
        assert_eq!(t.shape, vec![4]);
        assert_eq!(t.values.dtype(), DType::F32);
    }
}

#[test]
fn fixture_arrays_npz_matches_expected() {
    let reg = Registry::with_builtin();
    let mut r = reg
        .open(fixture("arrays.npz").to_str().unwrap(), None, &opts())
        .unwrap();
    assert_eq!(r.len_hint(), Some(10));
    let recs = all_records(&mut *r);
    let want = expected_lines("arrays.expected.jsonl");
    assert_eq!(recs.len(), want.len());
    for (i, (rec, w)) in recs.iter().zip(&want).enumerate() {
        assert_eq!(&rec.to_json(), w, "record {i}");
        assert_eq!(rec.get("x").unwrap().shape, vec![4]);
        assert_eq!(rec.get("y").unwrap().shape, Vec::<usize>::new());
    }
    // The fixture's schema, inferred, reads through the fast path too.
    let schema = reg
        .infer_schema(fixture("arrays.npz").to_str().unwrap(), None, 10)
        .unwrap();
    let open = || {
        reg.open(fixture("arrays.npz").to_str().unwrap(), None, &opts())
            .unwrap()
    };
    fast_equals_generic(&open, &schema, 3, usize::MAX);
}

// ---------------------------------------------------------------------------
// Dtypes, byte orders, memory orders, versions
// ---------------------------------------------------------------------------

#[test]
fn every_dtype_byte_order_and_memory_order() {
    let dir = tempfile::tempdir().unwrap();
    for k in KINDS {
        for big in [false, true] {
            for fortran in [false, true] {
                let a = arr(k, &[3, 2, 3], |i| match k {
                    K::B1 => (i % 3 == 0) as u64,
                    K::F2 => [0x3c00u64, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00][i % 6],
                    K::F4 => (1.5f32 * i as f32 - 7.25).to_bits() as u64,
                    K::F8 => (-0.1f64 * i as f64).to_bits(),
                    K::U8 => u64::MAX / 2 - i as u64,
                    _ => (i as u64 * 0x0123_4567_89ab_cdef) >> (64 - 8 * k.size()),
                });
                let p = write(dir.path(), "a.npy", &a.file(1, big, fortran));
                let mut r = open_npy(&p).unwrap();
                let recs = all_records(&mut *r);
                assert_eq!(recs.len(), 3, "{k:?} big={big} fortran={fortran}");
                for (i, rec) in recs.iter().enumerate() {
                    let t = rec.get("a").unwrap();
                    assert_eq!(t.shape, vec![2, 3]);
                    assert_eq!(
                        t.values,
                        a.row_values(i),
                        "{k:?} big={big} fortran={fortran} row {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn half_floats_convert_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let halves = [
        0x3c00u16, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x8000, 0x7c00, 0xfc00, 0x3555,
    ];
    let a = arr(K::F2, &[halves.len()], |i| halves[i] as u64);
    let p = write(dir.path(), "h.npy", &a.file(1, false, false));
    let got: Vec<f32> = all_records(&mut *open_npy(&p).unwrap())
        .iter()
        .map(|r| r.get("h").unwrap().values.as_f32().unwrap()[0])
        .collect();
    assert_eq!(
        got,
        vec![
            1.0,
            -2.0,
            65504.0,
            5.960_464_5e-8,
            6.097_555e-5,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.333_251_95
        ]
    );
    assert!(got[5].is_sign_negative());
}

#[test]
fn one_dimensional_arrays_give_scalars() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::I8, &[4], |i| i as u64 * 10);
    let p = write(dir.path(), "labels.npy", &a.file(1, false, false));
    let recs = all_records(&mut *open_npy(&p).unwrap());
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[2].get("labels").unwrap().shape, Vec::<usize>::new());
    assert_eq!(recs[2].to_json(), serde_json::json!({"labels": [20]}));
}

#[test]
fn header_versions_2_and_3_and_native_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::I4, &[2, 2], |i| i as u64 + 1);
    for v in [2u8, 3] {
        let p = write(dir.path(), "v.npy", &a.file(v, false, false));
        let recs = all_records(&mut *open_npy(&p).unwrap());
        assert_eq!(recs[1].to_json(), serde_json::json!({"v": [3, 4]}));
    }
    // '=' is native (little-endian here), a Python 2 long and extra spacing.
    let data = a.data(cfg!(target_endian = "big"), false);
    let bytes = npy_raw_header(
        1,
        "{ \"descr\" : \"=i4\" , \"shape\":(2L,2L), \"fortran_order\":False}",
        &data,
    );
    let p = write(dir.path(), "n.npy", &bytes);
    let recs = all_records(&mut *open_npy(&p).unwrap());
    assert_eq!(recs[0].to_json(), serde_json::json!({"n": [1, 2]}));
}

#[test]
fn empty_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "e.npy",
        &npy_file(1, "<f4", false, &[0, 3], &[]),
    );
    let mut r = open_npy(&p).unwrap();
    assert_eq!(r.len_hint(), Some(0));
    assert!(r.next_record().unwrap().is_none());
    let schema = Schema::builder()
        .field("e", DType::F32, [3])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&schema);
    assert_eq!(r.read_chunk(&mut chunk, 10, 1 << 20).unwrap(), 0);

    let p = write(
        dir.path(),
        "z.npy",
        &npy_file(1, "<f8", true, &[3, 0, 2], &[]),
    );
    let recs = all_records(&mut *open_npy(&p).unwrap());
    assert_eq!(recs.len(), 3);
    let t = recs[1].get("z").unwrap();
    assert_eq!((t.shape.clone(), t.values.len()), (vec![0, 2], 0));
    let schema = Schema::builder()
        .ragged("z", DType::F64, Ragged::Offsets)
        .build()
        .unwrap();
    let open = || open_npy(&p).unwrap();
    fast_equals_generic(&open, &schema, 2, 1 << 20);
    let mut chunk = Chunk::new(&schema);
    assert_eq!(open().read_chunk(&mut chunk, 10, 1 << 20).unwrap(), 3);
}

#[test]
fn u8_values_beyond_i64_are_errors_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::U8, &[3, 2], |i| if i == 3 { u64::MAX } else { i as u64 });
    let p = write(dir.path(), "big.npy", &a.file(1, false, false));
    let mut r = open_npy(&p).unwrap();
    assert!(r.next_record().unwrap().is_some());
    let msg = err_string(r.next_record());
    assert_contains(
        &msg,
        &[
            "big.npy",
            "record 1",
            "offset 144",
            "field `big`",
            "18446744073709551615",
        ],
    );
    assert!(r.can_continue());
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.location.record, 2);
    // The chunk path reports the same error after the same good rows.
    let schema = Schema::builder()
        .field("big", DType::I64, [2])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&schema);
    let mut r = open_npy(&p).unwrap();
    let msg2 = err_string(r.read_chunk(&mut chunk, 10, 1 << 20));
    assert_eq!(msg, msg2);
    assert_eq!(chunk.len(), 1);
    let open = || open_npy(&p).unwrap();
    fast_equals_generic(&open, &schema, 10, 1 << 20);
}

// ---------------------------------------------------------------------------
// Unsupported dtypes and hostile headers
// ---------------------------------------------------------------------------

#[test]
fn unsupported_dtypes_are_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    for (descr, why) in [
        ("<c8", "complex"),
        ("|O", "object"),
        ("<U3", "string"),
        ("|S5", "string"),
        ("|V8", "structured"),
        ("<M8[ns]", "datetime"),
        ("<f16", "supported"),
    ] {
        let p = write(
            dir.path(),
            "u.npy",
            &npy_file(1, descr, false, &[1], &[0; 64]),
        );
        let e = open_npy(&p).err().expect("an error");
        assert!(matches!(e, Error::BadFile { .. }), "{descr}: {e}");
        assert_contains(&e.to_string(), &["u.npy", descr, why]);
    }
    let bytes = npy_raw_header(
        1,
        "{'descr': [('a', '<i4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,), }",
        &[0; 8],
    );
    let p = write(dir.path(), "s.npy", &bytes);
    assert_contains(&err_string(open_npy(&p)), &["s.npy", "structured"]);
}

#[test]
fn hostile_headers_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("empty", vec![], vec!["empty file"]),
        (
            "short",
            b"\x93NU".to_vec(),
            vec!["not an NPY file", "offset 0"],
        ),
        (
            "magic",
            b"PK\x03\x04 not numpy at all".to_vec(),
            vec!["not an NPY file", "offset 0"],
        ),
        (
            "version",
            b"\x93NUMPY\x09\x00\x10\x00{}".to_vec(),
            vec!["offset 6", "version 9.0"],
        ),
        (
            "hlen",
            b"\x93NUMPY\x01\x00\xff\xff{'descr': '<f4'}".to_vec(),
            vec!["offset 8", "header length 65535"],
        ),
        (
            "hlen2",
            b"\x93NUMPY\x02\x00\xff\xff\xff\xff{".to_vec(),
            vec!["offset 8", "header length 4294967295"],
        ),
        (
            "truncated",
            npy_file(1, "<f4", false, &[10, 4], &[0; 100]),
            vec!["offset 128", "needs 160 bytes", "has 100"],
        ),
        (
            "huge",
            npy_file(1, "<f8", false, &[1 << 40, 1 << 20], &[0; 16]),
            vec!["needs 9223372036854775808 bytes"],
        ),
        (
            "overflow",
            npy_file(1, "<f8", false, &[4, 1 << 40, 1 << 40], &[0; 16]),
            vec!["overflows"],
        ),
        (
            "overflow2",
            npy_file(1, "<f8", false, &[1 << 62, 4], &[0; 16]),
            vec!["overflows"],
        ),
        (
            "garbled",
            npy_raw_header(1, "{'descr': '<f4', \u{ff}\u{fe} 'shape': (1,)}", &[0; 4]),
            vec!["header at offset 27", "byte 0xc3"],
        ),
        (
            "unterminated",
            npy_raw_header(1, "{'descr': '<f4", &[]),
            vec!["header at offset", "unterminated string"],
        ),
        (
            "nodict",
            npy_raw_header(1, "['descr', '<f4']", &[]),
            vec!["expected a dict"],
        ),
        (
            "noshape",
            npy_raw_header(1, "{'descr': '<f4', 'fortran_order': False}", &[]),
            vec!["no `shape` key"],
        ),
        (
            "negative",
            npy_file(1, "<f4", false, &[], &[]),
            vec!["0-dimensional"],
        ),
        (
            "negdim",
            npy_raw_header(
                1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 2)}",
                &[],
            ),
            vec!["not a non-negative integer"],
        ),
        (
            "bigint",
            npy_raw_header(
                1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
                &[],
            ),
            vec!["integer too large"],
        ),
        (
            "fortran",
            npy_raw_header(
                1,
                "{'descr': '<f4', 'fortran_order': 1, 'shape': (1,)}",
                &[0; 4],
            ),
            vec!["fortran_order"],
        ),
        (
            "deep",
            npy_raw_header(1, &format!("{}{}", "(".repeat(200), ")".repeat(200)), &[]),
            vec!["nested too deeply"],
        ),
        (
            "zerorows",
            npy_file(1, "<f4", false, &[1 << 40, 0], &[]),
            vec!["implausible"],
        ),
    ];
    for (name, bytes, parts) in cases {
        let p = write(dir.path(), &format!("{name}.npy"), &bytes);
        let e = open_npy(&p)
            .err()
            .unwrap_or_else(|| panic!("{name}: no error"));
        assert!(matches!(e, Error::BadFile { .. }), "{name}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("{name}.npy")), "{name}: {msg}");
        for part in parts {
            assert!(msg.contains(part), "{name}: `{msg}` lacks `{part}`");
        }
    }
}

#[test]
fn rows_larger_than_max_record_bytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::F8, &[2, 64], |i| i as u64);
    let p = write(dir.path(), "m.npy", &a.file(1, false, false));
    let o = OpenOptions {
        max_record_bytes: 100,
        ..opts()
    };
    let msg = err_string(NpyFormat.open(&p, &o));
    assert_contains(&msg, &["m.npy", "512 bytes", "max_record_bytes (100)"]);
}

// ---------------------------------------------------------------------------
// start_record
// ---------------------------------------------------------------------------

#[test]
fn start_record_for_npy_npy_gz_and_npz() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::I4, &[6, 2], |i| i as u64);
    let f = a.file(1, false, false);
    let ff = a.file(1, true, true);
    let paths = vec![
        write(dir.path(), "a.npy", &f),
        write(dir.path(), "a.npy.gz", &gzip(&f)),
        write(dir.path(), "a_f.npy.gz", &gzip(&ff)),
        write(
            dir.path(),
            "s.npz",
            &npz_file(&[("a.npy", f.clone())], false),
        ),
        write(
            dir.path(),
            "d.npz",
            &npz_file(&[("a.npy", f.clone())], true),
        ),
        write(
            dir.path(),
            "df.npz",
            &npz_file(&[("a.npy", ff.clone())], true),
        ),
    ];
    let reg = Registry::with_builtin();
    for p in &paths {
        for start in [0u64, 1, 4, 6, 9] {
            let o = OpenOptions {
                start_record: start,
                ..opts()
            };
            let mut r = reg.open(p.to_str().unwrap(), None, &o).unwrap();
            assert_eq!(r.len_hint(), Some(6));
            assert_eq!(r.next_index(), start.min(6));
            let recs = all_records(&mut *r);
            assert_eq!(recs.len() as u64, 6 - start.min(6), "{p:?} {start}");
            for (j, rec) in recs.iter().enumerate() {
                let i = start as usize + j;
                assert_eq!(rec.location.record, i as u64);
                let t = rec.fields[0].1.clone();
                assert_eq!(t.values, a.row_values(i), "{p:?} start {start} row {i}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// NPZ
// ---------------------------------------------------------------------------

#[test]
fn npz_stored_and_deflated_with_mixed_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let x = arr(K::F4, &[5, 3], |i| (i as f32 * 0.5).to_bits() as u64);
    let y = arr(K::I8, &[5], |i| i as u64 * 7);
    let m = arr(K::B1, &[5, 2, 2], |i| (i % 2) as u64);
    for deflated in [false, true] {
        let bytes = npz_file(
            &[
                ("x.npy", x.file(1, false, false)),
                ("sub/y.npy", y.file(1, true, false)),
                ("m.npy", m.file(1, false, true)),
            ],
            deflated,
        );
        let p = write(dir.path(), "a.npz", &bytes);
        let mut r = NpzFormat.open(&p, &opts()).unwrap();
        let recs = all_records(&mut *r);
        assert_eq!(recs.len(), 5);
        for (i, rec) in recs.iter().enumerate() {
            let names: Vec<&str> = rec.fields.iter().map(|f| f.0.as_str()).collect();
            assert_eq!(names, ["x", "sub/y", "m"]);
            assert_eq!(rec.get("x").unwrap().values, x.row_values(i));
            assert_eq!(rec.get("sub/y").unwrap().values, y.row_values(i));
            assert_eq!(rec.get("m").unwrap().values, m.row_values(i));
            assert_eq!(rec.get("m").unwrap().shape, vec![2, 2]);
        }
        let schema = Schema::builder()
            .field("x", DType::F64, [3])
            .field("sub/y", DType::I64, [])
            .field("m", DType::Bool, [2, 2])
            .build()
            .unwrap();
        let open = || NpzFormat.open(&p, &opts()).unwrap();
        for (mr, mb) in [(1, usize::MAX), (2, 30), (100, 1 << 20)] {
            fast_equals_generic(&open, &schema, mr, mb);
        }
    }
}

#[test]
fn npz_errors_name_the_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let x = arr(K::F4, &[5, 3], |i| i as u64);
    let y = arr(K::I8, &[4], |i| i as u64);
    for deflated in [false, true] {
        let p = write(
            dir.path(),
            "rows.npz",
            &npz_file(
                &[
                    ("x.npy", x.file(1, false, false)),
                    ("y.npy", y.file(1, false, false)),
                ],
                deflated,
            ),
        );
        let msg = err_string(NpzFormat.open(&p, &opts()));
        assert_contains(
            &msg,
            &[
                "rows.npz",
                "different numbers of rows",
                "`x` has 5",
                "`y` has 4",
            ],
        );
    }
    let p = write(
        dir.path(),
        "none.npz",
        &npz_file(&[("readme.txt", b"hi".to_vec())], false),
    );
    assert_contains(
        &err_string(NpzFormat.open(&p, &opts())),
        &["none.npz", "no .npy arrays"],
    );
    let p = write(
        dir.path(),
        "notzip.npz",
        b"this is not a zip file at all, sorry",
    );
    assert_contains(
        &err_string(NpzFormat.open(&p, &opts())),
        &["notzip.npz", "zip"],
    );
    let p = write(
        dir.path(),
        "bad.npz",
        &npz_file(
            &[("x.npy", npy_file(1, "<c16", false, &[1], &[0; 16]))],
            true,
        ),
    );
    assert_contains(
        &err_string(NpzFormat.open(&p, &opts())),
        &["bad.npz", "entry `x.npy`", "complex"],
    );
    let p = write(
        dir.path(),
        "garbage.npz",
        &npz_file(&[("x.npy", b"garbage, not npy".to_vec())], true),
    );
    assert_contains(
        &err_string(NpzFormat.open(&p, &opts())),
        &["garbage.npz", "entry `x.npy`", "not an NPY file"],
    );
}

#[test]
fn npz_truncated_stream_fails_at_the_missing_row() {
    let dir = tempfile::tempdir().unwrap();
    // The header promises 10 rows, the data holds 5 and a half.
    let full = arr(K::F4, &[10, 4], |i| (i as f32).to_bits() as u64);
    let mut bytes = full.file(1, false, false);
    bytes.truncate(128 + 5 * 16 + 8);
    let reg = Registry::with_builtin();
    let paths = [
        write(
            dir.path(),
            "t.npz",
            &npz_file(&[("x.npy", bytes.clone())], true),
        ),
        write(dir.path(), "x.npy.gz", &gzip(&bytes)),
    ];
    for p in &paths {
        let mut r = reg.open(p.to_str().unwrap(), None, &opts()).unwrap();
        assert_eq!(r.len_hint(), Some(10));
        for i in 0..5 {
            assert_eq!(r.next_record().unwrap().unwrap().location.record, i);
        }
        let msg = err_string(r.next_record());
        assert_contains(&msg, &["record 5", "truncated"]);
        assert!(!r.can_continue());
        let schema = Schema::builder()
            .field("x", DType::F32, [4])
            .build()
            .unwrap();
        let open = || reg.open(p.to_str().unwrap(), None, &opts()).unwrap();
        fast_equals_generic(&open, &schema, 3, 1 << 20);
        let mut chunk = Chunk::new(&schema);
        let mut r = open();
        assert_contains(
            &err_string(r.read_chunk(&mut chunk, 100, 1 << 20)),
            &["record 5"],
        );
        assert_eq!(chunk.len(), 5);
    }
    // A mapped .npy with the same header is refused at open.
    let p = write(dir.path(), "t.npy", &bytes);
    assert_contains(
        &err_string(open_npy(&p)),
        &["t.npy", "offset 128", "needs 160 bytes", "has 88"],
    );
}

#[test]
fn npz_huge_claims_do_not_allocate() {
    let dir = tempfile::tempdir().unwrap();
    // 2^40 rows of 1000 f8 claimed, 16 bytes present, deflated.
    let bytes = npy_file(1, "<f8", false, &[1 << 40, 1000], &[0; 16]);
    let p = write(dir.path(), "bomb.npz", &npz_file(&[("x.npy", bytes)], true));
    let mut r = NpzFormat.open(&p, &opts()).unwrap();
    assert_eq!(r.len_hint(), Some(1 << 40));
    assert_contains(
        &err_string(r.next_record()),
        &["bomb.npz", "record 0", "truncated"],
    );
    // Fortran order would be loaded whole: refused beyond max_record_bytes.
    let bytes = npy_file(1, "<f8", true, &[1 << 30, 2], &[0; 16]);
    let p = write(
        dir.path(),
        "fbomb.npz",
        &npz_file(&[("x.npy", bytes)], true),
    );
    assert_contains(
        &err_string(NpzFormat.open(&p, &opts())),
        &["fbomb.npz", "max_record_bytes"],
    );
}

/// The error a corrupt npz entry gives: it names the file and the entry,
/// says the whole entry is bad, and names no record (no row of the entry
/// can be told good or bad).
fn assert_whole_entry_error(msg: &str, file: &str, rows: u64) {
    assert_contains(
        msg,
        &[
            file,
            "entry `x.npy`",
            "CRC-32 mismatch",
            "the whole entry is corrupt",
            &format!("none of its {rows} rows is read"),
        ],
    );
    assert!(!msg.contains("record "), "{msg}");
}

#[test]
fn a_corrupt_npz_entry_delivers_no_row_and_blames_no_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let x = arr(K::I4, &[100, 2], |i| i as u64);
    let npy = x.file(1, false, false);
    for deflated in [false, true] {
        // Flip a data byte of row 2 inside the entry (for a deflated entry,
        // in the data before it is compressed).
        let mut flipped = npy.clone();
        let row2 = npy.len() - 100 * 8 + 2 * 8;
        flipped[row2] ^= 0x40;
        let good = npz_file(&[("x.npy", npy.clone())], deflated);
        let mut bad = npz_file(&[("x.npy", flipped)], deflated);
        // The archive still declares the good entry's CRC-32.
        let cd = |b: &[u8]| b.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
        let lh = |b: &[u8]| b.windows(4).position(|w| w == b"PK\x03\x04").unwrap();
        let (gcd, bcd, glh, blh) = (cd(&good), cd(&bad), lh(&good), lh(&bad));
        let crc = good[gcd + 16..gcd + 20].to_vec();
        bad[bcd + 16..bcd + 20].copy_from_slice(&crc);
        bad[blh + 14..blh + 18].copy_from_slice(&good[glh + 14..glh + 18]);
        let p = write(dir.path(), "crc.npz", &bad);
        let mut r = NpzFormat.open(&p, &opts()).unwrap();
        // Not one row comes out: the bad value of row 2 is never delivered.
        let msg = err_string(r.next_record());
        assert_whole_entry_error(&msg, "crc.npz", 100);
        assert!(!r.can_continue());
        assert_eq!(r.next_index(), 0);
        assert_eq!(r.len_hint(), Some(100));
        assert_eq!(err_string(r.next_record()), msg, "repeated");
        let schema = Schema::builder()
            .field("x", DType::I32, [2])
            .build()
            .unwrap();
        let mut r = NpzFormat.open(&p, &opts()).unwrap();
        let mut chunk = Chunk::new(&schema);
        let e = r.read_chunk(&mut chunk, 1000, 1 << 20).unwrap_err();
        assert!(matches!(e, Error::BadFile { .. }), "{e:?}");
        assert_whole_entry_error(&e.to_string(), "crc.npz", 100);
        assert!(chunk.is_empty());
        // Resuming past row 0 checks the entry too.
        let o = OpenOptions {
            start_record: 50,
            ..opts()
        };
        let msg = err_string(NpzFormat.open(&p, &o).unwrap().next_record());
        assert_whole_entry_error(&msg, "crc.npz", 100);
        // Without verification the flipped value comes through.
        let o = OpenOptions {
            verify_checksums: false,
            ..opts()
        };
        let recs = all_records(&mut *NpzFormat.open(&p, &o).unwrap());
        assert_eq!(recs.len(), 100);
        assert_ne!(recs[2].get("x").unwrap().values, x.row_values(2));
        assert_eq!(recs[99].get("x").unwrap().values, x.row_values(99));
        // The intact archive reads whole.
        let p = write(dir.path(), "good.npz", &good);
        assert_eq!(
            all_records(&mut *NpzFormat.open(&p, &opts()).unwrap()).len(),
            100
        );
    }
}

#[test]
fn npz_declared_crc_is_checked_for_deflated_and_stored_entries() {
    let dir = tempfile::tempdir().unwrap();
    let x = arr(K::F8, &[300, 5], |i| (i as f64).to_bits());
    for deflated in [false, true] {
        let mut bytes = npz_file(&[("x.npy", x.file(1, false, false))], deflated);
        // Change the CRC-32 the central directory declares.
        let cd = bytes
            .windows(4)
            .position(|w| w == b"PK\x01\x02")
            .expect("central directory");
        bytes[cd + 16] ^= 0xff;
        let p = write(dir.path(), "dcrc.npz", &bytes);
        let mut r = NpzFormat.open(&p, &opts()).unwrap();
        let msg = err_string(r.next_record());
        assert_whole_entry_error(&msg, "dcrc.npz", 300);
        assert!(!r.can_continue());
        let schema = Schema::builder()
            .field("x", DType::F64, [5])
            .build()
            .unwrap();
        let open = || NpzFormat.open(&p, &opts()).unwrap();
        fast_equals_generic(&open, &schema, 64, 1 << 20);
        // verify_checksums = false reads every row.
        let o = OpenOptions {
            verify_checksums: false,
            ..opts()
        };
        let n = all_records(&mut *NpzFormat.open(&p, &o).unwrap()).len() as u64;
        assert_eq!(n, 300);
    }
}

// ---------------------------------------------------------------------------
// read_chunk == generic path
// ---------------------------------------------------------------------------

#[test]
fn read_chunk_matches_generic_path_under_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::I8, &[20, 3], |i| {
        if i == 40 {
            1 << 40
        } else {
            i as u64 * 3
        }
    });
    let p = write(dir.path(), "a.npy", &a.file(1, true, false));
    let open = || open_npy(&p).unwrap();
    let schemas = [
        Schema::builder()
            .field("a", DType::I64, [3])
            .build()
            .unwrap(),
        Schema::builder()
            .field("a", DType::F32, [3])
            .build()
            .unwrap(),
        // fails at row 13 (1 << 40 does not fit i32)
        Schema::builder()
            .field("a", DType::I32, [3])
            .build()
            .unwrap(),
        // u8: fails at row 13 too
        Schema::builder()
            .field("a", DType::U8, [3])
            .build()
            .unwrap(),
        Schema::builder()
            .field("a", DType::I64, [3])
            .ragged("missing", DType::F32, Ragged::Padded)
            .build()
            .unwrap(),
        Schema::builder()
            .field("a", DType::I64, [3])
            .field("missing", DType::F32, [2])
            .build()
            .unwrap(),
        Schema::builder()
            .field("a", DType::I64, [4])
            .build()
            .unwrap(),
        Schema::builder()
            .field("a", DType::Bytes, [3])
            .build()
            .unwrap(),
        Schema::new(vec![Field {
            name: "a".into(),
            dtype: DType::I64,
            shape: vec![feedline::Dim::Var],
            ragged: Ragged::Offsets,
        }])
        .unwrap(),
    ];
    for s in &schemas {
        for (mr, mb) in [(1, usize::MAX), (7, usize::MAX), (100, 50), (100, 1 << 20)] {
            fast_equals_generic(&open, s, mr, mb);
        }
    }
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Store {
    Npy,
    NpyGz,
    NpzStored,
    NpzDeflated,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn npy_round_trip(
        a in arr_strategy(),
        big in any::<bool>(),
        fortran in any::<bool>(),
        version in 1u8..4,
        store in prop::sample::select(vec![Store::Npy, Store::NpyGz, Store::NpzStored, Store::NpzDeflated]),
        start in 0u64..8,
        max_records in 1usize..5,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let f = a.file(version, big, fortran);
        let p = match store {
            Store::Npy => write(dir.path(), "a.npy", &f),
            Store::NpyGz => write(dir.path(), "a.npy.gz", &gzip(&f)),
            Store::NpzStored => write(dir.path(), "a.npz", &npz_file(&[("a.npy", f)], false)),
            Store::NpzDeflated => write(dir.path(), "a.npz", &npz_file(&[("a.npy", f)], true)),
        };
        let reg = Registry::with_builtin();
        let o = OpenOptions { start_record: start, ..opts() };
        let open = || reg.open(p.to_str().unwrap(), None, &o).unwrap();
        let mut r = open();
        prop_assert_eq!(r.len_hint(), Some(a.rows() as u64));
        let recs = all_records(&mut *r);
        let first = (start as usize).min(a.rows());
        prop_assert_eq!(recs.len(), a.rows() - first);
        for (j, rec) in recs.iter().enumerate() {
            let t = rec.get("a").unwrap();
            prop_assert_eq!(&t.shape[..], &a.shape[1..]);
            prop_assert_eq!(&t.values, &a.row_values(first + j));
        }
        let schema = Schema::builder().field("a", a.k.dtype(), a.shape[1..].to_vec()).build().unwrap();
        fast_equals_generic(&open, &schema, max_records, 64);
        let wide = if a.k.dtype() == DType::Bool { DType::I64 } else { DType::F64 };
        let schema = Schema::builder().field("a", wide, a.shape[1..].to_vec()).build().unwrap();
        fast_equals_generic(&open, &schema, max_records, usize::MAX);
    }

    #[test]
    fn npz_round_trip(
        arrays in prop::collection::vec(arr_strategy(), 1..4),
        rows in 0usize..6,
        deflated in prop::collection::vec(any::<bool>(), 3),
        big in any::<bool>(),
        fortran in any::<bool>(),
    ) {
        // Give every array the same number of rows.
        let arrays: Vec<Arr> = arrays
            .into_iter()
            .map(|mut a| {
                let per = a.row_elems();
                a.shape[0] = rows;
                a.elems = (0..rows * per).map(|i| a.elems.get(i).copied().unwrap_or(0)).collect();
                a
            })
            .collect();
        let names: Vec<String> = (0..arrays.len()).map(|i| format!("f{i}")).collect();
        let entries: Vec<(String, Vec<u8>)> = arrays
            .iter()
            .zip(&names)
            .map(|(a, n)| (format!("{n}.npy"), a.file(1, big, fortran)))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        // Mixed stored and deflated entries in one archive.
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (i, (n, b)) in entries.iter().enumerate() {
            let m = if deflated[i] { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
            z.start_file(n.as_str(), zip::write::SimpleFileOptions::default().compression_method(m)).unwrap();
            z.write_all(b).unwrap();
        }
        let p = write(dir.path(), "r.npz", &z.finish().unwrap().into_inner());
        let open = || NpzFormat.open(&p, &opts()).unwrap();
        let recs = all_records(&mut *open());
        prop_assert_eq!(recs.len(), rows);
        for (i, rec) in recs.iter().enumerate() {
            for (a, n) in arrays.iter().zip(&names) {
                prop_assert_eq!(&rec.get(n).unwrap().values, &a.row_values(i));
            }
        }
        let mut b = Schema::builder();
        for (a, n) in arrays.iter().zip(&names) {
            b = b.field(n, a.k.dtype(), a.shape[1..].to_vec());
        }
        let schema = b.build().unwrap();
        fast_equals_generic(&open, &schema, 2, usize::MAX);
        fast_equals_generic(&open, &schema, 100, 40);
    }
}

#[test]
fn compression_option_overrides_the_extension() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr(K::U2, &[3], |i| 60000 + i as u64);
    let p = write(dir.path(), "c.npy", &gzip(&a.file(1, true, false)));
    let o = OpenOptions {
        compression: Some(Compression::Gzip),
        ..opts()
    };
    let recs = all_records(&mut *NpyFormat.open(&p, &o).unwrap());
    assert_eq!(recs[2].to_json(), serde_json::json!({"c": [60002]}));
}

// ---------------------------------------------------------------------------
// Declared shapes
// ---------------------------------------------------------------------------

/// The error of reading `path` with a field `x` of `dims` (fixed) u8, by
/// the fast path and by the generic one (they must agree).
fn shape_error(path: &Path, field: Field) -> Option<String> {
    let schema = Schema::new(vec![field]).unwrap();
    let open = || NpyFormat.open(path, &opts()).unwrap();
    fast_equals_generic(&open, &schema, 10, 1 << 20);
    let mut r = open();
    let mut c = Chunk::new(&schema);
    r.read_chunk(&mut c, 10, 1 << 20).err().map(|e| {
        assert!(matches!(e, Error::Field { .. }), "{e:?}");
        e.to_string()
    })
}

fn u8_field(shape: Vec<feedline::Dim>) -> Field {
    Field {
        name: "x".into(),
        dtype: DType::U8,
        shape,
        ragged: Ragged::Offsets,
    }
}

#[test]
fn a_declared_shape_must_be_the_file_s_own_not_just_its_element_count() {
    use feedline::Dim::{Fixed as F, Var};
    let dir = tempfile::tempdir().unwrap();
    // `x.npy` (its field is `x`) in a folder of its own.
    let x_npy = |folder: &str, shape: &[usize], fortran: bool| {
        let d = dir.path().join(folder);
        std::fs::create_dir(&d).unwrap();
        let bytes = arr(K::U1, shape, |i| i as u64).file(1, false, fortran);
        write(&d, "x.npy", &bytes)
    };
    // Rows of shape [3, 4, 4] (channels first).
    let chw = x_npy("chw", &[2, 3, 4, 4], false);
    let msg = shape_error(&chw, u8_field(vec![F(4), F(4), F(3)])).expect("an error");
    assert_contains(
        &msg,
        &[
            "x.npy",
            "record 0",
            "field `x`",
            "expected [4, 4, 3] u8",
            "shape [3, 4, 4] u8",
        ],
    );
    // Flattened: another rank is another shape too.
    let msg = shape_error(&chw, u8_field(vec![F(48)])).expect("an error");
    assert_contains(&msg, &["expected [48] u8", "shape [3, 4, 4] u8"]);
    // The file's shape, or a ragged leading dimension, reads.
    assert_eq!(shape_error(&chw, u8_field(vec![F(3), F(4), F(4)])), None);
    assert_eq!(shape_error(&chw, u8_field(vec![Var, F(4), F(4)])), None);
    let msg = shape_error(&chw, u8_field(vec![Var, F(4), F(3)])).expect("an error");
    assert_contains(&msg, &["expected [?, 4, 3] u8", "shape [3, 4, 4] u8"]);
    // A 1-D row is a flat list: any shape of its element count takes it.
    let flat = x_npy("flat", &[2, 48], false);
    assert_eq!(shape_error(&flat, u8_field(vec![F(4), F(4), F(3)])), None);
    // Fortran order and npz entries are checked the same way.
    let fortran = x_npy("fortran", &[2, 3, 4, 4], true);
    let msg = shape_error(&fortran, u8_field(vec![F(4), F(4), F(3)])).expect("an error");
    assert_contains(
        &msg,
        &[
            "fortran/x.npy",
            "expected [4, 4, 3] u8",
            "shape [3, 4, 4] u8",
        ],
    );
    let npz = write(
        dir.path(),
        "z.npz",
        &npz_file(
            &[(
                "x.npy",
                arr(K::U1, &[2, 3, 4, 4], |i| i as u64).file(1, false, false),
            )],
            false,
        ),
    );
    let schema = Schema::new(vec![u8_field(vec![F(4), F(4), F(3)])]).unwrap();
    let mut r = NpzFormat.open(&npz, &opts()).unwrap();
    let e = r
        .read_chunk(&mut Chunk::new(&schema), 10, 1 << 20)
        .unwrap_err()
        .to_string();
    assert_contains(
        &e,
        &[
            "z.npz",
            "field `x`",
            "expected [4, 4, 3] u8",
            "shape [3, 4, 4] u8",
        ],
    );
}
