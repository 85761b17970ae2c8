//! Every built-in format keeps the `RecordReader::read_chunk` contract:
//! only `0` ends a file — a call with a chunk that already holds its byte
//! budget still reads a record, so a caller that reuses a chunk never takes
//! the middle of a file for its end — and a budget of 0 records or 0 bytes
//! is an error, never an empty file.

use std::io::Write;
use std::path::{Path, PathBuf};

use feedline::format::generator::{GeneratorFormat, GeneratorSource, Sample};
use feedline::format::{OpenOptions, Registry};
use feedline::synthetic::{self, GenOptions, Preset};
use feedline::{Chunk, DType, Error, Schema, Values};

const N: usize = 23;

/// (spec, schema) of a file of `N` records in each built-in format.
fn every_format(dir: &Path) -> (Registry, Vec<(String, Schema)>) {
    let mut o = GenOptions::new(Preset::Small, dir);
    o.files = Some(1);
    o.records = Some(N);
    let tfrecord = synthetic::generate(&o).unwrap().remove(0);
    let x = Schema::builder()
        .field("x", DType::I64, [2])
        .build()
        .unwrap();
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let header = format!("{{'descr': '<i8', 'fortran_order': False, 'shape': ({N}, 2), }}");
    let header = format!("{header:<117}\n");
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    for v in 0..2 * N as i64 {
        npy.extend_from_slice(&v.to_le_bytes());
    }
    let write = |name: &str, bytes: &[u8]| -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let npy_path = write("x.npy", &npy);
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    z.start_file("x.npy", zip::write::SimpleFileOptions::default())
        .unwrap();
    z.write_all(&npy).unwrap();
    let npz = write("x.npz", &z.finish().unwrap().into_inner());
    let lines: String = (0..N).map(|i| format!("{{\"x\": [{i}, {i}]}}\n")).collect();
    let jsonl = write("x.jsonl", lines.as_bytes());
    let y = Schema::builder()
        .field("a", DType::I64, [])
        .field("b", DType::F64, [])
        .build()
        .unwrap();
    let csv: String = std::iter::once("a,b\n".to_string())
        .chain((0..N).map(|i| format!("{i},{i}.5\n")))
        .collect();
    let csv = write("x.csv", csv.as_bytes());
    let tsv = write(
        "x.tsv",
        csv_to_tsv(&std::fs::read_to_string(&csv).unwrap()).as_bytes(),
    );
    let wds = dir.join("x.tar");
    {
        let mut b = tar::Builder::new(std::fs::File::create(&wds).unwrap());
        for i in 0..N {
            let text = i.to_string();
            let mut h = tar::Header::new_ustar();
            h.set_size(text.len() as u64);
            h.set_cksum();
            b.append_data(&mut h, format!("k{i:03}.cls"), text.as_bytes())
                .unwrap();
        }
        b.finish().unwrap();
    }
    let cls = Schema::builder()
        .field("cls", DType::I64, [])
        .build()
        .unwrap();
    let mut reg = Registry::with_builtin();
    let mut gens = GeneratorFormat::new();
    gens.add(GeneratorSource::new("x", || {
        (0..N as i64).map(|i| Sample::new().with("x", Values::I64(vec![i, i]), [2]))
    }))
    .unwrap();
    gens.register(&mut reg);
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let files = vec![
        (s(&tfrecord), synthetic::preset_schema(Preset::Small)),
        (s(&npy_path), x.clone()),
        (s(&npz), x.clone()),
        (s(&jsonl), x.clone()),
        (s(&csv), y.clone()),
        (s(&tsv), y),
        (s(&wds), cls),
        ("gen:x".to_string(), x.clone()),
    ];
    #[cfg(feature = "parquet")]
    let files = [files, vec![(write_parquet(dir), x)]].concat();
    (reg, files)
}

/// `x.parquet` in `dir`: `x` = [i, i] for i in 0..N, in row groups of 5.
#[cfg(feature = "parquet")]
fn write_parquet(dir: &Path) -> String {
    let parquet = dir.join("x.parquet");
    use arrow_array::builder::{FixedSizeListBuilder, Int64Builder};
    let mut xs = FixedSizeListBuilder::new(Int64Builder::new(), 2);
    for i in 0..N as i64 {
        xs.values().append_slice(&[i, i]);
        xs.append(true);
    }
    let xs: arrow_array::ArrayRef = std::sync::Arc::new(xs.finish());
    let batch = arrow_array::RecordBatch::try_from_iter([("x", xs)]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(5))
        .build();
    let file = std::fs::File::create(&parquet).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    parquet.to_str().unwrap().to_string()
}

