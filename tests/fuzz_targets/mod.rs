//! Fuzz targets for every decoder, and the invariants they check.
//!
//! This one file is shared by the libFuzzer crate in `fuzz/` (each
//! `fuzz/fuzz_targets/NAME.rs` includes it with `#[path]` and calls
//! [`run`]) and by `tests/fuzz_smoke.rs` (which replays `fuzz/corpus/` and
//! runs a seeded mutation loop on stable), so the fuzzer and the normal test
//! suite check exactly the same things. It lives under `tests/` rather than
//! in the core crate so that the library's public API does not grow a
//! testing module, and so that it can use the dev-only checks below freely.
//!
//! Every target takes arbitrary bytes and panics only when an invariant
//! breaks:
//!
//! - decoding never panics, and stops: every successful record consumes
//!   input, so no loop runs longer than the input allows;
//! - every error names the file or source it is about (its text starts with
//!   `PATH: `), is a `Corrupt`, `Field`, `Io` or `BadFile` error, and, when it
//!   has a [`Location`], that location's record is the reader's
//!   `next_index()` before the call and its byte offset lies inside the
//!   (decompressed) stream;
//! - every record is consistent (values match shapes, names unique, location
//!   = source + index);
//! - after `Ok(None)` a reader stays at the end; after an error with
//!   `can_continue() == false` every later call fails again (never a silent
//!   end: nothing lost);
//! - `read_chunk` gives exactly the rows and errors that `next_record` +
//!   `Chunk::push_record` give (for several schemas and chunk bounds);
//! - `ExampleDecoder::decode_into` agrees with `decode_record` +
//!   `push_record`, word for word on errors, and a decoded Example
//!   re-encodes to an equal record;
//! - the same stream read from memory, from a reader, and gzip/zlib
//!   compressed gives the same records (and errors);
//! - opening at `start_record = k` gives the records the full read gave from
//!   index `k` on;
//! - no allocation grows beyond the input: while a target runs, the live heap
//!   of its thread stays under [`MEM_FACTOR`] × the (decompressed) input size
//!   plus [`MEM_CONST`] (the readers' fixed buffers), when the binary installs
//!   [`CountingAlloc`] as its global allocator.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use feedline::format::example::{decode_record, encode_example, ExampleDecoder};
use feedline::format::tfrecord::TfRecordReader;
use feedline::format::{Compression, OpenOptions, RecordReader, Registry};
use feedline::{Chunk, DType, Error, Location, Ragged, Record, Schema, SourceId, Values};

/// A fuzz target: takes any bytes, panics only on a broken invariant.
pub type Target = fn(&[u8]);

/// The targets, by name (the names of `fuzz/fuzz_targets/*.rs` and of
/// `fuzz/corpus/*`).
pub const TARGETS: &[(&str, Target)] = &[
    ("tfrecord", tfrecord),
    ("tfrecord_stream", tfrecord_stream),
    ("example", example),
    ("npy", npy),
    ("npz", npz),
    ("jsonl", jsonl),
    ("csv", csv),
];

/// Run the target called `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    let (_, f) = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fuzz target `{name}`"));
    f(data)
}

/// Inputs longer than this are cut (libFuzzer runs with `-max_len` below it).
pub const MAX_INPUT: usize = 1 << 20;
/// Decompressed streams longer than this are not worth a run (too slow).
pub const MAX_DECOMPRESSED: usize = 8 << 20;
/// No target reads more records (or rows) than this from one reader.
const RECORD_LIMIT: usize = 4096;

// ---------------------------------------------------------------------------
// Bounded memory
// ---------------------------------------------------------------------------

/// Live heap bytes may grow by this many times the input's size…
pub const MEM_FACTOR: usize = 64;
/// … plus this much (the readers' fixed buffers: 1 MiB file buffer, 256 KiB
/// frame buffer, 1 MiB npy block, inflate state).
pub const MEM_CONST: usize = 4 << 20;

/// What the `zip` crate (2.6) may allocate for a central directory whatever
/// the file's size: an end record claiming 0 entries in total but 65535 on
/// "this disk" passes its checks, and it reserves room for 65535 entries of
/// 208 bytes (13.6 MB) before failing. Bounded by the 16-bit count (its
/// ZIP64 path bounds the count by the file's size), and released at once.
pub const ZIP_DIRECTORY_ALLOWANCE: usize = 14 << 20;

/// A global allocator that counts, per thread, the live heap bytes and their
/// peak (install it with `#[global_allocator]`).
pub struct CountingAlloc;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

#[inline]
fn note(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v)
            }
        });
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// bookkeeping only touches const-initialized thread-local cells (no
// allocation, no destructor).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// The live heap growth of this thread while a target runs.
struct MemScope {
    base: isize,
}

impl MemScope {
    fn new() -> Self {
        let base = LIVE.with(|l| l.get());
        PEAK.with(|p| p.set(base));
        MemScope { base }
    }

    /// Peak growth so far (0 when no counting allocator is installed).
    fn peak(&self) -> usize {
        (PEAK.with(|p| p.get()) - self.base).max(0) as usize
    }

    /// Assert the peak stayed within the bound for `input` bytes.
    fn check(&self, target: &str, input: usize) {
        self.check_with(target, input, 0)
    }

    /// [`check`](Self::check), allowing `extra` bytes more.
    fn check_with(&self, target: &str, input: usize, extra: usize) {
        let peak = self.peak();
        let bound = MEM_FACTOR * input + MEM_CONST + extra;
        assert!(
            peak <= bound,
            "{target}: the heap grew by {peak} bytes for {input} bytes of input (bound {bound})"
        );
        LARGEST.with(|r| {
            if peak > r.get().0 {
                r.set((peak, input));
            }
        });
    }
}

thread_local! {
    static LARGEST: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The largest heap growth of a target run on this thread so far, and the
/// size of that run's input.
pub fn largest_heap_growth() -> (usize, usize) {
    LARGEST.with(|r| r.get())
}

/// Run `f` and measure how much this thread's live heap grew at its peak
/// (0 without [`CountingAlloc`]).
pub fn heap_growth<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let scope = MemScope::new();
    let r = f();
    (r, scope.peak())
}

