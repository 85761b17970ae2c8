//! The single-thread file path: [`files`] reads a [`PassPlan`]'s tasks in
//! order through the format [`Registry`], and [`batches`] adds the shuffle
//! buffer, the batcher and collation — the whole loader in one thread. They
//! define what the actor pipeline must deliver, and are its baseline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{PassIter, Reader};
use crate::batch::Batch;
use crate::batch_policy::{BatchPolicy, Batcher};
use crate::chunk::Chunk;
use crate::collate::collate_rows;
use crate::error::Result;
use crate::format::{check_chunk_budget, OpenOptions, RecordReader, Registry};
use crate::plan::{FileTask, PassPlan};
use crate::record::Instance;
use crate::schema::Schema;
use crate::shuffle::{ShuffleBuffer, ShuffleConfig};
use crate::transform::{BatchTransformer, RecordStage, Transforms};

/// Default rows per chunk read from a file.
pub const DEFAULT_CHUNK_ROWS: usize = 256;
/// Default payload bytes after which a chunk is closed early.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

#[derive(Clone, Debug)]
struct Source {
    registry: Registry,
    plan: PassPlan,
    schema: Schema,
    opts: OpenOptions,
    chunk_rows: usize,
    chunk_bytes: usize,
}

impl Source {
    fn chunks(&self, pass: u64) -> ChunkIter<'_> {
        ChunkIter {
            src: self,
            tasks: self.plan.tasks(pass).into_iter(),
            current: None,
            stashed: None,
        }
    }
}

/// Reads the plan's files pass after pass, yielding instances; see [`files`].
#[derive(Debug)]
pub struct FilesReader {
    src: Source,
    next_pass: AtomicU64,
}

/// A reader of all instances of `plan`'s tasks, one pass per read.
///
/// Pass `p` (the `p`-th read, see [`FilesReader::start_pass`]) reads
/// `plan.tasks(p)` in order; each task's file is opened at its
/// `start_record` (or `opts.start_record` if that is later: it applies to
/// every file) and only the records its stride keeps are yielded, as
/// `Ok(Instance)` conformed to `schema`. A file that cannot be opened, or a
/// bad record, yields one `Err` — naming the file, record and offset — and
/// reading goes on: with the next record if the format can skip the bad one,
/// else with the next file. Stop at the first error by collecting into a
/// `Result`. A reader may return a short chunk at any time; only `0` ends a
/// file (see [`RecordReader::read_chunk`]).
///
/// Files are decoded in chunks of up to [`DEFAULT_CHUNK_ROWS`] rows /
/// [`DEFAULT_CHUNK_BYTES`] bytes (see [`FilesReader::chunk_size`]); for speed
/// read whole chunks with [`FilesReader::chunks`].
pub fn files(registry: Registry, plan: PassPlan, schema: Schema, opts: OpenOptions) -> FilesReader {
    FilesReader {
        src: Source {
            registry,
            plan,
            schema,
            opts,
            chunk_rows: DEFAULT_CHUNK_ROWS,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
        },
        next_pass: AtomicU64::new(0),
    }
}

impl FilesReader {
    /// Decode at most `rows` records or about `bytes` of payload per chunk.
    ///
    /// # Errors
    ///
    /// `rows` or `bytes` is 0 ([`check_chunk_budget`]).
    pub fn chunk_size(mut self, rows: usize, bytes: usize) -> Result<Self> {
        check_chunk_budget(rows, bytes)?;
        self.src.chunk_rows = rows;
        self.src.chunk_bytes = bytes;
        Ok(self)
    }

    /// Make the next read pass `pass` (to resume a run).
    pub fn start_pass(self, pass: u64) -> Self {
        self.next_pass.store(pass, Ordering::SeqCst);
        self
    }

    /// The pass the next read will be.
    pub fn next_pass(&self) -> u64 {
        self.next_pass.load(Ordering::SeqCst)
    }

    /// The plan.
    pub fn plan(&self) -> &PassPlan {
        &self.src.plan
    }

