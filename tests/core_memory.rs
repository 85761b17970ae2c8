//! What chunks and the shuffle pool say they hold is what they hold.
//!
//! A counting global allocator keeps, per thread, the bytes allocated and
//! not yet freed; each test does its work on one thread, so the difference
//! of that count is exactly the heap its objects hold. Then:
//!
//! - [`Chunk::memory_bytes`] is exactly the heap a chunk holds — the
//!   capacity of its vectors, not their length — for fixed and ragged
//!   fields, byte strings, and rows left in their file with a deferred CRC;
//! - a shuffle pool fed the chunks of many one-record files (each made for
//!   1,024 rows, as the pipeline's readers make them) holds no more heap
//!   than its [`ShuffleBuffer::memory_bytes`], which stays within its byte
//!   bound (plus one chunk), and it holds every file's record in a few
//!   hundred bytes each, not a chunk's worth;
//! - a record's JSON (`feedline cat`) is written as it is made: writing a
//!   record of a million elements holds a few KB of heap, not a JSON tree
//!   of 32 bytes per element nor the whole text.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;

use feedline::format::{OpenOptions, Registry};
use feedline::plan::PassPlan;
use feedline::reader::{files, Reader};
use feedline::shuffle::{ShuffleBuffer, ShuffleConfig};
use feedline::synthetic::{self, GenOptions, Preset};
use feedline::{
    BytesList, Chunk, DType, Location, Ragged, Record, Schema, SourceId, Tensor, Values,
};

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| {
        l.set(l.get() + delta);
        let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
    });
}