/// True when [`CountingAlloc`] is the global allocator.
pub fn counting_active() -> bool {
    let before = LIVE.with(|l| l.get());
    let v = std::hint::black_box(vec![0u8; 4096]);
    let during = LIVE.with(|l| l.get());
    drop(v);
    during - before >= 4096
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// What a reader is reading: for the checks on errors and records.
struct Ctx {
    source: SourceId,
    /// The prefix every error's text must start with (the path or source name).
    name: String,
    /// Length of the (decompressed) stream: no offset lies beyond it.
    stream_len: u64,
}

impl Ctx {
    fn new(name: &str, stream_len: usize) -> Self {
        Ctx {
            source: SourceId::intern(name),
            name: name.to_string(),
            stream_len: stream_len as u64,
        }
    }
}

fn check_error(e: &Error, ctx: &Ctx, record: Option<u64>) {
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", ctx.name)),
        "error does not name `{}`: {msg}",
        ctx.name
    );
    assert!(
        matches!(
            e,
            Error::Corrupt { .. } | Error::Field { .. } | Error::Io { .. } | Error::BadFile { .. }
        ),
        "unexpected kind of error for bad input: {e:?}"
    );
    if let Some(loc) = e.location() {
        assert_eq!(loc.source, ctx.source, "error about another source: {msg}");
        if let Some(r) = record {
            assert_eq!(loc.record, r, "error at the wrong record index: {msg}");
        }
        if let Some(off) = loc.offset {
            assert!(
                off <= ctx.stream_len,
                "offset {off} is past the end of the {}-byte stream: {msg}",
                ctx.stream_len
            );
        }
    }
}

fn check_record(rec: &Record, ctx: &Ctx, index: u64) {
    assert_eq!(rec.location.source, ctx.source, "record of another source");
    assert_eq!(rec.location.record, index, "record at the wrong index");
    if let Some(off) = rec.location.offset {
        assert!(off <= ctx.stream_len, "record offset {off} past the end");
    }
    for (i, (name, t)) in rec.fields.iter().enumerate() {
        let n: usize = t.shape.iter().product();
        assert_eq!(
            n,
            t.values.len(),
            "field `{name}`: shape {:?} but {} values",
            t.shape,
            t.values.len()
        );
        assert!(
            rec.fields[..i].iter().all(|(m, _)| m != name),
            "field `{name}` twice in a record"
        );
    }
}

