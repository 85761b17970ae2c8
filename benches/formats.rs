//! Format benchmarks: TFRecord framing (+ CRC-32C), the generic
//! `tf.train.Example` decoder (prost → `Record`) and the schema-driven fast
//! decoder (straight into a `Chunk`), on in-memory files of the `small` and
//! `large` presets of `feedline gen`.
//!
//! Every benchmark is reported twice: in records/s (`…/records/…`) and in
//! bytes/s of file (`…/bytes/…`).
//!
//! `read+collate` goes on to batches of 32 (chunks as a reader sends them,
//! collated in order): from a memory-mapped file, where large `bytes` / `u8`
//! rows refer to the map and are copied once (map → batch), and from memory,
//! where every row is copied into its chunk first.
//!
//! Run: `cargo bench -p feedline --bench formats` (add a filter such as
//! `small/records` to run a part).

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use feedline::format::example::{decode_record, ExampleDecoder};
use feedline::format::tfrecord::TfRecordReader;
use feedline::format::{OpenOptions, RecordReader};
use feedline::synthetic::{self, Preset};
use feedline::{collate_chunks, Chunk, Location, Schema, SourceId};

/// One preset's file in memory and on disk, and its payloads extracted.
struct Data {
    preset: Preset,
    file: Arc<[u8]>,
    payloads: Vec<Vec<u8>>,
    schema: Schema,
    /// The file on disk (it is memory-mapped there).
    path: tempfile::TempPath,
}

impl Data {
    fn new(preset: Preset, records: usize) -> Self {
        let file: Arc<[u8]> = synthetic::file_bytes(preset, 0, 0, records).into();
        let mut r = reader(&file, true);
        let mut payloads = Vec::new();
        while let Some(p) = r.next_payload().unwrap() {
            payloads.push(p.to_vec());
        }
        let mut tmp = tempfile::Builder::new()
            .suffix(".tfrecord")
            .tempfile()
            .unwrap();
        std::io::Write::write_all(&mut tmp, &file).unwrap();
        Data {
            preset,
            file,
            payloads,
            schema: synthetic::preset_schema(preset),
            path: tmp.into_temp_path(),
        }
    }

    /// Rows a chunk holds before it is full.
    fn chunk_rows(&self) -> usize {
        let per_row = self.file.len() / self.payloads.len();
        CHUNK_ROWS.min(CHUNK_BYTES / per_row + 1)
    }

    fn records(&self) -> u64 {
        self.payloads.len() as u64
    }
}

fn reader(file: &Arc<[u8]>, verify: bool) -> TfRecordReader {
    let opts = OpenOptions {
        verify_checksums: verify,
        ..OpenOptions::default()
    };
    TfRecordReader::from_bytes(file.clone(), SourceId::intern("bench"), &opts)
}

/// Chunks on the fast path: up to 1024 rows or 1 MiB of payload, as a
/// PrefetchReader sends them; the chunk is cleared and reused.
const CHUNK_ROWS: usize = 1024;
const CHUNK_BYTES: usize = 1 << 20;
/// Rows per batch in `read+collate` (at least; whole chunks are collated).
const BATCH: usize = 32;