/// The most heap `f` held above what was held before it.
fn peak_of(f: impl FnOnce()) -> isize {
    let base = live();
    PEAK.with(|p| p.set(base));
    f();
    PEAK.with(Cell::get) - base
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Heap bytes this thread holds.
fn live() -> isize {
    LIVE.with(Cell::get)
}

/// `n` files of `records` records of `preset` in `dir`, their source names
/// interned already (so that reading them allocates no new name).
fn preset_files(dir: &std::path::Path, preset: Preset, n: usize, records: usize) -> Vec<PathBuf> {
    let mut o = GenOptions::new(preset, dir);
    o.files = Some(n);
    o.records = Some(records);
    let mut paths = synthetic::generate(&o).unwrap();
    paths.sort();
    for p in &paths {
        SourceId::intern(&p.to_string_lossy());
    }
    paths
}

/// Read the first chunk of `path` the way the pipeline's readers do:
/// a chunk made for `max_rows` rows, filled once.
fn first_chunk(
    path: &std::path::Path,
    schema: &Schema,
    max_rows: usize,
    opts: &OpenOptions,
) -> Chunk {
    let mut r = Registry::with_builtin()
        .open(path.to_str().unwrap(), None, opts)
        .unwrap();
    let mut c = Chunk::with_budget(schema, max_rows, 1 << 20);
    assert!(r.read_chunk(&mut c, max_rows, 1 << 20).unwrap() > 0);
    c
}

/// The heap a chunk made by `make` holds once `make`'s other allocations
/// are freed, and what the chunk says it holds (checked against its bound
/// for `max_rows` rows, 1 MiB and records of `record_bytes`).
fn held_and_counted(
    max_rows: usize,
    record_bytes: usize,
    make: impl FnOnce() -> Chunk,
) -> (isize, usize) {
    let before = live();
    let chunk = Arc::new(make());
    let held = live() - before;
    let bound = Chunk::memory_bound(chunk.schema(), max_rows, 1 << 20, record_bytes);
    assert!(
        chunk.memory_bytes() <= bound,
        "{} > {bound}",
        chunk.memory_bytes()
    );
    (held, chunk.memory_bytes())
}

#[test]
fn memory_bytes_is_the_heap_a_chunk_holds() {
    let dir = tempfile::tempdir().unwrap();
    // A one-record file read into a chunk made for 1,024 rows.
    let small = preset_files(&dir.path().join("s"), Preset::Small, 1, 1).remove(0);
    let schema = synthetic::preset_schema(Preset::Small);
    let o = OpenOptions::default();
    let (held, counted) = held_and_counted(1024, 264, || first_chunk(&small, &schema, 1024, &o));
    assert_eq!(held as usize, counted);
    assert!(
        counted > 1024 * 256,
        "room for 1,024 rows is counted: {counted}"
    );
    // Shrunk to its one row.
    let (held, counted) = held_and_counted(1024, 264, || {
        let mut c = first_chunk(&small, &schema, 1024, &o);
        c.shrink_to_fit();
        c
    });
    assert_eq!(held as usize, counted);
    assert!(counted < 1024, "{counted}");
    // Many rows of a full file.
    let full = preset_files(&dir.path().join("f"), Preset::Small, 1, 3000).remove(0);
    let (held, counted) = held_and_counted(1000, 264, || first_chunk(&full, &schema, 1000, &o));
    assert_eq!(held as usize, counted);
    // Large records: rows left in the file, with their CRC deferred.
    let large = preset_files(&dir.path().join("l"), Preset::Large, 1, 8).remove(0);
    let lschema = synthetic::preset_schema(Preset::Large);
    let defer = OpenOptions {
        defer_checksums: true,
        ..OpenOptions::default()
    };
    let (held, counted) = held_and_counted(64, 150_536, || {
        let c = first_chunk(&large, &lschema, 64, &defer);
        assert!(c.columns()[0].has_file_rows());
        c
    });
    assert_eq!(held as usize, counted);
    assert!(
        counted < 64 << 10,
        "the images are not in memory: {counted}"
    );
    // Ragged numbers and byte strings (JSON Lines).
    let jsonl = dir.path().join("r.jsonl");
    let mut text = String::new();
    for i in 0..500 {
        let xs: Vec<String> = (0..i % 7).map(|j| j.to_string()).collect();
        text.push_str(&format!(
            "{{\"x\": [{}], \"s\": [\"{}\", \"b\"]}}\n",
            xs.join(","),
            "a".repeat(i % 13)
        ));
    }
    std::fs::write(&jsonl, text).unwrap();
    SourceId::intern(jsonl.to_str().unwrap());
    let rschema = Schema::builder()
        .ragged("x", DType::I64, Ragged::Offsets)
        .ragged("s", DType::Bytes, Ragged::Offsets)
        .build()
        .unwrap();
    let (held, counted) = held_and_counted(1024, 64, || first_chunk(&jsonl, &rschema, 1024, &o));
    assert_eq!(held as usize, counted);
}

#[test]
fn a_pool_of_one_record_files_holds_what_it_counts_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let paths = preset_files(dir.path(), Preset::Small, 600, 1);
    let schema = synthetic::preset_schema(Preset::Small);
    let o = OpenOptions::default();
    let max_bytes = 512 << 10;
    let before = live();
    let mut pool = ShuffleBuffer::new(ShuffleConfig {
        pool_size: 100_000,
        max_bytes,
        ..ShuffleConfig::default()
    });
    let mut largest = 0;
    let mut pushed = 0;
    for p in &paths {
        if !pool.has_room() {
            break;
        }
        let chunk = Arc::new(first_chunk(p, &schema, 1024, &o));
        largest = largest.max(chunk.memory_bytes());
        pool.push_chunk(chunk);
        pushed += 1;
        let held = (live() - before) as usize;
        assert!(
            held <= pool.memory_bytes(),
            "after {pushed} files the pool holds {held} bytes and counts {}",
            pool.memory_bytes()
        );
        assert!(pool.memory_bytes() <= max_bytes + largest);
    }
    // Every file's record fits: a few hundred bytes each, not 1,024 rows' room.
    assert_eq!(
        pool.len(),
        600,
        "{} rows in {} bytes",
        pool.len(),
        pool.memory_bytes()
    );
    // Drawing every row gives all the memory back.
    pool.set_draining(true);
    let mut rows = Vec::new();
    while let Some(r) = pool.draw() {
        rows.push(r.origin());
    }
    assert_eq!(rows.len(), 600);
    assert_eq!(pool.held_bytes(), 0);
    drop(rows);
    drop(pool);
    assert_eq!(live() - before, 0);
}