/// Bitwise equality of values (NaN payloads included).
fn values_eq(a: &Values, b: &Values) -> bool {
    match (a, b) {
        (Values::F32(x), Values::F32(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        (Values::F64(x), Values::F64(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        _ => a == b,
    }
}

/// Records equal field by field, bitwise; the location's source is compared
/// only if `same_source`.
fn records_eq(a: &Record, b: &Record, same_source: bool) -> bool {
    a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|((n, t), (m, u))| n == m && t.shape == u.shape && values_eq(&t.values, &u.values))
        && a.location.record == b.location.record
        && a.location.offset == b.location.offset
        && (!same_source || a.location.source == b.location.source)
}

fn chunks_eq(a: &Chunk, b: &Chunk) -> bool {
    a.schema().same(b.schema())
        && a.origins() == b.origins()
        && a.columns().len() == b.columns().len()
        && a.columns()
            .iter()
            .zip(b.columns())
            .all(|(c, d)| c.ends == d.ends && values_eq(&c.values, &d.values))
}

/// One call's outcome.
enum Step {
    Rec(Record),
    /// An error's text, and whether reading may go on.
    Err(String, bool),
}

/// All outcomes of a reader, each with the reader's `next_index()` before it.
struct Steps {
    steps: Vec<(u64, Step)>,
    /// The read stopped at [`RECORD_LIMIT`], not at the end or a fatal error.
    capped: bool,
}

impl Steps {
    fn open_failed(e: &Error, ctx: &Ctx) -> Self {
        check_error(e, ctx, None);
        Steps {
            steps: vec![(0, Step::Err(e.to_string(), false))],
            capped: false,
        }
    }

    fn records(&self) -> impl Iterator<Item = &Record> {
        self.steps.iter().filter_map(|(_, s)| match s {
            Step::Rec(r) => Some(r),
            Step::Err(..) => None,
        })
    }

    /// Index of a fatal error, if the read ended with one.
    fn fatal_at(&self) -> Option<u64> {
        match self.steps.last() {
            Some((i, Step::Err(_, false))) => Some(*i),
            _ => None,
        }
    }
}

/// Read everything with `next_record`, checking each outcome. `resumed`:
/// the reader was opened at a `start_record` (its first error may be about
/// a frame it skipped, before `next_index()`).
fn drain_records(r: &mut dyn RecordReader, ctx: &Ctx, resumed: bool) -> Steps {
    let mut steps = Vec::new();
    loop {
        if steps.len() >= RECORD_LIMIT {
            return Steps {
                steps,
                capped: true,
            };
        }
        let before = r.next_index();
        match r.next_record() {
            Ok(None) => {
                assert!(
                    matches!(r.next_record(), Ok(None)),
                    "a reader at its end yields more"
                );
                break;
            }
            Ok(Some(rec)) => {
                check_record(&rec, ctx, before);
                assert_eq!(r.next_index(), before + 1, "next_index after a record");
                steps.push((before, Step::Rec(rec)));
            }
            Err(e) => {
                let lenient = resumed && steps.is_empty();
                check_error(&e, ctx, (!lenient).then_some(before));
                if let (true, Some(loc)) = (lenient, e.location()) {
                    assert!(loc.record <= before, "error past next_index: {e}");
                }
                let go_on = r.can_continue();
                steps.push((before, Step::Err(e.to_string(), go_on)));
                if !go_on {
                    match r.next_record() {
                        Err(e) => check_error(&e, ctx, None),
                        Ok(x) => panic!(
                            "after a fatal error the reader yields {:?} (data silently lost)",
                            x.map(|r| r.location)
                        ),
                    }
                    break;
                }
                assert!(
                    r.next_index() > before,
                    "an error that lets reading go on must skip the bad record"
                );
            }
        }
    }
    Steps {
        steps,
        capped: false,
    }
}

/// The chunk and the errors (with the chunk length when each happened) the
/// generic path gives: `next_record` outcomes pushed with `push_record`.
fn generic_chunk(steps: &Steps, schema: &Schema, ctx: &Ctx) -> (Chunk, Vec<(usize, String)>) {
    let mut chunk = Chunk::new(schema);
    let mut errors = Vec::new();
    for (i, s) in &steps.steps {
        match s {
            Step::Rec(rec) => {
                let before = chunk.clone();
                if let Err(e) = chunk.push_record(rec) {
                    check_error(&e, ctx, Some(*i));
                    assert!(
                        chunks_eq(&before, &chunk),
                        "push_record Err changed the chunk"
                    );
                    errors.push((chunk.len(), e.to_string()));
                }
            }
            Step::Err(m, _) => errors.push((chunk.len(), m.clone())),
        }
    }
    (chunk, errors)
}

/// Read everything with `read_chunk` into fresh chunks of at most
/// `max_records` rows / `max_bytes` payload, appended to one chunk.
fn drain_chunks(
    r: &mut dyn RecordReader,
    schema: &Schema,
    ctx: &Ctx,
    max_records: usize,
    max_bytes: usize,
) -> (Chunk, Vec<(usize, String)>, bool) {
    let mut all = Chunk::new(schema);
    let mut errors = Vec::new();
    let mut part = Chunk::new(schema);
    loop {
        if all.len() + errors.len() >= RECORD_LIMIT {
            return (all, errors, true);
        }
        part.clear();
        let before = r.next_index();
        let res = r.read_chunk(&mut part, max_records, max_bytes);
        assert!(part.len() <= max_records, "read_chunk took too many rows");
        all.extend_rows(&part, 0, part.len()).unwrap();
        match res {
            Ok(0) => {
                assert!(part.is_empty(), "read_chunk returned 0 but appended rows");
                break;
            }
            Ok(n) => {
                assert_eq!(n, part.len(), "read_chunk's count");
                assert_eq!(
                    r.next_index(),
                    before + n as u64,
                    "next_index after a chunk"
                );
            }
            Err(e) => {
                check_error(&e, ctx, Some(before + part.len() as u64));
                errors.push((all.len(), e.to_string()));
                if !r.can_continue() {
                    part.clear();
                    match r.read_chunk(&mut part, max_records, max_bytes) {
                        Err(e) => check_error(&e, ctx, None),
                        Ok(n) => panic!(
                            "after a fatal error read_chunk returns Ok({n}) (data silently lost)"
                        ),
                    }
                    break;
                }
            }
        }
    }
    (all, errors, false)
}

/// `read_chunk` (several bounds) agrees with the generic path on `schema`.
fn check_chunks(
    open: &mut dyn FnMut() -> feedline::Result<Box<dyn RecordReader>>,
    steps: &Steps,
    schema: &Schema,
    ctx: &Ctx,
) {
    if steps.capped {
        return;
    }
    let (want, want_errors) = generic_chunk(steps, schema, ctx);
    for (max_records, max_bytes) in [(usize::MAX, usize::MAX), (3, usize::MAX), (1000, 64)] {
        let mut r = match open() {
            Ok(r) => r,
            Err(e) => {
                check_error(&e, ctx, None);
                assert_eq!(want.len(), 0, "open failed: {e}");
                continue;
            }
        };
        let (got, errors, capped) = drain_chunks(r.as_mut(), schema, ctx, max_records, max_bytes);
        if capped {
            continue;
        }
        assert_eq!(
            errors, want_errors,
            "read_chunk({max_records}, {max_bytes}) errors differ from next_record + push_record (schema {schema})"
        );
        assert!(
            chunks_eq(&got, &want),
            "read_chunk({max_records}, {max_bytes}) rows differ from next_record + push_record (schema {schema}):\n{got:?}\nvs\n{want:?}"
        );
    }
}

/// Opening at `start_record = k` gives the full read's outcomes from `k` on.
fn check_resume(
    open_at: &mut dyn FnMut(u64) -> feedline::Result<Box<dyn RecordReader>>,
    full: &Steps,
    ctx: &Ctx,
) {
    if full.capped || full.steps.is_empty() {
        return;
    }
    let last = full.steps.last().map(|(i, _)| *i).unwrap_or(0);
    let mut ks = vec![1, last / 2 + 1, last + 1];
    ks.dedup();
    for k in ks {
        let (resumed, len_hint) = match open_at(k) {
            Ok(mut r) => {
                let hint = r.len_hint();
                (drain_records(r.as_mut(), ctx, true), hint)
            }
            Err(e) => (Steps::open_failed(&e, ctx), None),
        };
        if len_hint.is_some_and(|n| k >= n) {
            // Past the known end (npy, npz): nothing to read, broken or not.
            assert!(
                resumed.records().next().is_none(),
                "start_record {k} past the end yields records"
            );
            continue;
        }
        match full.fatal_at() {
            Some(f) if f < k => {
                // The framing broke before `k`: the skip hits it too.
                assert!(
                    matches!(resumed.steps.first(), Some((_, Step::Err(..)))),
                    "start_record {k} past a fatal error at record {f} reads on"
                );
            }
            _ => {
                let want: Vec<&(u64, Step)> = full.steps.iter().filter(|(i, _)| *i >= k).collect();
                assert_eq!(
                    resumed.steps.len(),
                    want.len(),
                    "start_record {k}: {} outcomes, the full read has {} from there",
                    resumed.steps.len(),
                    want.len()
                );
                for ((i, a), (j, b)) in resumed.steps.iter().zip(want) {
                    assert_eq!(i, j, "start_record {k}: outcome index");
                    match (a, b) {
                        (Step::Rec(x), Step::Rec(y)) => {
                            assert!(
                                records_eq(x, y, true),
                                "start_record {k}: record {i} differs"
                            )
                        }
                        (Step::Err(x, _), Step::Err(y, _)) => {
                            assert_eq!(x, y, "start_record {k}: error {i} differs")
                        }
                        _ => panic!("start_record {k}: outcome {i} differs (record vs error)"),
                    }
                }
            }
        }
    }
}

/// Two reads of the same stream (e.g. plain and compressed) agree exactly;
/// error texts are compared with each one's file name replaced.
fn assert_same_steps(a: &Steps, a_name: &str, b: &Steps, b_name: &str, what: &str) {
    if a.capped || b.capped {
        return;
    }
    assert_eq!(
        a.steps.len(),
        b.steps.len(),
        "{what}: {} vs {} outcomes",
        a.steps.len(),
        b.steps.len()
    );
    for ((i, x), (j, y)) in a.steps.iter().zip(&b.steps) {
        assert_eq!(i, j, "{what}: outcome index");
        match (x, y) {
            (Step::Rec(r), Step::Rec(s)) => {
                assert!(records_eq(r, s, false), "{what}: record {i} differs")
            }
            (Step::Err(m, c), Step::Err(n, d)) => {
                assert_eq!(
                    m.replacen(a_name, "FILE", 1),
                    n.replacen(b_name, "FILE", 1),
                    "{what}: error {i} differs"
                );
                assert_eq!(c, d, "{what}: can_continue after error {i} differs");
            }
            (Step::Rec(_), Step::Err(m, _)) | (Step::Err(m, _), Step::Rec(_)) => {
                panic!("{what}: outcome {i} differs: a record vs the error {m}")
            }
        }
    }
}

/// A schema from the first records (up to 8 that infer cleanly), if any.
fn inferred_schema(steps: &Steps) -> Option<Schema> {
    let recs: Vec<&Record> = steps.records().take(8).collect();
    if recs.is_empty() {
        return None;
    }
    Schema::infer(recs.iter().copied()).ok()
}

fn schema(build: impl FnOnce(feedline::SchemaBuilder) -> feedline::SchemaBuilder) -> Schema {
    build(Schema::builder()).build().expect("valid schema")
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn compress(data: &[u8], c: Compression) -> Vec<u8> {
    match c {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).expect("in memory");
            e.finish().expect("in memory")
        }
        Compression::Zlib => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).expect("in memory");
            e.finish().expect("in memory")
        }
    }
}

