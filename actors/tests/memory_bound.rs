//! The in-flight memory bound holds in bytes: under a consumer far slower
//! than the readers, the heap the pipeline holds never exceeds
//! [`PipelineConfig::in_flight_bound_bytes`] for its records — with fixed and
//! ragged fields, in deterministic mode, with file sets and in round-robin
//! feeding — while the data of a pass is many times the bound.
//!
//! A counting global allocator keeps the live heap of the whole process and
//! its peak; the tests of this file run one at a time (a lock), and each
//! measures its peak above the heap live before the loader was built. The
//! pipeline's own fixed heap (actors, mailboxes, per-thread state, statistics)
//! is not payload; it is allowed as [`FIXED_OVERHEAD`], far below the data
//! of a pass, so that an unbounded stage (a pool or a queue that grows with
//! the data) fails the test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::{DType, Location, Ragged, Record, Result, Schema, SourceId, Tensor, Values};
use feedline_actors::{FileSet, Loader, LoaderBuilder};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let now = LIVE.fetch_add(grow, Relaxed) + grow;
                PEAK.fetch_max(now, Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One test at a time: the counters are the process's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Heap that is not payload: actix arbiters and mailboxes, per-thread
/// buffers, statistics and timelines, the loader's own structures.
const FIXED_OVERHEAD: usize = 2 << 20;

/// Bytes of the `pix` field of a record (ragged records: at most this).
const PIX: usize = 16 << 10;

/// Files `bigN` of `RECORDS` records: `id` (i64) and `pix` (u8, `PIX`
/// bytes, or for ragged files 1..=`PIX` bytes by the record's id).
struct BigFormat {
    ragged: bool,
}

const RECORDS: u64 = 400;

impl BigFormat {
    fn schema(ragged: bool) -> Schema {
        let b = Schema::builder().field("id", DType::I64, []);
        if ragged {
            b.ragged("pix", DType::U8, Ragged::Offsets).build().unwrap()
        } else {
            b.field("pix", DType::U8, [PIX]).build().unwrap()
        }
    }
}

impl Format for BigFormat {
    fn name(&self) -> &str {
        "big"
    }
    fn extensions(&self) -> &[&str] {
        &[]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        let name = path.to_string_lossy().to_string();
        let file: i64 = name.trim_start_matches("big").parse().expect("bigN");
        Ok(Box::new(BigReader {
            source: SourceId::intern(&format!("big:{name}")),
            base: file * 1_000_000,
            next: opts.start_record,
            ragged: self.ragged,
        }))
    }
}

struct BigReader {
    source: SourceId,
    base: i64,
    next: u64,
    ragged: bool,
}

impl RecordReader for BigReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.next >= RECORDS {
            return Ok(None);
        }
        let i = self.next;
        self.next += 1;
        let id = self.base + i as i64;
        let len = if self.ragged {
            1 + (id as usize * 7919) % PIX
        } else {
            PIX
        };
        Ok(Some(Record {
            fields: vec![
                ("id".into(), Tensor::scalar(Values::I64(vec![id]))),
                (
                    "pix".into(),
                    Tensor::vector(Values::U8(vec![id as u8; len])),
                ),
            ],
            location: Location::new(self.source, i, Some(i * PIX as u64)),
        }))
    }
    fn next_index(&self) -> u64 {
        self.next
    }
    fn len_hint(&self) -> Option<u64> {
        Some(RECORDS)
    }
}

fn registry(ragged: bool) -> Registry {
    let mut r = Registry::with_builtin();
    r.register(Arc::new(BigFormat { ragged }));
    r
}

fn specs(files: std::ops::Range<usize>) -> Vec<String> {
    files.map(|f| format!("big:big{f}")).collect()
}

/// Settings that keep the bound a few MiB, so that the pass's data
/// (`files × RECORDS × PIX`, 50 MiB for 8 files) is many times it. The
/// pool has room for more rows than a pass has, so that its byte bound is
/// what bounds it. (Issue 28, item 18: these tests still pass with that
/// bound removed from `ShuffleBuffer::has_room` — other bounds of the
/// pipeline hold the memory here; `core_memory.rs`'s
/// `a_pool_stops_taking_chunks_at_its_byte_bound` is the test that fails
/// on that mutation.)
fn tight(ragged: bool) -> LoaderBuilder {
    Loader::builder()
        .registry(registry(ragged))
        .schema(BigFormat::schema(ragged))
        .readers(2)
        .chunk_records(16)
        .chunks_in_flight(2)
        .shuffle(100_000)
        .shuffle_bytes(2 << 20)
        .reorder_window(1 << 20)
        .capacity(3)
        .batch(8)
        .seed(5)
}

/// Run `builder` to its end under a slow consumer; the peak heap above the
/// start, the bound it claims, and the ids delivered (sorted).
fn measure(builder: LoaderBuilder) -> (usize, usize, Vec<i64>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let mut loader = builder.build().expect("build");
    let record_bytes = PIX + 8 * 2 + std::mem::size_of::<feedline::Origin>() + 8;
    let bound = loader.config().in_flight_bound_bytes(record_bytes);
    let mut ids = Vec::new();
    for d in loader.iter() {
        let d = d.expect("batch");
        ids.extend(d.batch.i64("id").unwrap().iter().copied());
        // A consumer far slower than the readers: the pipeline fills up to
        // every bound it has and stays there.
        std::thread::sleep(Duration::from_micros(500));
    }
    drop(loader);
    let peak = PEAK.load(Relaxed) - base;
    ids.sort_unstable();
    (peak, bound, ids)
}

fn all_ids(files: std::ops::Range<usize>) -> Vec<i64> {
    let mut v: Vec<i64> = files
        .flat_map(|f| (0..RECORDS as i64).map(move |i| f as i64 * 1_000_000 + i))
        .collect();
    v.sort_unstable();
    v
}

fn check(what: &str, (peak, bound, ids): (usize, usize, Vec<i64>), want: Vec<i64>) {
    let data = want.len() * PIX;
    eprintln!("{what}: peak {peak} B, bound {bound} B, data {data} B");
    assert_eq!(ids, want, "{what}: every record once");
    assert!(
        bound + FIXED_OVERHEAD < data,
        "{what}: the test needs data ({data} B) beyond the bound ({bound} B)"
    );
    assert!(
        peak <= bound + FIXED_OVERHEAD,
        "{what}: peak heap {peak} B above the in-flight bound {bound} B (+ {FIXED_OVERHEAD} B fixed)"
    );
}

#[test]
fn fixed_records_stay_within_the_bound() {
    check(
        "fixed",
        measure(tight(false).files(specs(0..8))),
        all_ids(0..8),
    );
}

#[test]
fn ragged_records_stay_within_the_bound() {
    check(
        "ragged",
        measure(tight(true).files(specs(0..8))),
        all_ids(0..8),
    );
}

#[test]
fn deterministic_mode_stays_within_the_bound() {
    check(
        "deterministic",
        measure(
            tight(false)
                .files(specs(0..8))
                .deterministic(true)
                .readers(3),
        ),
        all_ids(0..8),
    );
}

#[test]
fn file_sets_stay_within_the_bound() {
    let b = tight(false)
        .file_set(FileSet::new("a", specs(0..4)).readers(2))
        .file_set(FileSet::new("b", specs(4..8)).readers(3).weight(2.0));
    check("file sets", measure(b), all_ids(0..8));
}

#[test]
fn round_robin_devices_stay_within_the_bound() {
    check(
        "round robin",
        measure(tight(false).files(specs(0..8)).devices(3).round_robin(true)),
        all_ids(0..8),
    );
}