/// The pool's byte bound binds (issue 28, item 18): with room for far more
/// rows than bytes, chunks of files much larger than the bound are taken
/// only until the pool's memory reaches the bound, and the heap it holds
/// stays within the bound and one chunk. Mutation killed: the byte bound
/// removed from `ShuffleBuffer::has_room` (the pool then takes every
/// chunk, several times the bound).
#[test]
fn a_pool_stops_taking_chunks_at_its_byte_bound() {
    let dir = tempfile::tempdir().unwrap();
    let paths = preset_files(dir.path(), Preset::Small, 12, 1024);
    let schema = synthetic::preset_schema(Preset::Small);
    let o = OpenOptions::default();
    let chunks: Vec<Arc<Chunk>> = (paths.iter())
        .map(|p| Arc::new(first_chunk(p, &schema, 1024, &o)))
        .collect();
    let largest = chunks.iter().map(|c| c.memory_bytes()).max().unwrap();
    let all: usize = chunks.iter().map(|c| c.memory_bytes()).sum();
    let max_bytes = 3 * largest;
    assert!(
        all > 3 * max_bytes,
        "{all} bytes of chunks, bound {max_bytes}"
    );
    let before = live();
    let mut pool = ShuffleBuffer::new(ShuffleConfig {
        pool_size: 1_000_000,
        max_bytes,
        ..ShuffleConfig::default()
    });
    let mut taken = 0;
    for c in &chunks {
        if !pool.has_room() {
            break;
        }
        pool.push_chunk(c.clone());
        taken += 1;
    }
    assert!(
        !pool.has_room(),
        "every chunk taken: {} bytes",
        pool.memory_bytes()
    );
    assert!(taken < chunks.len(), "{taken} of {} chunks", chunks.len());
    assert!(
        pool.memory_bytes() <= max_bytes + largest,
        "the pool counts {} bytes, bound {max_bytes} + one chunk {largest}",
        pool.memory_bytes()
    );
    let held = (live() - before) as usize;
    assert!(
        held <= max_bytes + largest,
        "the pool's own heap: {held} bytes"
    );
}

#[test]
fn the_single_thread_reader_sizes_a_small_file_s_chunk_by_what_it_can_hold() {
    let dir = tempfile::tempdir().unwrap();
    let paths = preset_files(dir.path(), Preset::Small, 3, 1);
    let schema = synthetic::preset_schema(Preset::Small);
    let plan = PassPlan::new(
        paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
    );
    let r = files(
        Registry::with_builtin(),
        plan,
        schema,
        OpenOptions::default(),
    )
    .chunk_size(1024, 1 << 20)
    .unwrap()
    .chunks();
    let chunks: Vec<Chunk> = r.read().map(|c| c.unwrap()).collect();
    assert_eq!(chunks.len(), 3);
    for c in &chunks {
        assert_eq!(c.len(), 1);
        // A one-record file (about 300 bytes) holds at most 19 frames.
        assert!(c.capacity() <= 19, "{}", c.capacity());
        assert!(c.memory_bytes() < 8 << 10, "{}", c.memory_bytes());
    }
}

#[test]
fn a_records_json_is_written_as_it_is_made() {
    // What `feedline cat --transform decode` prints for a decoded 1000 x
    // 1000 image: a million u8 values, beside every other kind of value.
    let pixels: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let record = Record {
        fields: vec![
            (
                "image".into(),
                Tensor {
                    values: Values::U8(pixels),
                    shape: vec![1000, 1000, 3],
                },
            ),
            (
                "f".into(),
                Tensor::vector(Values::F32(vec![
                    0.1,
                    f32::NAN,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    -0.0,
                ])),
            ),
            (
                "d".into(),
                Tensor::vector(Values::F64(vec![1e300, 0.5, f64::NAN])),
            ),
            (
                "i".into(),
                Tensor::vector(Values::I64(vec![i64::MIN, -1, 7])),
            ),
            ("j".into(), Tensor::vector(Values::I32(vec![i32::MAX, 0]))),
            ("ok".into(), Tensor::vector(Values::Bool(vec![true, false]))),
            (
                "b".into(),
                Tensor::vector(Values::Bytes(BytesList::from_iter([
                    &b"\x00\xffab"[..],
                    &b""[..],
                ]))),
            ),
        ],
        location: Location::new(SourceId::intern("json.test"), 0, None),
    };
    // The text is to_json's, to the byte.
    let mut text = Vec::new();
    record.write_json(&mut text).unwrap();
    assert_eq!(text, serde_json::to_vec(&record.to_json()).unwrap());
    // Written to a sink that keeps nothing, it holds a few KB. Mutation
    // (tried): write_json as `out.write_all(&serde_json::to_vec(&self.to_json())?)`
    // holds 100 MB here.
    struct Sink(usize);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut sink = Sink(0);
    let held = peak_of(|| record.write_json(&mut sink).unwrap());
    assert_eq!(sink.0, text.len());
    assert!(held < 16 << 10, "writing the JSON held {held} bytes");
}