/// Decompress with the decoders the readers use: (bytes up to the first
/// error or the end, whether the stream was whole), or `None` when it is
/// larger than [`MAX_DECOMPRESSED`].
fn decompress(data: &[u8], c: Compression) -> Option<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let res = match c {
        Compression::None => return Some((data.to_vec(), true)),
        Compression::Gzip => flate2::bufread::MultiGzDecoder::new(data)
            .take(MAX_DECOMPRESSED as u64 + 1)
            .read_to_end(&mut out),
        Compression::Zlib => flate2::bufread::ZlibDecoder::new(data)
            .take(MAX_DECOMPRESSED as u64 + 1)
            .read_to_end(&mut out),
    };
    if out.len() > MAX_DECOMPRESSED {
        return None;
    }
    Some((out, res.is_ok()))
}

/// A scratch directory for this process and thread (the readers of npy,
/// npz, JSON Lines and CSV take paths). The same few file names are reused,
/// so the interned source names stay few.
fn scratch_dir() -> PathBuf {
    thread_local! {
        static DIR: PathBuf = {
            let id = format!("{:?}", std::thread::current().id());
            let id: String = id.chars().filter(|c| c.is_ascii_digit()).collect();
            let base = if Path::new("/dev/shm").is_dir() {
                PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            };
            let d = base.join(format!("feedline-fuzz-{}-{id}", std::process::id()));
            std::fs::create_dir_all(&d).expect("scratch directory");
            d
        };
    }
    DIR.with(|d| d.clone())
}

/// Remove this thread's scratch directory.
pub fn remove_scratch_dir() {
    let _ = std::fs::remove_dir_all(scratch_dir());
}

fn write_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch_dir().join(name);
    std::fs::write(&p, bytes).expect("write scratch file");
    p
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::with_builtin)
}

fn opts_at(start_record: u64, compression: Option<Compression>) -> OpenOptions {
    OpenOptions {
        start_record,
        compression,
        ..OpenOptions::default()
    }
}

fn cut(data: &[u8]) -> &[u8] {
    &data[..data.len().min(MAX_INPUT)]
}

// ---------------------------------------------------------------------------
// TFRecord + tf.train.Example
// ---------------------------------------------------------------------------

/// Schemas the TFRecord and Example targets decode against.
fn example_schemas() -> &'static [Schema] {
    static S: OnceLock<Vec<Schema>> = OnceLock::new();
    S.get_or_init(|| {
        vec![
            // The fixtures' schema.
            schema(|b| {
                b.field("name", DType::Bytes, [1])
                    .ragged("tokens", DType::I64, Ragged::Offsets)
                    .field("x", DType::F32, [4])
                    .field("y", DType::I64, [1])
            }),
            // Conversions: every dtype, scalars, 2-D, ragged with dims.
            schema(|b| {
                b.field("a", DType::F64, [2])
                    .field("b", DType::I32, [])
                    .ragged("c", DType::U8, Ragged::Padded)
                    .ragged_with_dims("d", DType::Bool, [2], Ragged::Offsets)
                    .ragged("e", DType::Bytes, Ragged::Offsets)
                    .field("f", DType::F32, [2, 2])
            }),
            // Everything ragged, so that most records fit.
            schema(|b| {
                b.ragged("x", DType::F32, Ragged::Offsets)
                    .ragged("y", DType::I64, Ragged::Offsets)
                    .ragged("name", DType::Bytes, Ragged::Offsets)
                    .ragged("tokens", DType::F64, Ragged::Offsets)
            }),
            // More than 8 fields: the decoder's hashed name lookup.
            schema(|b| {
                let mut b = b;
                for (i, n) in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
                    .iter()
                    .enumerate()
                {
                    let dt = [DType::I64, DType::F32, DType::Bytes, DType::U8, DType::I32][i % 5];
                    b = b.ragged(n, dt, Ragged::Offsets);
                }
                b
            }),
        ]
    })
}

fn tf_reader(
    bytes: &[u8],
    source: SourceId,
    start: u64,
    c: Compression,
    stream: bool,
) -> Box<dyn RecordReader> {
    let opts = opts_at(start, Some(c));
    if stream {
        Box::new(TfRecordReader::from_stream(
            std::io::Cursor::new(bytes.to_vec()),
            source,
            &opts,
        ))
    } else {
        Box::new(TfRecordReader::from_bytes(bytes.to_vec(), source, &opts))
    }
}

