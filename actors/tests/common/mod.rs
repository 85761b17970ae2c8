//! The actor tests' one shared helper: a synthetic in-memory format with
//! injectable faults (`SynthFormat`: record `i` of file `fN` has the id
//! `N * 1_000_000 + i`, so every instance names its file and record), a
//! loader builder over it, the consumers that collect what each device got,
//! and the exactly-once checks over those ids.
#![allow(dead_code)]

pub mod s3;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use feedline::format::{Format, OpenOptions, RecordReader};
use feedline::{DType, Error, Location, Record, Result, Schema, SourceId, Tensor, Values};

/// A fault at one record of a synthetic file.
#[derive(Clone, Debug)]
pub enum Fault {
    /// `read` returns a corrupt-record error; reading can go on after it.
    BadRecord,
    /// A corrupt-record error after which the rest of the file is unreadable.
    BadRestOfFile,
    /// The reader panics (only the first `times` readers that get here).
    Panic { times: u32 },
    /// Sleep before the record.
    Slow(Duration),
    /// Block for this long (only the first `times` readers that get here):
    /// a reader hung in I/O.
    Hang { time: Duration, times: u32 },
}

/// One synthetic file: `records` records, `id = base + i`, `x = [id; 4]`.
#[derive(Clone, Debug)]
pub struct SynthFile {
    pub records: u64,
    pub base: i64,
    pub faults: BTreeMap<u64, Fault>,
}

/// A format that makes records in memory: `synth:NAME`.
#[derive(Default)]
pub struct SynthFormat {
    pub files: HashMap<String, SynthFile>,
    panics: Arc<HashMap<(String, u64), AtomicU32>>,
    /// Records read into chunks by every reader of this format, shared
    /// with [`reads`](Self::reads); a skip frames past records without
    /// reading them.
    reads: Arc<AtomicU64>,
}