    /// Read pass `pass` without touching the pass counter.
    pub fn read_pass(&self, pass: u64) -> PassIter<'_, Result<Instance>> {
        let mut chunks = self.src.chunks(pass);
        let mut current: Option<(Chunk, usize)> = None;
        Box::new(std::iter::from_fn(move || loop {
            if let Some((c, i)) = current.as_mut() {
                if *i < c.len() {
                    *i += 1;
                    return Some(c.row(*i - 1));
                }
                current = None;
            }
            match chunks.next()? {
                Ok(c) => current = Some((c, 0)),
                Err(e) => return Some(Err(e)),
            }
        }))
    }

    /// The same reading yielding whole chunks (`Result<Chunk>`): no
    /// per-instance copy. It has its own pass counter, starting where this
    /// one is.
    pub fn chunks(self) -> FileChunks {
        FileChunks {
            next_pass: AtomicU64::new(self.next_pass()),
            src: self.src,
        }
    }
}

impl Reader for FilesReader {
    type Item = Result<Instance>;

    fn read(&self) -> PassIter<'_, Result<Instance>> {
        let pass = self.next_pass.fetch_add(1, Ordering::SeqCst);
        self.read_pass(pass)
    }
}

/// Reads the plan's files pass after pass, yielding chunks; see [`FilesReader::chunks`].
#[derive(Debug)]
pub struct FileChunks {
    src: Source,
    next_pass: AtomicU64,
}

impl FileChunks {
    /// Make the next read pass `pass`.
    pub fn start_pass(self, pass: u64) -> Self {
        self.next_pass.store(pass, Ordering::SeqCst);
        self
    }

    /// The pass the next read will be.
    pub fn next_pass(&self) -> u64 {
        self.next_pass.load(Ordering::SeqCst)
    }

    /// Read pass `pass` without touching the pass counter.
    pub fn read_pass(&self, pass: u64) -> PassIter<'_, Result<Chunk>> {
        Box::new(self.src.chunks(pass))
    }
}

impl Reader for FileChunks {
    type Item = Result<Chunk>;

    fn read(&self) -> PassIter<'_, Result<Chunk>> {
        let pass = self.next_pass.fetch_add(1, Ordering::SeqCst);
        self.read_pass(pass)
    }
}

/// The chunks of one pass: tasks in order, each file's records filtered by
/// its stride.
struct ChunkIter<'a> {
    src: &'a Source,
    tasks: std::vec::IntoIter<FileTask>,
    current: Option<(FileTask, Box<dyn RecordReader>)>,
    /// An error to yield after the rows decoded before it.
    stashed: Option<crate::Error>,
}

impl Iterator for ChunkIter<'_> {
    type Item = Result<Chunk>;

    fn next(&mut self) -> Option<Result<Chunk>> {
        if let Some(e) = self.stashed.take() {
            return Some(Err(e));
        }
        loop {
            if self.current.is_none() {
                let task = self.tasks.next()?;
                let mut opts = self.src.opts.clone();
                opts.start_record = opts.start_record.max(task.start_record);
                match self.src.registry.open(&task.file, None, &opts) {
                    Ok(r) => self.current = Some((task, r)),
                    Err(e) => return Some(Err(e)),
                }
            }
            let (task, reader) = self.current.as_mut().expect("a file is open");
            let stride = task.stride;
            let step = stride.step.max(1) as usize;
            let rows = self.src.chunk_rows.saturating_mul(step);
            let bytes = self.src.chunk_bytes.saturating_mul(step);
            // Room for no more records than the file can still hold.
            let room = reader
                .max_records_left()
                .map_or(rows, |left| rows.min(left.try_into().unwrap_or(usize::MAX)));
            let mut chunk = Chunk::with_budget(&self.src.schema, room, bytes);
            match reader.read_chunk(&mut chunk, rows, bytes) {
                Ok(0) => self.current = None,
                Ok(_) => {
                    let chunk = stride.filter(chunk);
                    if !chunk.is_empty() {
                        return Some(Ok(chunk));
                    }
                }
                Err(e) => {
                    if !reader.can_continue() {
                        self.current = None;
                    }
                    let chunk = stride.filter(chunk);
                    if chunk.is_empty() {
                        return Some(Err(e));
                    }
                    self.stashed = Some(e);
                    return Some(Ok(chunk));
                }
            }
        }
    }
}

/// Shuffle, batching and reading settings of [`batches`].
#[derive(Clone, Debug)]
pub struct BatchesConfig {
    /// The shuffle buffer (its seed with the pass number seeds each pass).
    pub shuffle: ShuffleConfig,
    /// How instances are grouped.
    pub policy: BatchPolicy,
    /// Drop the partial last batch of each pass.
    pub drop_last: bool,
    /// Rows per chunk read from a file.
    pub chunk_rows: usize,
    /// Payload bytes after which a chunk is closed early.
    pub chunk_bytes: usize,
}