/// TFRecord framing (uncompressed input): read from memory, from a stream,
/// and compressed by the target (gzip or zlib); all three agree. Chunks
/// against every schema; `start_record`.
pub fn tfrecord(data: &[u8]) {
    let data = cut(data);
    let mem = MemScope::new();
    let ctx = Ctx::new("fuzz.tfrecord", data.len());
    let full = drain_records(
        tf_reader(data, ctx.source, 0, Compression::None, false).as_mut(),
        &ctx,
        false,
    );
    let streamed = drain_records(
        tf_reader(data, ctx.source, 0, Compression::None, true).as_mut(),
        &ctx,
        false,
    );
    assert_same_steps(&full, "", &streamed, "", "memory vs stream");
    let c = if data.len() % 2 == 0 {
        Compression::Gzip
    } else {
        Compression::Zlib
    };
    let packed = compress(data, c);
    let unpacked = drain_records(
        tf_reader(&packed, ctx.source, 0, c, false).as_mut(),
        &ctx,
        false,
    );
    assert_same_steps(&full, "", &unpacked, "", "plain vs compressed");
    drop((streamed, unpacked, packed));
    for (i, s) in example_schemas().iter().enumerate() {
        let stream = i % 2 == 1;
        check_chunks(
            &mut || Ok(tf_reader(data, ctx.source, 0, Compression::None, stream)),
            &full,
            s,
            &ctx,
        );
    }
    check_resume(
        &mut |k| Ok(tf_reader(data, ctx.source, k, Compression::None, false)),
        &full,
        &ctx,
    );
    mem.check("tfrecord", data.len());
}

/// TFRecord framing in a compressed stream (the input is the compressed
/// bytes; the first byte picks gzip or zlib): agrees with the framing of the
/// decompressed bytes up to the first error, and exactly when the stream is
/// whole.
pub fn tfrecord_stream(data: &[u8]) {
    let data = cut(data);
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let c = if mode & 1 == 0 {
        Compression::Gzip
    } else {
        Compression::Zlib
    };
    let Some((plain, whole)) = decompress(body, c) else {
        return;
    };
    let mem = MemScope::new();
    let ctx = Ctx::new("fuzz.tfrecord.z", plain.len());
    let stream_steps = drain_records(
        tf_reader(body, ctx.source, 0, c, mode & 2 != 0).as_mut(),
        &ctx,
        false,
    );
    if body.is_empty() {
        assert!(
            stream_steps.steps.is_empty(),
            "an empty buffer is an empty stream"
        );
        return;
    }
    let reference = drain_records(
        tf_reader(&plain, ctx.source, 0, Compression::None, false).as_mut(),
        &ctx,
        false,
    );
    if whole {
        assert_same_steps(&reference, "", &stream_steps, "", "decompressed vs stream");
    } else if !reference.capped && !stream_steps.capped {
        // A broken stream: the records read are those of the decompressed
        // bytes, then a fatal error. (It may come earlier than the
        // reference's: the decoder drops what it decoded in the read call
        // that failed, and a bad checksum at the end condemns it all.)
        for ((i, x), (j, y)) in reference.steps.iter().zip(&stream_steps.steps) {
            assert_eq!(i, j, "outcome index");
            match (x, y) {
                (Step::Rec(r), Step::Rec(s)) => assert!(records_eq(r, s, true), "record {i}"),
                (_, Step::Err(..)) => break,
                (Step::Err(m, _), Step::Rec(_)) => {
                    panic!("record {i} read from a stream whose decompressed bytes give: {m}")
                }
            }
        }
        assert!(
            matches!(stream_steps.steps.last(), Some((_, Step::Err(_, false)))),
            "a broken compressed stream must end in a fatal error"
        );
    }
    let s = &example_schemas()[mode as usize / 4 % example_schemas().len()];
    check_chunks(
        &mut || Ok(tf_reader(body, ctx.source, 0, c, false)),
        &stream_steps,
        s,
        &ctx,
    );
    check_resume(
        &mut |k| Ok(tf_reader(body, ctx.source, k, c, false)),
        &stream_steps,
        &ctx,
    );
    mem.check("tfrecord_stream", body.len().max(plain.len()));
}

/// One `tf.train.Example` payload (after a first byte that picks the
/// schema): the fast decoder agrees with the generic one (rows and error
/// texts), leaves the chunk as it was on an error, and works the same on a
/// second use; a decoded record re-encodes to an equal record.
pub fn example(data: &[u8]) {
    let data = cut(data);
    let Some((&sel, payload)) = data.split_first() else {
        return;
    };
    let mem = MemScope::new();
    let schemas = example_schemas();
    let schema = &schemas[sel as usize % schemas.len()];
    let ctx = Ctx::new("fuzz.example", payload.len());
    let loc = Location::new(ctx.source, 7, None);
    let generic = decode_record(payload, loc.clone());
    let mut want = Chunk::new(schema);
    let want_res = match &generic {
        Ok(rec) => {
            check_record(rec, &ctx, 7);
            want.push_record(rec)
        }
        Err(e) => Err(Error::corrupt(loc.clone(), e.to_string())),
    };
    let want_msg = match (&generic, &want_res) {
        (Err(e), _) => {
            check_error(e, &ctx, Some(7));
            Some(e.to_string())
        }
        (Ok(_), Err(e)) => {
            check_error(e, &ctx, Some(7));
            Some(e.to_string())
        }
        (Ok(_), Ok(())) => None,
    };
    let mut dec = ExampleDecoder::new(schema);
    let mut got = Chunk::new(schema);
    for round in 0..2 {
        let before = got.clone();
        let res = dec.decode_into(payload, &mut got, &loc);
        match (&res, &want_msg) {
            (Ok(()), None) => {
                let mut twice = Chunk::new(schema);
                twice.extend_rows(&want, 0, want.len()).unwrap();
                if round == 1 {
                    twice.extend_rows(&want, 0, want.len()).unwrap();
                }
                assert!(
                    chunks_eq(&got, &twice),
                    "fast decoder rows differ from the generic path (schema {schema}):\n{got:?}\nvs\n{twice:?}"
                );
            }
            (Err(e), Some(m)) => {
                assert_eq!(
                    &e.to_string(),
                    m,
                    "fast decoder error differs (schema {schema})"
                );
                assert!(
                    chunks_eq(&got, &before),
                    "decode_into Err changed the chunk"
                );
            }
            (Ok(()), Some(m)) => panic!("fast decoder accepts what the generic path rejects: {m}"),
            (Err(e), None) => panic!("fast decoder rejects what the generic path accepts: {e}"),
        }
    }
    if let Ok(rec) = &generic {
        let again = encode_example(rec);
        let back = decode_record(&again, loc.clone()).expect("a re-encoded record decodes");
        assert!(records_eq(rec, &back, true), "re-encoded record differs");
        let mut chunk = Chunk::new(schema);
        let res = ExampleDecoder::new(schema).decode_into(&again, &mut chunk, &loc);
        assert_eq!(
            res.is_ok(),
            want_res.is_ok(),
            "re-encoded payload decodes differently"
        );
        if res.is_ok() {
            assert!(
                chunks_eq(&chunk, &want),
                "re-encoded payload gives other rows"
            );
        }
    }
    mem.check("example", payload.len());
}