impl SynthFormat {
    /// Files `f0..fN` with the given record counts; ids are globally unique.
    pub fn with_files(counts: &[u64]) -> Self {
        let mut files = HashMap::new();
        for (i, &n) in counts.iter().enumerate() {
            files.insert(
                format!("f{i}"),
                SynthFile {
                    records: n,
                    base: i as i64 * 1_000_000,
                    faults: BTreeMap::new(),
                },
            );
        }
        SynthFormat {
            files,
            panics: Arc::new(HashMap::new()),
            reads: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn fault(mut self, file: &str, record: u64, fault: Fault) -> Self {
        self.files
            .get_mut(file)
            .expect("file")
            .faults
            .insert(record, fault);
        self
    }

    /// Finish: set up the panic counters.
    pub fn build(mut self) -> Self {
        let mut panics = HashMap::new();
        for (name, f) in &self.files {
            for (r, fault) in &f.faults {
                if let Fault::Panic { times } | Fault::Hang { times, .. } = fault {
                    panics.insert((name.clone(), *r), AtomicU32::new(*times));
                }
            }
        }
        self.panics = Arc::new(panics);
        self
    }

    pub fn specs(&self) -> Vec<String> {
        let mut names: Vec<&String> = self.files.keys().collect();
        names.sort();
        names.into_iter().map(|n| format!("synth:{n}")).collect()
    }

    pub fn schema() -> Schema {
        Schema::builder()
            .field("id", DType::I64, [])
            .field("x", DType::F32, [4])
            .build()
            .unwrap()
    }

    /// The count of records read by this format's readers (all clones).
    pub fn reads(&self) -> Arc<AtomicU64> {
        self.reads.clone()
    }

    pub fn total(&self) -> u64 {
        self.files.values().map(|f| f.records).sum()
    }
}

impl Format for SynthFormat {
    fn name(&self) -> &str {
        "synth"
    }
    fn extensions(&self) -> &[&str] {
        &[]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        let name = path.to_string_lossy().to_string();
        let file = self.files.get(&name).cloned().ok_or_else(|| {
            Error::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such synthetic file"),
            )
        })?;
        Ok(Box::new(SynthReader {
            source: SourceId::intern(&format!("synth:{name}")),
            name,
            file,
            next: opts.start_record,
            dead: false,
            panics: self.panics.clone(),
            reads: self.reads.clone(),
        }))
    }
}

struct SynthReader {
    source: SourceId,
    name: String,
    file: SynthFile,
    next: u64,
    dead: bool,
    panics: Arc<HashMap<(String, u64), AtomicU32>>,
    reads: Arc<AtomicU64>,
}

impl RecordReader for SynthReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.dead || self.next >= self.file.records {
            return Ok(None);
        }
        let i = self.next;
        let loc = Location::new(self.source, i, Some(i * 100));
        match self.file.faults.get(&i) {
            Some(Fault::BadRecord) => {
                self.next += 1;
                return Err(Error::corrupt(loc, "injected bad record"));
            }
            Some(Fault::BadRestOfFile) => {
                self.dead = true;
                return Err(Error::corrupt(loc, "injected unreadable rest of file"));
            }
            Some(Fault::Panic { .. }) => {
                let c = &self.panics[&(self.name.clone(), i)];
                if c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
                    .is_ok()
                {
                    panic!("injected panic at record {i}");
                }
            }
            Some(Fault::Slow(d)) => std::thread::sleep(*d),
            Some(Fault::Hang { time, .. }) => {
                let c = &self.panics[&(self.name.clone(), i)];
                if c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
                    .is_ok()
                {
                    std::thread::sleep(*time);
                }
            }
            None => {}
        }
        self.next += 1;
        let id = self.file.base + i as i64;
        Ok(Some(Record {
            fields: vec![
                ("id".into(), Tensor::scalar(Values::I64(vec![id]))),
                ("x".into(), Tensor::vector(Values::F32(vec![id as f32; 4]))),
            ],
            location: loc,
        }))
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    /// Counted in `reads`: the records read into chunks, as the
    /// pipeline's readers (and a snapshot's pool made again) read them.
    fn read_chunk(
        &mut self,
        chunk: &mut feedline::Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        let before = chunk.len();
        let n = feedline::format::fill_chunk(chunk, max_records, max_bytes, || self.next_record());
        self.reads
            .fetch_add((chunk.len() - before) as u64, Ordering::Relaxed);
        n
    }

    /// Framed: past the records between, without reading them.
    fn skip_to(&mut self, record: u64) -> Result<()> {
        if !self.dead {
            self.next = self.next.max(record.min(self.file.records));
        }
        Ok(())
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.file.records)
    }
}

/// A format that reads files of another format (`counted:PATH`, read as
/// the inner format reads PATH, records named by PATH) and keeps which
/// records its readers read into chunks — as the pipeline's readers read
/// them; not those framed past by a skip or read alone.
pub struct CountingFormat {
    inner: Arc<dyn Format>,
    read: Arc<std::sync::Mutex<Vec<(String, u64)>>>,
}

impl CountingFormat {
    /// Count the reads of `inner` (a built-in format's name, e.g. `jsonl`).
    pub fn of(inner: &str) -> Self {
        let inner = feedline::format::Registry::with_builtin()
            .get(inner)
            .expect("a built-in format");
        CountingFormat {
            inner,
            read: Arc::default(),
        }
    }

    /// Every (source, record) read so far, and forget them.
    pub fn take_reads(&self) -> Vec<(String, u64)> {
        std::mem::take(&mut *self.read.lock().unwrap())
    }

    /// A registry with this format in it, and the handle to its reads.
    pub fn registry(self) -> (feedline::format::Registry, Arc<Self>) {
        let me = Arc::new(self);
        let mut r = feedline::format::Registry::with_builtin();
        r.register(Arc::new(CountingFormat {
            inner: me.inner.clone(),
            read: me.read.clone(),
        }));
        (r, me)
    }
}