fn csv_to_tsv(s: &str) -> String {
    s.replace(',', "\t")
}

#[test]
fn only_zero_ends_a_file_even_when_the_chunk_is_already_full() {
    let dir = tempfile::tempdir().unwrap();
    let (reg, files) = every_format(dir.path());
    for (spec, schema) in &files {
        let mut r = reg.open(spec, None, &OpenOptions::default()).unwrap();
        // One chunk for all calls, with a budget of 1 byte: from the second
        // call on it is over budget before the call.
        let mut chunk = Chunk::new(schema);
        let mut calls = 0;
        loop {
            let n = r.read_chunk(&mut chunk, 100, 1).unwrap();
            if n == 0 {
                break;
            }
            assert_eq!(n, 1, "{spec}: one record per call past the budget");
            calls += 1;
            assert!(calls <= N, "{spec}: more records than the file has");
        }
        assert_eq!(chunk.len(), N, "{spec}");
        let records: Vec<u64> = chunk.origins().iter().map(|o| o.record).collect();
        assert_eq!(records, (0..N as u64).collect::<Vec<_>>(), "{spec}");
    }
}

#[test]
fn a_budget_of_zero_is_an_error_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let (reg, files) = every_format(dir.path());
    for (spec, schema) in &files {
        for (rows, bytes) in [(0, 1 << 20), (100, 0)] {
            let mut r = reg.open(spec, None, &OpenOptions::default()).unwrap();
            let mut chunk = Chunk::new(schema);
            let e = r.read_chunk(&mut chunk, rows, bytes).unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{spec}: {e:?}");
            assert!(
                e.to_string()
                    .contains(&format!("max_records {rows}, max_bytes {bytes}")),
                "{spec}: {e}"
            );
            // Nothing was consumed: the file reads whole afterwards.
            assert_eq!(r.next_index(), 0, "{spec}");
            let mut all = Chunk::new(schema);
            while r.read_chunk(&mut all, 7, 1 << 20).unwrap() > 0 {}
            assert_eq!(all.len(), N, "{spec}");
        }
        let o = OpenOptions {
            max_record_bytes: 0,
            ..OpenOptions::default()
        };
        let e = reg.open(spec, None, &o).err().expect("an error");
        assert!(matches!(e, Error::Config(_)), "{spec}: {e:?}");
    }
}

#[test]
fn records_lost_says_what_a_rest_of_file_error_loses() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::with_builtin();
    // An .npy.gz cut inside row 9 of 23: rows 9..23 are lost.
    let (_, files) = every_format(dir.path());
    let npy = std::fs::read(&files[1].0).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&npy[..128 + 9 * 16 + 5]).unwrap();
    std::fs::create_dir(dir.path().join("cut")).unwrap();
    let cut = dir.path().join("cut/x.npy.gz");
    std::fs::write(&cut, gz.finish().unwrap()).unwrap();
    let mut r = reg
        .open(cut.to_str().unwrap(), None, &OpenOptions::default())
        .unwrap();
    let mut c = Chunk::new(&files[1].1);
    let e = r.read_chunk(&mut c, 100, 1 << 20).unwrap_err();
    assert!(e.to_string().contains("record 9"), "{e}");
    assert!(!r.can_continue());
    assert_eq!(c.len(), 9);
    assert_eq!(r.records_lost(), Some(N as u64 - 9));
    // A TFRecord file cut inside a frame: its rest is that one record
    // (nothing follows the cut to frame; issue 28 item 9 counts it).
    let tf = std::fs::read(&files[0].0).unwrap();
    let cut = dir.path().join("cut.tfrecord");
    std::fs::write(&cut, &tf[..tf.len() / 2]).unwrap();
    let mut r = reg
        .open(cut.to_str().unwrap(), None, &OpenOptions::default())
        .unwrap();
    let mut c = Chunk::new(&files[0].1);
    assert!(r.read_chunk(&mut c, 100, 1 << 20).is_err());
    assert!(!r.can_continue());
    assert_eq!(r.records_lost(), Some(1));
}