// ---------------------------------------------------------------------------
// NPY / NPZ
// ---------------------------------------------------------------------------

/// Fixed schemas for an array field named `x` (plus the inferred one).
fn array_schemas(names: &[&str]) -> Vec<Schema> {
    let mut out = Vec::new();
    for dt in [DType::F64, DType::I64, DType::U8] {
        let mut b = Schema::builder();
        for n in names {
            b = b.ragged(n, dt, Ragged::Offsets);
        }
        out.extend(b.build().ok());
    }
    let mut b = Schema::builder();
    for n in names {
        b = b.field(n, DType::F32, [4]);
    }
    out.extend(b.build().ok());
    out
}

/// `read_chunk` on a schema that leaves some of the file's fields out:
/// every row the generic path gives, the chunk path gives too, equal. (It
/// may give more: it need not read, or fail on, the fields left out.)
fn check_chunks_subset(
    open: &mut dyn FnMut() -> feedline::Result<Box<dyn RecordReader>>,
    steps: &Steps,
    schema: &Schema,
    ctx: &Ctx,
) {
    if steps.capped {
        return;
    }
    let (want, _) = generic_chunk(steps, schema, ctx);
    let Ok(mut r) = open() else { return };
    let (got, _, capped) = drain_chunks(r.as_mut(), schema, ctx, 3, usize::MAX);
    if capped {
        return;
    }
    let mut j = 0;
    for (i, o) in want.origins().iter().enumerate() {
        while j < got.len() && got.origins()[j].record < o.record {
            j += 1;
        }
        assert!(
            j < got.len() && got.origins()[j] == *o,
            "read_chunk lacks record {} that next_record gives (schema {schema})",
            o.record
        );
        let (a, b) = (want.row(i).unwrap(), got.row(j).unwrap());
        assert!(
            a.values()
                .iter()
                .zip(b.values())
                .all(|(x, y)| values_eq(x, y)),
            "read_chunk row of record {} differs (schema {schema})",
            o.record
        );
    }
}

fn open_path(path: &Path, format: &str, start: u64) -> feedline::Result<Box<dyn RecordReader>> {
    let spec = format!("{format}:{}", path.display());
    registry().open(&spec, None, &opts_at(start, None))
}

fn path_steps(path: &Path, format: &str, ctx: &Ctx) -> Steps {
    match open_path(path, format, 0) {
        Ok(mut r) => drain_records(r.as_mut(), ctx, false),
        Err(e) => Steps::open_failed(&e, ctx),
    }
}

/// Chunk and resume checks for a file read through the registry.
fn path_checks(path: &Path, format: &str, steps: &Steps, fixed: &[Schema], ctx: &Ctx) {
    let mut schemas: Vec<Schema> = fixed.to_vec();
    if let Some(s) = inferred_schema(steps) {
        schemas.push(s);
    }
    for s in &schemas {
        check_chunks(&mut || open_path(path, format, 0), steps, s, ctx);
    }
    check_resume(&mut |k| open_path(path, format, k), steps, ctx);
}

/// Records at the same index of two reads agree (locations' sources aside).
fn same_records_where_both_read(a: &Steps, b: &Steps, what: &str) {
    for ((i, x), (j, y)) in a.steps.iter().zip(&b.steps) {
        if i != j {
            break;
        }
        if let (Step::Rec(r), Step::Rec(s)) = (x, y) {
            assert!(records_eq(r, s, false), "{what}: record {i} differs");
        }
    }
}

/// A `.npy` file, read memory-mapped and as a gzip stream (`x.npy.gz`):
/// records agree where both read one; chunks and resume for each.
pub fn npy(data: &[u8]) {
    let data = cut(data);
    let mem = MemScope::new();
    let p = write_file("x.npy", data);
    let pg = write_file("x.npy.gz", &compress(data, Compression::Gzip));
    let ctx = Ctx::new(&p.to_string_lossy(), data.len());
    let ctx_g = Ctx::new(&pg.to_string_lossy(), data.len());
    let plain = path_steps(&p, "npy", &ctx);
    let gz = path_steps(&pg, "npy", &ctx_g);
    same_records_where_both_read(&plain, &gz, "mapped vs gzip");
    let fixed = array_schemas(&["x"]);
    path_checks(&p, "npy", &plain, &fixed, &ctx);
    path_checks(&pg, "npy", &gz, &fixed[..1], &ctx_g);
    mem.check("npy", data.len());
}

/// Build a zip from `spec`: entries separated by `\n--\n`, each
/// `NAME\n` + contents; a name ending in `*` is deflated.
fn build_zip(spec: &[u8]) -> Vec<u8> {
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let sep = b"\n--\n";
    let mut parts = Vec::new();
    let mut rest = spec;
    while let Some(p) = rest.windows(sep.len()).position(|w| w == sep) {
        parts.push(&rest[..p]);
        rest = &rest[p + sep.len()..];
    }
    parts.push(rest);
    for part in parts.into_iter().take(8) {
        let nl = part.iter().position(|&b| b == b'\n').unwrap_or(part.len());
        let name = String::from_utf8_lossy(&part[..nl]).into_owned();
        let body = part.get(nl + 1..).unwrap_or(&[]);
        let (name, method) = match name.strip_suffix('*') {
            Some(n) => (n.to_string(), zip::CompressionMethod::Deflated),
            None => (name, zip::CompressionMethod::Stored),
        };
        let o = SimpleFileOptions::default().compression_method(method);
        if w.start_file(name, o).is_err() {
            continue;
        }
        let _ = w.write_all(body);
    }
    w.finish().map(|c| c.into_inner()).unwrap_or_default()
}