impl Format for CountingFormat {
    fn name(&self) -> &str {
        "counted"
    }
    fn extensions(&self) -> &[&str] {
        &[]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(CountingReader {
            inner: self.inner.open(path, opts)?,
            read: self.read.clone(),
        }))
    }
    fn infer_schema(&self, path: &Path) -> Option<Result<Schema>> {
        self.inner.infer_schema(path)
    }
    fn infer_from_records(&self, records: &[Record]) -> Result<Schema> {
        self.inner.infer_from_records(records)
    }
}

struct CountingReader {
    inner: Box<dyn RecordReader>,
    read: Arc<std::sync::Mutex<Vec<(String, u64)>>>,
}

impl RecordReader for CountingReader {
    /// Not counted: a record read alone (checking a file) is not one the
    /// pipeline's readers read into a chunk.
    fn next_record(&mut self) -> Result<Option<Record>> {
        self.inner.next_record()
    }
    fn read_chunk(
        &mut self,
        chunk: &mut feedline::Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        let before = chunk.len();
        let n = self.inner.read_chunk(chunk, max_records, max_bytes);
        let mut read = self.read.lock().unwrap();
        for o in &chunk.origins()[before..] {
            read.push((o.source.name().to_string(), o.record));
        }
        n
    }
    fn next_index(&self) -> u64 {
        self.inner.next_index()
    }
    fn skip_to(&mut self, record: u64) -> Result<()> {
        self.inner.skip_to(record)
    }
    fn can_continue(&self) -> bool {
        self.inner.can_continue()
    }
    fn len_hint(&self) -> Option<u64> {
        self.inner.len_hint()
    }
    fn records_lost(&self) -> Option<u64> {
        self.inner.records_lost()
    }
    fn max_records_left(&self) -> Option<u64> {
        self.inner.max_records_left()
    }
}

/// `files` JSON Lines files of `records` records each in `dir`:
/// `{"id": f * 1_000_000 + i, "x": [id; 4]}` as the synthetic files' ids.
pub fn jsonl_files(dir: &Path, records: &[u64]) -> Vec<String> {
    (records.iter().enumerate())
        .map(|(f, &n)| {
            let path = dir.join(format!("f{f}.jsonl"));
            let text: String = (0..n)
                .map(|i| {
                    let id = f as u64 * 1_000_000 + i;
                    format!("{{\"id\": {id}, \"x\": [{id}.0, {id}.0, {id}.0, {id}.0]}}\n")
                })
                .collect();
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_string()
        })
        .collect()
}

/// A registry with the synthetic format.
pub fn synth_registry(format: SynthFormat) -> feedline::format::Registry {
    let mut r = feedline::format::Registry::with_builtin();
    r.register(Arc::new(format));
    r
}

/// An instance as user code makes it, of the synthetic files' schema:
/// `id`, and `x = [id; 4]`.
pub fn sample(id: i64) -> feedline::format::generator::Sample {
    feedline::format::generator::Sample::new()
        .with("id", Values::I64(vec![id]), [])
        .with("x", Values::F32(vec![id as f32; 4]), [4])
}

/// A loader builder that reads these synthetic files with their schema.
pub fn synth_loader(synth: SynthFormat) -> feedline_actors::LoaderBuilder {
    let specs = synth.specs();
    feedline_actors::Loader::builder()
        .registry(synth_registry(synth))
        .files(specs)
        .schema(SynthFormat::schema())
}

/// Every id of files with `counts` records, but `except`, sorted.
pub fn all_ids(counts: &[u64], except: &[i64]) -> Vec<i64> {
    let mut v: Vec<i64> = counts
        .iter()
        .enumerate()
        .flat_map(|(f, &n)| (0..n as i64).map(move |i| f as i64 * 1_000_000 + i))
        .filter(|id| !except.contains(id))
        .collect();
    v.sort();
    v
}

/// The ids of a delivered batch, in its order.
pub fn ids(d: &feedline_actors::Delivered) -> Vec<i64> {
    d.batch.i64("id").unwrap().iter().copied().collect()
}