fn bench_preset(c: &mut Criterion, d: &Data) {
    for (unit, throughput) in [
        ("records", Throughput::Elements(d.records())),
        ("bytes", Throughput::BytesDecimal(d.file.len() as u64)),
    ] {
        let mut g = c.benchmark_group(format!("{}/{unit}", d.preset));
        g.throughput(throughput);
        g.sample_size(10);
        g.warm_up_time(std::time::Duration::from_millis(500));
        g.measurement_time(std::time::Duration::from_secs(2));

        for (name, verify) in [("framing", false), ("framing+crc", true)] {
            g.bench_function(name, |b| {
                b.iter(|| {
                    let mut r = reader(&d.file, verify);
                    let mut n = 0usize;
                    while let Some(p) = r.next_payload().unwrap() {
                        n += black_box(p).len();
                    }
                    n
                })
            });
        }

        g.bench_function("generic: framing+crc+prost→Record", |b| {
            b.iter(|| {
                let mut r = reader(&d.file, true);
                let mut n = 0usize;
                while let Some(rec) = r.next_record().unwrap() {
                    n += black_box(&rec).fields.len();
                }
                n
            })
        });

        for (name, verify) in [
            ("fast: framing+crc+schema decode→Chunk", true),
            ("fast: framing+schema decode→Chunk (no CRC)", false),
        ] {
            g.bench_function(name, |b| {
                let mut chunk = Chunk::with_capacity(&d.schema, d.chunk_rows());
                b.iter(|| {
                    let mut r = reader(&d.file, verify);
                    let mut n = 0usize;
                    loop {
                        chunk.clear();
                        let k = r.read_chunk(&mut chunk, CHUNK_ROWS, CHUNK_BYTES).unwrap();
                        if k == 0 {
                            break;
                        }
                        n += black_box(&chunk).len();
                    }
                    n
                })
            });
        }

        for (name, mapped) in [
            ("read+collate: mapped file (one copy)", true),
            ("read+collate: in memory (two copies)", false),
        ] {
            g.bench_function(name, |b| {
                b.iter(|| {
                    let mut r: Box<dyn RecordReader> = if mapped {
                        Box::new(TfRecordReader::open(&d.path, &OpenOptions::default()).unwrap())
                    } else {
                        Box::new(reader(&d.file, true))
                    };
                    let (mut held, mut rows, mut n) = (Vec::new(), 0, 0);
                    loop {
                        let mut chunk = Chunk::with_budget(&d.schema, CHUNK_ROWS, CHUNK_BYTES);
                        let k = r.read_chunk(&mut chunk, CHUNK_ROWS, CHUNK_BYTES).unwrap();
                        if k > 0 {
                            rows += k;
                            held.push(chunk);
                        }
                        if rows >= BATCH || (k == 0 && rows > 0) {
                            n += black_box(collate_chunks(&d.schema, &held).unwrap()).len();
                            held.clear();
                            rows = 0;
                        }
                        if k == 0 {
                            break;
                        }
                    }
                    n
                })
            });
        }

        // Decoding alone, payloads already framed out.
        g.bench_function("decode only: prost→Record", |b| {
            let loc = Location::new(SourceId::intern("bench"), 0, None);
            b.iter(|| {
                let mut n = 0usize;
                for p in &d.payloads {
                    n += decode_record(p, loc.clone()).unwrap().fields.len();
                }
                n
            })
        });
        g.bench_function("decode only: schema→Chunk", |b| {
            let loc = Location::new(SourceId::intern("bench"), 0, None);
            let mut dec = ExampleDecoder::new(&d.schema);
            let mut chunk = Chunk::with_capacity(&d.schema, d.chunk_rows());
            b.iter(|| {
                for p in &d.payloads {
                    if chunk.len() == CHUNK_ROWS || chunk.payload_bytes() >= CHUNK_BYTES {
                        chunk.clear();
                    }
                    dec.decode_into(p, &mut chunk, &loc).unwrap();
                }
                chunk.len()
            });
            assert_eq!(dec.fallbacks(), 0);
        });
        g.finish();
    }
}

fn formats(c: &mut Criterion) {
    // About 10 MB of file each: 32,768 small records, 64 large ones.
    let small = Data::new(Preset::Small, 32_768);
    let large = Data::new(Preset::Large, 64);
    for d in [&small, &large] {
        eprintln!(
            "{}: {} records, {} bytes of file, {:.1} bytes/record",
            d.preset,
            d.records(),
            d.file.len(),
            d.file.len() as f64 / d.records() as f64
        );
        bench_preset(c, d);
    }
}

criterion_group!(benches, formats);
criterion_main!(benches);