impl BatchesConfig {
    /// `policy` with the default shuffle buffer, no `drop_last`, default chunks.
    pub fn new(policy: BatchPolicy) -> Self {
        BatchesConfig {
            shuffle: ShuffleConfig::default(),
            policy,
            drop_last: false,
            chunk_rows: DEFAULT_CHUNK_ROWS,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
        }
    }
}

/// The whole loader in one thread; see [`batches`].
#[derive(Debug)]
pub struct BatchesReader {
    src: Source,
    cfg: BatchesConfig,
    transforms: Option<TransformStages>,
    next_pass: AtomicU64,
    dropped_rows: AtomicU64,
    oversize: AtomicU64,
}

/// A reader of collated batches: [`files`] in chunks, through a
/// [`ShuffleBuffer`] and a [`Batcher`], collated with [`collate_rows`].
///
/// Pass `p` works exactly so (this is the reference the actor pipeline's
/// deterministic mode reproduces):
///
/// 1. the shuffle buffer starts pass `p` ([`ShuffleBuffer::start_pass`]);
/// 2. loop: if the files have more and the buffer
///    [`has_room`](ShuffleBuffer::has_room), push the next chunk (of
///    `chunk_rows` / `chunk_bytes`, in task order); at the end of the files
///    set the buffer draining; else if it
///    [`can_draw`](ShuffleBuffer::can_draw), draw one row and push it to the
///    batcher, yielding a batch when one is complete; else stop;
/// 3. flush the batcher (the partial batch, or dropped with `drop_last`).
///
/// Reading errors are yielded in place (`Err`) and the pass goes on, as in
/// [`files`]. Errors: a batch policy of size or budget 0, a chunk budget of
/// 0 rows or 0 bytes.
pub fn batches(
    registry: Registry,
    plan: PassPlan,
    schema: Schema,
    opts: OpenOptions,
    cfg: BatchesConfig,
) -> Result<BatchesReader> {
    cfg.policy.validate()?;
    check_chunk_budget(cfg.chunk_rows, cfg.chunk_bytes)?;
    opts.validate()?;
    Ok(BatchesReader {
        src: Source {
            registry,
            plan,
            schema,
            opts,
            chunk_rows: cfg.chunk_rows,
            chunk_bytes: cfg.chunk_bytes,
        },
        cfg,
        transforms: None,
        next_pass: AtomicU64::new(0),
        dropped_rows: AtomicU64::new(0),
        oversize: AtomicU64::new(0),
    })
}

/// The transforms of a [`BatchesReader`]: the record stage on each chunk
/// read, the instance and batch maps on each batch drawn.
struct TransformStages {
    records: Option<RecordStage>,
    batches: Option<BatchTransformer>,
}

impl std::fmt::Debug for TransformStages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformStages")
            .field("records", &self.records)
            .field("batches", &self.batches.is_some())
            .finish()
    }
}

impl BatchesReader {
    /// Run `transforms` in the pass (this is the reference the actor
    /// pipeline's transforms reproduce): the record stage on each chunk as
    /// it is read, before the shuffle buffer; the instance map (on
    /// `transforms.workers` threads, each instance's RNG drawn from `seed`,
    /// the pass, its source name and record) and the batch map on each
    /// batch as it is drawn. A record or instance that fails is yielded as
    /// an `Err` in its place, before the batch it would have been in, and
    /// the pass goes on: the batch is that much shorter.
    pub fn transforms(mut self, transforms: &Transforms, seed: u64) -> Result<Self> {
        self.transforms = Some(TransformStages {
            records: transforms.records.clone(),
            batches: BatchTransformer::new(transforms, &self.src.schema, seed)?,
        });
        Ok(self)
    }

    /// The schema of the batches (with an instance map: declared, or known
    /// once the first instance has transformed).
    pub fn output_schema(&self) -> Option<Schema> {
        match self.transforms.as_ref().and_then(|t| t.batches.as_ref()) {
            Some(b) => b.output_schema(),
            None => Some(self.src.schema.clone()),
        }
    }

    /// Make the next read pass `pass`.
    pub fn start_pass(self, pass: u64) -> Self {
        self.next_pass.store(pass, Ordering::SeqCst);
        self
    }