/// A `.npz` file. First byte: even → the rest is the zip file itself; odd →
/// the rest describes entries (see [`build_zip`]) that the target zips with
/// correct sizes and CRCs, to reach the array decoding.
pub fn npz(data: &[u8]) {
    let data = cut(data);
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let mem = MemScope::new();
    let file = if mode & 1 == 0 {
        body.to_vec()
    } else {
        build_zip(body)
    };
    let p = write_file("x.npz", &file);
    let ctx = Ctx::new(&p.to_string_lossy(), file.len());
    let steps = path_steps(&p, "npz", &ctx);
    // The arrays' names, from the zip directory.
    let names: Vec<String> = zip::ZipArchive::new(std::io::Cursor::new(&file[..]))
        .map(|z| {
            z.file_names()
                .filter_map(|n| n.strip_suffix(".npy"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let mut schemas = array_schemas(&names);
    if let Some(s) = inferred_schema(&steps) {
        schemas.push(s);
    }
    let crc = steps
        .steps
        .iter()
        .any(|(_, s)| matches!(s, Step::Err(m, _) if m.contains("CRC-32 mismatch")));
    for s in &schemas {
        check_chunks(&mut || open_path(&p, "npz", 0), &steps, s, &ctx);
    }
    if names.len() > 1 {
        for s in array_schemas(&names[..1]).iter().take(1) {
            check_chunks_subset(&mut || open_path(&p, "npz", 0), &steps, s, &ctx);
        }
    }
    // The entries' CRC-32 is checked only when reading from the first row.
    if !crc {
        check_resume(&mut |k| open_path(&p, "npz", k), &steps, &ctx);
    }
    mem.check_with("npz", body.len().max(file.len()), ZIP_DIRECTORY_ALLOWANCE);
}

// ---------------------------------------------------------------------------
// JSON Lines and CSV
// ---------------------------------------------------------------------------

/// A JSON Lines file, plain and gzip compressed, through the registry: the
/// two agree; chunks and resume.
pub fn jsonl(data: &[u8]) {
    let data = cut(data);
    let mem = MemScope::new();
    let p = write_file("x.jsonl", data);
    let pg = write_file("x.jsonl.gz", &compress(data, Compression::Gzip));
    let (name, name_g) = (p.to_string_lossy(), pg.to_string_lossy());
    let ctx = Ctx::new(&name, data.len());
    let ctx_g = Ctx::new(&name_g, data.len());
    let plain = path_steps(&p, "jsonl", &ctx);
    let gz = path_steps(&pg, "jsonl", &ctx_g);
    assert_same_steps(&plain, &name, &gz, &name_g, "plain vs gzip");
    drop(gz);
    let fixed = [
        schema(|b| b.field("x", DType::F32, [4]).field("y", DType::I64, [])),
        schema(|b| {
            b.ragged("x", DType::F64, Ragged::Offsets)
                .ragged("tag", DType::Bytes, Ragged::Padded)
                .ragged("y", DType::Bool, Ragged::Offsets)
        }),
    ];
    path_checks(&p, "jsonl", &plain, &fixed, &ctx);
    mem.check("jsonl", data.len());
}

/// A CSV file read as CSV, as gzip compressed CSV (which must agree), and as
/// TSV, through the registry; chunks and resume.
pub fn csv(data: &[u8]) {
    let data = cut(data);
    let mem = MemScope::new();
    let fixed = [
        schema(|b| {
            b.field("f1", DType::F32, [])
                .field("f2", DType::F64, [])
                .field("label", DType::I64, [])
        }),
        schema(|b| {
            b.ragged("f1", DType::F64, Ragged::Offsets)
                .ragged("label", DType::Bytes, Ragged::Offsets)
                .ragged("c0", DType::Bool, Ragged::Offsets)
        }),
    ];
    let p = write_file("x.csv", data);
    let pg = write_file("x.csv.gz", &compress(data, Compression::Gzip));
    let (name, name_g) = (p.to_string_lossy(), pg.to_string_lossy());
    let ctx = Ctx::new(&name, data.len());
    let ctx_g = Ctx::new(&name_g, data.len());
    let plain = path_steps(&p, "csv", &ctx);
    let gz = path_steps(&pg, "csv", &ctx_g);
    assert_same_steps(&plain, &name, &gz, &name_g, "plain vs gzip");
    drop(gz);
    path_checks(&p, "csv", &plain, &fixed, &ctx);
    let pt = write_file("x.tsv", data);
    let ctx_t = Ctx::new(&pt.to_string_lossy(), data.len());
    let tsv = path_steps(&pt, "tsv", &ctx_t);
    path_checks(&pt, "tsv", &tsv, &fixed[1..], &ctx_t);
    mem.check("csv", data.len());
}

// ---------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------

fn fixture(name: &str) -> Vec<u8> {
    // From the root package or from the fuzz crate in `fuzz/`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = if root.join("tests/fixtures").is_dir() {
        root.join("tests/fixtures")
    } else {
        root.join("../tests/fixtures")
    };
    let p = dir.join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// An NPY file: `descr`, shape, Fortran order, format version, data.
fn npy_file(descr: &str, shape: &[usize], fortran: bool, major: u8, data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let fo = if fortran { "True" } else { "False" };
    let text = format!("{{'descr': '{descr}', 'fortran_order': {fo}, 'shape': {shape}, }}");
    let pre = if major == 1 { 10 } else { 12 };
    let pad = (64 - (pre + text.len() + 1) % 64) % 64;
    let text = format!("{text}{}\n", " ".repeat(pad));
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

fn npy_seeds() -> Vec<Vec<u8>> {
    let mut out = vec![fixture("x.npy")];
    let bytes: Vec<u8> = (0u8..96).map(|i| i.wrapping_mul(37)).collect();
    for (descr, size) in [
        ("|b1", 1),
        ("|i1", 1),
        ("<i2", 2),
        ("<i4", 4),
        (">i8", 8),
        ("|u1", 1),
        (">u2", 2),
        ("<u4", 4),
        ("<u8", 8),
        ("<f2", 2),
        (">f4", 4),
        ("<f8", 8),
    ] {
        let n = 6;
        out.push(npy_file(descr, &[n], false, 1, &bytes[..n * size]));
        out.push(npy_file(
            descr,
            &[3, 2],
            size % 2 == 0,
            1,
            &bytes[..6 * size],
        ));
    }
    out.push(npy_file("<f4", &[2, 2, 3], true, 2, &bytes[..48]));
    out.push(npy_file("<i4", &[4, 0], false, 3, &[]));
    out.push(npy_file("<u8", &[2], false, 1, &[0xff; 16]));
    out
}

fn tf_file(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in payloads {
        feedline::format::tfrecord::frame_into(p, &mut out);
    }
    out
}

fn example_payloads() -> Vec<Vec<u8>> {
    use feedline::{BytesList, Tensor};
    let loc = Location::new(SourceId::intern("seed"), 0, None);
    let rec = |fields: Vec<(&str, Values)>| Record {
        fields: fields
            .into_iter()
            .map(|(n, v)| (n.to_string(), Tensor::vector(v)))
            .collect(),
        location: loc.clone(),
    };
    let bl = |items: &[&[u8]]| Values::Bytes(items.iter().copied().collect::<BytesList>());
    let mut out = Vec::new();
    // The fixtures' payloads.
    let mut r = TfRecordReader::from_bytes(
        fixture("examples.tfrecord"),
        SourceId::intern("seed"),
        &OpenOptions::default(),
    );
    while let Ok(Some(p)) = r.next_payload() {
        out.push(p.to_vec());
    }
    out.truncate(3);
    out.push(encode_example(&rec(vec![
        ("a", Values::F32(vec![1.5, -2.0])),
        ("b", Values::I64(vec![-7])),
        ("c", bl(&[b"\x01\x02\x03"])),
        ("d", Values::I64(vec![1, 0, 0, 1])),
        ("e", bl(&[b"x", b"", b"yz"])),
        ("f", Values::F32(vec![0.0, 1.0, f32::NAN, -0.0])),
    ])));
    out.push(encode_example(&rec(vec![
        ("x", Values::F32(vec![1.0, 2.0, 3.0, 4.0])),
        ("y", Values::I64(vec![i64::MIN, 5, 1 << 40])),
        ("name", bl(&[b"n"])),
        ("tokens", Values::I64(vec![])),
    ])));
    out.push(encode_example(&rec(vec![
        ("g", Values::I64(vec![3])),
        ("h", Values::F32(vec![0.25])),
        ("i", bl(&[b"i"])),
        ("j", Values::I64(vec![255, 256])),
    ])));
    // Unpacked lists, a repeated key, an empty Feature, an unknown field.
    out.push(vec![
        0x0a, 0x1c, // features
        0x0a, 0x0b, 0x0a, 0x01, b'y', 0x12, 0x06, 0x1a, 0x04, 0x08, 0x01, 0x08,
        0x02, // y: ints
        0x0a, 0x05, 0x0a, 0x01, b'y', 0x12, 0x00, // y again, no kind
        0x0a, 0x06, 0x0a, 0x01, b'x', 0x12, 0x01, 0x00, // x: junk
        0x10, 0x01, // unknown varint field
    ]);
    out.push(Vec::new());
    out
}

fn jsonl_seeds() -> Vec<Vec<u8>> {
    vec![
        fixture("records.jsonl"),
        b"{\"x\": [1.5, 2, 3, 4], \"y\": 3, \"tag\": \"a\"}\n\n{\"x\": [[1, 2], [3, 4]], \"y\": -1}\r\n".to_vec(),
        b"\xef\xbb\xbf{\"y\": true, \"tag\": [\"a\", \"b\"]}\n{\"y\": null}\n{\"x\": {}}\n{\"x\": [1, \"a\"]}\n{\"x\": [[1], [2, 3]]}\n{\"x\": 1, \"x\": 2}\n[1]\n{\"x\": 18446744073709551615}\n".to_vec(),
        b"{\"x\": [], \"y\": [[]], \"tag\": \"\\u00e9\"}\n{\"x\": 1e400}\n   \n{".to_vec(),
    ]
}

fn csv_seeds() -> Vec<Vec<u8>> {
    vec![
        fixture("table.csv"),
        b"f1,label,c0\n1,true,\"a,b\"\n,x,\n2.5,FALSE,\"q\"\"q\"\n1,2\n".to_vec(),
        b"\xef\xbb\xbff1\tlabel\n0.5\t1\n\t\n\xff\tz\n".to_vec(),
        b"a,a\n1,2\n".to_vec(),
        b",,\n1,2,3\n".to_vec(),
    ]
}

/// Starting inputs for a target: the fixtures and small generated files.
/// `fuzz/corpus/<target>/` was seeded from these (see `fuzz/README.md`).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let payloads = example_payloads();
    let tf_plain = vec![
        fixture("examples.tfrecord"),
        fixture("corrupt_record3.tfrecord"),
        fixture("truncated_record7.tfrecord"),
        tf_file(&payloads),
        tf_file(&[Vec::new()]),
        Vec::new(),
    ];
    match target {
        "tfrecord" => tf_plain,
        "tfrecord_stream" => {
            let mut out = Vec::new();
            let mut gz = vec![0u8];
            gz.extend(fixture("examples.tfrecord.gz"));
            out.push(gz);
            for (i, f) in tf_plain.iter().enumerate() {
                let mode = (i % 4) as u8;
                let c = if mode & 1 == 0 {
                    Compression::Gzip
                } else {
                    Compression::Zlib
                };
                let mut v = vec![mode];
                v.extend(compress(f, c));
                out.push(v);
            }
            out
        }
        "example" => payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut v = vec![(i % example_schemas().len()) as u8];
                v.extend_from_slice(p);
                v
            })
            .collect(),
        "npy" => npy_seeds(),
        "npz" => {
            let mut raw = vec![0u8];
            raw.extend(fixture("arrays.npz"));
            let mut out = vec![raw];
            let bytes: Vec<u8> = (0u8..48).map(|i| i.wrapping_mul(41)).collect();
            for (dx, dy, fortran) in [
                ("<f4", "<i8", false),
                ("|u1", ">f8", true),
                ("<f2", "|b1", false),
                (">u8", "<i2", true),
            ] {
                let mut spec = b"x.npy\n".to_vec();
                spec.extend(npy_file(dx, &[3, 2], fortran, 1, &bytes));
                spec.extend_from_slice(b"\n--\ny.npy*\n");
                spec.extend(npy_file(dy, &[3], false, 1, &bytes[..24]));
                let mut v = vec![1u8];
                v.extend_from_slice(&spec);
                out.push(v);
                let mut z = vec![0u8];
                z.extend(build_zip(&spec));
                out.push(z);
            }
            out
        }
        "jsonl" => jsonl_seeds(),
        "csv" => csv_seeds(),
        other => panic!("no fuzz target `{other}`"),
    }
}