/// Iterate a loader: the ids of each pass (in delivery order), and the
/// error that ended it, if any.
pub fn ids_per_pass(
    loader: feedline_actors::Loader,
) -> (
    BTreeMap<u64, Vec<i64>>,
    Option<feedline_actors::PipelineError>,
) {
    let mut per_pass: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for d in loader {
        match d {
            Ok(d) => per_pass.entry(d.pass).or_default().extend(ids(&d)),
            Err(e) => return (per_pass, Some(e)),
        }
    }
    (per_pass, None)
}

/// What the devices got: (device, pass, seq, ids) of every batch.
pub type Seen = Vec<(usize, u64, u64, Vec<i64>)>;

/// Consume with `devices` device iterators, each on a thread of its own;
/// device `slow` (if any) takes 300 µs per batch. Drops the loader after.
pub fn consume_devices(
    loader: feedline_actors::Loader,
    devices: usize,
    slow: Option<usize>,
) -> Seen {
    let handles: Vec<_> = (0..devices)
        .map(|d| {
            let it = loader.device_iter(d);
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for x in it {
                    let x = x.unwrap();
                    out.push((d, x.pass, x.seq, ids(&x)));
                    if slow == Some(d) {
                        std::thread::sleep(Duration::from_micros(300));
                    }
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    drop(loader);
    all
}

/// The ids each pass delivered, sorted.
pub fn per_pass(seen: &Seen) -> BTreeMap<u64, Vec<i64>> {
    let mut per_pass: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (_, p, _, ids) in seen {
        per_pass.entry(*p).or_default().extend(ids);
    }
    for ids in per_pass.values_mut() {
        ids.sort();
    }
    per_pass
}

/// Exactly `passes` passes, each delivering exactly the ids `want`
/// (sorted): nothing lost, nothing twice.
pub fn assert_exactly_once(per_pass: &BTreeMap<u64, Vec<i64>>, want: &[i64], passes: u64) {
    assert_eq!(per_pass.len() as u64, passes, "passes delivered");
    for (p, ids) in per_pass {
        let mut ids = ids.clone();
        ids.sort();
        assert!(
            ids.as_slice() == want,
            "pass {p}: {} of {} ids, or repeats",
            ids.len(),
            want.len()
        );
    }
}

/// A gate: shut until opened, once for good; `wait` blocks until then.
#[derive(Clone, Default)]
pub struct Gate(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    /// Open the gate: every waiter goes on, and later waits return at once.
    pub fn open(&self) {
        let (m, c) = &*self.0;
        *m.lock().unwrap() = true;
        c.notify_all();
    }

    /// Block until the gate is open.
    pub fn wait(&self) {
        let (m, c) = &*self.0;
        let mut open = m.lock().unwrap();
        while !*open {
            open = c.wait(open).unwrap();
        }
    }
}

/// A hook run by a [`Hooked`] reader before each read, with the index of
/// the record about to be read.
pub type BeforeRead = Box<dyn FnMut(u64) + Send>;

/// One opening of a synthetic file, as a [`Hooked`] format's hook sees it.
pub struct Opening<'a> {
    /// The file's name (`f0`, `f1`, …).
    pub file: &'a str,
    /// How many times the file was opened before this (0: the first).
    pub earlier: u32,
    /// The file's record count.
    pub records: u64,
    /// The options of this opening; the hook may change them.
    pub opts: &'a mut OpenOptions,
}

type OnOpen = Box<dyn Fn(Opening<'_>) -> Option<BeforeRead> + Send + Sync>;

/// The synthetic format with a hook at every opening: it may block (a stuck
/// open), change the options (a file that changed since it was counted) and
/// give the reader a [`BeforeRead`] hook (a read that blocks at a record).
pub struct Hooked {
    inner: SynthFormat,
    on_open: OnOpen,
    opened: std::sync::Mutex<HashMap<String, u32>>,
}

impl Hooked {
    /// A registry with `inner` wrapped in the hook `on_open`.
    pub fn registry(
        inner: SynthFormat,
        on_open: impl Fn(Opening<'_>) -> Option<BeforeRead> + Send + Sync + 'static,
    ) -> feedline::format::Registry {
        let mut r = feedline::format::Registry::with_builtin();
        r.register(Arc::new(Hooked {
            inner,
            on_open: Box::new(on_open),
            opened: Default::default(),
        }));
        r
    }
}

impl Format for Hooked {
    fn name(&self) -> &str {
        "synth"
    }
    fn extensions(&self) -> &[&str] {
        &[]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        let file = path.to_string_lossy().to_string();
        let earlier = {
            let mut opened = self.opened.lock().unwrap();
            let n = opened.entry(file.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let mut opts = opts.clone();
        let records = self.inner.files.get(&file).map_or(0, |f| f.records);
        let before_read = (self.on_open)(Opening {
            file: &file,
            earlier,
            records,
            opts: &mut opts,
        });
        let inner = self.inner.open(path, &opts)?;
        Ok(match before_read {
            None => inner,
            Some(before_read) => Box::new(HookedReader { inner, before_read }),
        })
    }
}

/// A reader with a hook. It gives no length hint, so its file always ends
/// with an empty read — a read a hook can block.
struct HookedReader {
    inner: Box<dyn RecordReader>,
    before_read: BeforeRead,
}

impl RecordReader for HookedReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        (self.before_read)(self.inner.next_index());
        self.inner.next_record()
    }
    fn next_index(&self) -> u64 {
        self.inner.next_index()
    }
    fn can_continue(&self) -> bool {
        self.inner.can_continue()
    }
}

/// A [`BeforeRead`] hook that, the first time a read reaches record `at` or
/// later, calls `reached` and then waits at `gate`.
pub fn block_at(at: u64, gate: Gate, reached: impl FnOnce() + Send + 'static) -> BeforeRead {
    let mut reached = Some(reached);
    Box::new(move |next| {
        if next >= at {
            if let Some(reached) = reached.take() {
                reached();
                gate.wait();
            }
        }
    })
}

/// Where each delivered instance came from: (source, record) per pass, in
/// delivery order, and the text of every error the loader ended with. The
/// loader is dropped before it returns.
pub type Origins = (BTreeMap<u64, Vec<(String, u64)>>, Vec<String>);

/// Iterate `loader` to its end, collecting [`Origins`].
pub fn origins(loader: feedline_actors::Loader) -> Origins {
    let mut per_pass: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    let mut errors = Vec::new();
    for d in loader {
        match d {
            Ok(d) => per_pass.entry(d.pass).or_default().extend(
                d.batch
                    .origins()
                    .iter()
                    .map(|o| (o.source.name().to_string(), o.record)),
            ),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (per_pass, errors)
}

/// Read the objects `glob` matches twice with `readers` readers (batches of
/// 32, a pool of 100, the fail policy): no error, and each pass holds every
/// (URL, record) of `want` (sorted) exactly once. The pipeline's stats.
pub fn each_object_record_once_per_pass(
    glob: &str,
    readers: usize,
    want: &[(String, u64)],
) -> feedline_actors::StatsSnapshot {
    let loader = feedline_actors::Loader::builder()
        .files([glob])
        .readers(readers)
        .batch(32)
        .shuffle(100)
        .passes(2)
        .shard_from_env(false)
        .error_policy(feedline_actors::ErrorPolicy::Fail)
        .build()
        .unwrap_or_else(|e| panic!("{readers} readers: {e}"));
    let stats = loader.stats_handle();
    let (per_pass, errors) = origins(loader);
    assert!(errors.is_empty(), "{readers} readers: {errors:?}");
    assert_eq!(per_pass.len(), 2, "{readers} readers");
    for (pass, mut got) in per_pass {
        got.sort();
        assert!(
            got == want,
            "{readers} readers, pass {pass}: not each record once"
        );
    }
    stats.snapshot()
}

/// A missing object is an error naming its URL after one attempt (a 404 is
/// not retried).
pub fn a_missing_object_is_one_attempt(missing: &str) {
    let e = feedline_actors::Loader::builder()
        .files([missing])
        .shard_from_env(false)
        .build()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains(missing) && e.contains("1 attempt(s)"), "{e}");
}