    /// The pass the next read will be.
    pub fn next_pass(&self) -> u64 {
        self.next_pass.load(Ordering::SeqCst)
    }

    /// Rows dropped with `drop_last`, over all finished passes.
    pub fn dropped_rows(&self) -> u64 {
        self.dropped_rows.load(Ordering::SeqCst)
    }

    /// Lone over-budget batches, over all finished passes.
    pub fn oversize_batches(&self) -> u64 {
        self.oversize.load(Ordering::SeqCst)
    }

    /// Read pass `pass` without touching the pass counter.
    pub fn read_pass(&self, pass: u64) -> PassIter<'_, Result<Batch>> {
        let mut buf = ShuffleBuffer::new(self.cfg.shuffle.clone());
        buf.start_pass(pass);
        let batcher = match Batcher::new(self.cfg.policy.clone(), self.cfg.drop_last) {
            Ok(b) => b,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        Box::new(BatchesIter {
            chunks: self.src.chunks(pass),
            buf,
            batcher,
            schema: &self.src.schema,
            pass,
            errors: std::collections::VecDeque::new(),
            pending: None,
            exhausted: false,
            finished: false,
            owner: self,
        })
    }
}

impl Reader for BatchesReader {
    type Item = Result<Batch>;

    fn read(&self) -> PassIter<'_, Result<Batch>> {
        let pass = self.next_pass.fetch_add(1, Ordering::SeqCst);
        self.read_pass(pass)
    }
}

struct BatchesIter<'a> {
    chunks: ChunkIter<'a>,
    buf: ShuffleBuffer,
    batcher: Batcher,
    schema: &'a Schema,
    pass: u64,
    /// Failed records and instances to yield before what follows them.
    errors: std::collections::VecDeque<crate::Error>,
    /// A batch made, to yield after the failures queued before it.
    pending: Option<Result<Batch>>,
    exhausted: bool,
    finished: bool,
    owner: &'a BatchesReader,
}

impl BatchesIter<'_> {
    /// The record stage on a chunk read: its failures queued.
    fn stage(&mut self, chunk: Chunk) -> Result<Chunk> {
        match self
            .owner
            .transforms
            .as_ref()
            .and_then(|t| t.records.as_ref())
        {
            None => Ok(chunk),
            Some(stage) => {
                let staged = stage.apply(chunk)?;
                self.errors.extend(staged.failed);
                Ok(staged.chunk)
            }
        }
    }

    /// Collate (or transform) a batch's rows: failed instances queued.
    fn make(&mut self, rows: &[crate::chunk::RowRef]) -> Result<Batch> {
        match self
            .owner
            .transforms
            .as_ref()
            .and_then(|t| t.batches.as_ref())
        {
            None => collate_rows(self.schema, rows),
            Some(t) => {
                let out = t.run(rows, self.pass)?;
                self.errors.extend(out.failed);
                Ok(out.batch)
            }
        }
    }
}

impl Iterator for BatchesIter<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        loop {
            if let Some(e) = self.errors.pop_front() {
                return Some(Err(e));
            }
            if let Some(b) = self.pending.take() {
                return Some(b);
            }
            if self.finished {
                return None;
            }
            if !self.exhausted && self.buf.has_room() {
                match self.chunks.next() {
                    Some(Ok(c)) => match self.stage(c) {
                        Ok(c) if c.is_empty() => {}
                        Ok(c) => self.buf.push_chunk(Arc::new(c)),
                        Err(e) => return Some(Err(e)),
                    },
                    Some(Err(e)) => return Some(Err(e)),
                    None => {
                        self.exhausted = true;
                        self.buf.set_draining(true);
                    }
                }
                continue;
            }
            // Here either the files are done (the buffer drains) or there is
            // no room (so the buffer holds enough rows to draw): draw.
            if let Some(row) = self.buf.draw() {
                if let Some(rows) = self.batcher.push(row) {
                    self.pending = Some(self.make(&rows));
                }
                continue;
            }
            self.finished = true;
            let dropped_before = self.batcher.dropped_rows();
            let last = self.batcher.flush();
            self.owner.dropped_rows.fetch_add(
                self.batcher.dropped_rows() - dropped_before,
                Ordering::SeqCst,
            );
            self.owner
                .oversize
                .fetch_add(self.batcher.oversize_batches(), Ordering::SeqCst);
            if let Some(rows) = last {
                self.pending = Some(self.make(&rows));
            }
        }
    }
}
