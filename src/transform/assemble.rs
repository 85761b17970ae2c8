//! [`BatchTransformer`]: makes batches from drawn rows through the instance
//! map, on a pool of transform workers of its own, then the batch map.
//!
//! - Each row's map gets its [`TransformCtx`] (RNG from seed, pass, source
//!   name and record), so the output does not depend on which worker runs it.
//! - The output schema is declared (the settings', else the map's own) or
//!   inferred from the first instance that transforms, and every instance is
//!   checked against it ([`Instance::from_record`]: a missing field, another
//!   type or shape is an error naming the instance's file, record and field,
//!   the expected and the actual). An inferred field that the input
//!   declares ragged and the map passed through unchanged keeps the input's
//!   ragged spec, not the first row's length.
//! - When every output field has a fixed shape, the batch's buffers are
//!   allocated first and each row is written straight into them
//!   ([`InstanceMap::map_into`], or a copy of [`InstanceMap::map`]'s output);
//!   otherwise the outputs are collated as instances.
//! - An error or a panic in the map is that row's failure, with its
//!   provenance; the batch holds the other rows, in order (the failed rows'
//!   places closed up). The caller's error policy decides what a failure does.
//! - **Batches in flight.** [`BatchTransformer::spawn`] hands a batch to the
//!   workers and returns: each of its rows is a task of its own, and the
//!   worker that finishes a batch's last row assembles the batch and hands
//!   it on. Nobody waits for a batch: with several in flight, a worker done
//!   with one batch's rows takes the next batch's (the oldest first), so no
//!   worker idles at a batch's slowest row. Dropping the transformer stops
//!   the batches in flight (rows not yet started fail fast) and waits for
//!   them, then for the workers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::workers::{WorkerGate, Workers};
use super::{BatchMap, InstanceMap, OutRow, Row, SlotMut, TransformCtx, Transforms};
use crate::batch::aligned::AlignedVec;
use crate::batch::{recycle, Array, Batch, BatchField};
use crate::chunk::{Chunk, RowRef};
use crate::collate::{collate_chunks, collate_rows};
use crate::error::{Error, Result};
use crate::format::generator::Sample;
use crate::panic::panic_message;
use crate::provenance::Origin;
use crate::record::Instance;
use crate::schema::{DType, Field, Schema};

/// A batch made through the transforms, and the rows that failed.
#[derive(Debug)]
pub struct Transformed {
    /// The rows that transformed, in their order.
    pub batch: Batch,
    /// Each failed row's error (with its provenance), in batch order.
    pub failed: Vec<Error>,
    /// The time the instance map took on the rows, all workers together
    /// (zero without an instance map).
    pub busy: Duration,
}

/// The instance map on its worker pool, the output schema, the batch map.
pub struct BatchTransformer {
    core: Arc<Core>,
    pool: Option<Workers>,
    /// Batches handed to the workers ([`spawn`](Self::spawn)) and not made yet.
    in_flight: Arc<InFlight>,
}

/// What making a batch needs, shared with the batches in flight (the
/// workers are not in it: they are dropped by the transformer's owner,
/// never on a worker).
struct Core {
    map: Option<Arc<dyn InstanceMap>>,
    batch_map: Option<BatchMap>,
    seed: u64,
    input: Schema,
    output: RwLock<Option<Schema>>,
    /// Where the output schema was inferred from (`None`: declared, or not
    /// known yet).
    inferred_from: RwLock<Option<String>>,
    /// The owner is gone: rows not started fail fast.
    stopping: AtomicBool,
    /// How many workers may run rows at once (`None`: all of the pool's).
    gate: Option<Arc<WorkerGate>>,
}

/// How long dropping the transformer waits for the batches in flight.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A count of batches in flight, waited for to reach 0.
#[derive(Default)]
struct InFlight {
    count: Mutex<usize>,
    zero: Condvar,
}

impl InFlight {
    fn begin(&self) {
        *self.count.lock() += 1;
    }

    fn end(&self) {
        let mut n = self.count.lock();
        *n -= 1;
        if *n == 0 {
            self.zero.notify_all();
        }
    }

    /// Wait until none is in flight or `deadline`; true if none is.
    fn wait_none(&self, deadline: Instant) -> bool {
        let mut n = self.count.lock();
        while *n > 0 {
            if self.zero.wait_until(&mut n, deadline).timed_out() {
                return *n == 0;
            }
        }
        true
    }
}

/// Where a made batch goes.
type Done = Box<dyn FnOnce(Result<Transformed>) + Send>;

/// One fixed-shape output field's buffer, `rows × unit` elements
/// ([`DATA_ALIGN`](crate::DATA_ALIGN)-aligned, as collation's).
enum Buffer {
    F32(AlignedVec<f32>),
    F64(AlignedVec<f64>),
    I64(AlignedVec<i64>),
    I32(AlignedVec<i32>),
    U8(AlignedVec<u8>),
    Bool(AlignedVec<bool>),
}

fn zeroed<T: recycle::Recycled + Copy + Default>(n: usize) -> AlignedVec<T> {
    let mut v = AlignedVec::with_capacity(n);
    v.resize(n, T::default());
    v
}

macro_rules! each_buffer {
    ($b:expr, $v:ident => $body:expr) => {
        match $b {
            Buffer::F32($v) => $body,
            Buffer::F64($v) => $body,
            Buffer::I64($v) => $body,
            Buffer::I32($v) => $body,
            Buffer::U8($v) => $body,
            Buffer::Bool($v) => $body,
        }
    };
}

impl Buffer {
    fn new(dtype: DType, n: usize) -> Self {
        match dtype {
            DType::F32 => Buffer::F32(zeroed(n)),
            DType::F64 => Buffer::F64(zeroed(n)),
            DType::I64 => Buffer::I64(zeroed(n)),
            DType::I32 => Buffer::I32(zeroed(n)),
            DType::U8 => Buffer::U8(zeroed(n)),
            DType::Bool => Buffer::Bool(zeroed(n)),
            DType::Bytes => unreachable!("bytes outputs are collated as instances"),
        }
    }

    /// Where the elements start, for rows written from several threads
    /// ([`RawBuffer::row`]); taken while the buffer is held alone.
    fn raw(&mut self) -> RawBuffer {
        fn base<T>(v: &mut [T]) -> *mut () {
            v.as_mut_ptr().cast()
        }
        let (dtype, ptr) = match self {
            Buffer::F32(v) => (DType::F32, base(v.as_mut_slice())),
            Buffer::F64(v) => (DType::F64, base(v.as_mut_slice())),
            Buffer::I64(v) => (DType::I64, base(v.as_mut_slice())),
            Buffer::I32(v) => (DType::I32, base(v.as_mut_slice())),
            Buffer::U8(v) => (DType::U8, base(v.as_mut_slice())),
            Buffer::Bool(v) => (DType::Bool, base(v.as_mut_slice())),
        };
        RawBuffer { dtype, ptr }
    }

    /// Keep only rows `keep` (ascending), moved up in order.
    fn keep_rows(&mut self, keep: &[usize], unit: usize) {
        each_buffer!(self, v => {
            for (to, &from) in keep.iter().enumerate() {
                if to != from {
                    v.as_mut_slice().copy_within(from * unit..(from + 1) * unit, to * unit);
                }
            }
            v.truncate(keep.len() * unit);
        })
    }

    fn into_array(self, shape: Vec<usize>) -> Result<Array> {
        let bad = |e: ndarray::ShapeError| Error::Schema(format!("transform output: {e}"));
        Ok(match self {
            Buffer::F32(v) => Array::F32(v.into_array(&shape).map_err(bad)?),
            Buffer::F64(v) => Array::F64(v.into_array(&shape).map_err(bad)?),
            Buffer::I64(v) => Array::I64(v.into_array(&shape).map_err(bad)?),
            Buffer::I32(v) => Array::I32(v.into_array(&shape).map_err(bad)?),
            Buffer::U8(v) => Array::U8(v.into_array(&shape).map_err(bad)?),
            Buffer::Bool(v) => Array::Bool(v.into_array(&shape).map_err(bad)?),
        })
    }
}

/// A buffer's elements by address, for rows written by tasks of their own:
/// each task makes the slot of its own row only ([`RawBuffer::row`]).
#[derive(Clone, Copy)]
struct RawBuffer {
    dtype: DType,
    ptr: *mut (),
}

impl RawBuffer {
    /// Row `row`'s slot of `unit` elements.
    ///
    /// # Safety
    ///
    /// The buffer holds at least `(row + 1) × unit` elements and outlives
    /// the slot, and no other slot of the same row exists at the same time.
    unsafe fn row<'a>(self, row: usize, unit: usize) -> SlotMut<'a> {
        unsafe fn part<'a, T>(ptr: *mut (), row: usize, unit: usize) -> &'a mut [T] {
            if unit == 0 {
                return &mut [];
            }
            std::slice::from_raw_parts_mut(ptr.cast::<T>().add(row * unit), unit)
        }
        match self.dtype {
            DType::F32 => SlotMut::F32(part(self.ptr, row, unit)),
            DType::F64 => SlotMut::F64(part(self.ptr, row, unit)),
            DType::I64 => SlotMut::I64(part(self.ptr, row, unit)),
            DType::I32 => SlotMut::I32(part(self.ptr, row, unit)),
            DType::U8 => SlotMut::U8(part(self.ptr, row, unit)),
            DType::Bool => SlotMut::Bool(part(self.ptr, row, unit)),
            DType::Bytes => unreachable!("bytes outputs are collated as instances"),
        }
    }
}

/// True if every field has a fixed shape and is not `bytes`: the batch's
/// buffers can be made before any row is transformed.
fn all_fixed(schema: &Schema) -> bool {
    schema
        .fields()
        .iter()
        .all(|f| !f.is_ragged() && f.dtype != DType::Bytes)
}

/// `e`, row `r`'s error, naming the row's `__key__` when it has one (a
/// WebDataset sample's key, a field of one byte string): which sample of a
/// shard failed, not only its record number.
fn with_sample_key(e: Error, r: &RowRef) -> Error {
    if r.chunk.schema().index_of("__key__").is_none() {
        return e;
    }
    match Row::new(&r.chunk, r.index).bytes("__key__") {
        Ok(key) => crate::format::wds::name_key(e, &key),
        Err(_) => e,
    }
}

/// Run `f` on row `origin`, a panic or an error becoming the row's
/// [`Error::Transform`] (a feedline error, such as a row that cannot be
/// read, stays what it is).
fn guarded<T>(
    name: &str,
    origin: Origin,
    f: impl FnOnce() -> std::result::Result<T, super::BoxError>,
) -> Result<T> {
    let what = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => match e.downcast::<Error>() {
            Ok(e) => return Err(*e),
            Err(e) => e.to_string(),
        },
        Err(panic) => format!("panicked: {}", panic_message(&*panic)),
    };
    Err(Error::Transform {
        location: origin.location(),
        transform: name.to_string(),
        what,
    })
}

/// The batch map on `batch`, a panic or an error becoming [`Error::BatchMap`].
fn apply_batch_map(f: &BatchMap, batch: Batch) -> Result<Batch> {
    let first = batch.origins().first().map(|o| o.location());
    let rows = batch.len();
    let what = match catch_unwind(AssertUnwindSafe(|| f(batch))) {
        Ok(Ok(b)) => return Ok(b),
        Ok(Err(e)) => e.to_string(),
        Err(p) => format!("panicked: {}", panic_message(&*p)),
    };
    Err(Error::BatchMap { first, rows, what })
}

/// `sample` as an instance of `schema` (checked: fields, types, shapes).
fn conform(sample: Sample, origin: Origin, schema: &Schema) -> Result<Instance> {
    Instance::from_record(&sample.into_record(origin.location()), schema)
}

/// One batch on its way: each row a task of its own; the task that
/// finishes the last row assembles the batch.
struct Assembly {
    core: Arc<Core>,
    rows: Vec<RowRef>,
    pass: u64,
    /// The map's name, for errors.
    name: String,
    target: Target,
    /// Rows not finished yet.
    remaining: AtomicUsize,
    /// The map's time on the rows so far, ns.
    busy_ns: AtomicU64,
    done: Mutex<Option<Done>>,
    in_flight: Arc<InFlight>,
}

/// Where a batch's rows go.
enum Target {
    /// Straight into the batch's buffers (every output field fixed).
    InPlace {
        schema: Schema,
        /// Elements per row, per field.
        units: Vec<usize>,
        /// The buffers' elements by address (each row task writes its own row).
        raw: Vec<RawBuffer>,
        /// The buffers, touched again only by the task that assembles.
        buffers: Mutex<Option<Vec<Buffer>>>,
        /// Each row's outcome.
        results: Vec<Mutex<Option<Result<()>>>>,
    },
    /// As owned samples, checked and collated at the end.
    Samples(Vec<Mutex<Option<Result<Sample>>>>),
}

/// A finished row's outcome, taken out to assemble the batch.
fn taken_once<T>(slot: &Mutex<Option<T>>) -> T {
    slot.lock().take().expect("every row finished")
}

// SAFETY: the raw buffer addresses point into `buffers`' heap memory,
// which the assembly owns and nobody touches through the buffers until
// every row task is done; each row task makes the slots of its own row
// only (disjoint), and the task that assembles sees every write (the
// `remaining` count is decremented with acquire/release ordering).
unsafe impl Send for Assembly {}
unsafe impl Sync for Assembly {}

impl Assembly {
    /// Start making the batch of `rows` (on a worker of the pool): one task
    /// per row, oldest batches first.
    fn start(core: Arc<Core>, rows: Vec<RowRef>, pass: u64, done: Done, in_flight: Arc<InFlight>) {
        let Some(map) = core.map.clone() else {
            // A pool exists only with an instance map.
            done(core.make_here(&rows));
            return in_flight.end();
        };
        let n = rows.len();
        let target = match core.output_schema() {
            Some(schema) if all_fixed(&schema) => {
                let units: Vec<usize> = schema.fields().iter().map(|f| f.unit_elements()).collect();
                let mut buffers: Vec<Buffer> = (schema.fields().iter().zip(&units))
                    .map(|(f, &u)| Buffer::new(f.dtype, n * u))
                    .collect();
                let raw = buffers.iter_mut().map(Buffer::raw).collect();
                Target::InPlace {
                    schema,
                    units,
                    raw,
                    buffers: Mutex::new(Some(buffers)),
                    results: (0..n).map(|_| Mutex::new(None)).collect(),
                }
            }
            _ => Target::Samples((0..n).map(|_| Mutex::new(None)).collect()),
        };
        let asm = Arc::new(Assembly {
            core,
            rows,
            pass,
            name: map.name(),
            target,
            remaining: AtomicUsize::new(n),
            busy_ns: AtomicU64::new(0),
            done: Mutex::new(Some(done)),
            in_flight,
        });
        if n == 0 {
            return asm.finish();
        }
        for i in 0..n {
            let a = asm.clone();
            rayon::spawn_fifo(move || a.row(i));
        }
    }

    /// Row `i`'s task.
    fn row(self: Arc<Self>, i: usize) {
        // Busy time starts with the turn: waiting at the gate is not work.
        let _turn = self.core.gate.as_ref().map(|g| g.enter());
        let t0 = Instant::now();
        let map = self.core.map.as_deref().expect("an instance map");
        let r = &self.rows[i];
        // A panic outside the guarded map call is the row's failure too:
        // rayon would abort the process, and the batch must still finish.
        let panicked = |p: Box<dyn std::any::Any + Send>| Error::Transform {
            location: r.origin().location(),
            transform: self.name.clone(),
            what: format!("panicked: {}", panic_message(&*p)),
        };
        match &self.target {
            Target::InPlace {
                schema,
                units,
                raw,
                results,
                ..
            } => {
                let made = catch_unwind(AssertUnwindSafe(|| {
                    // SAFETY: row `i` is this task's alone; the buffers hold
                    // `rows × unit` elements and live as long as `self`.
                    let slots = (raw.iter().zip(units)).map(|(b, &u)| unsafe { b.row(i, u) });
                    let mut out = OutRow::new(schema, slots.collect());
                    (self.core).one_into(map, &self.name, r, self.pass, &mut out, schema)
                }))
                .unwrap_or_else(|p| Err(panicked(p)))
                .map_err(|e| with_sample_key(e, r));
                *results[i].lock() = Some(made);
            }
            Target::Samples(samples) => {
                let made = catch_unwind(AssertUnwindSafe(|| {
                    self.core.sample(map, &self.name, r, self.pass)
                }))
                .unwrap_or_else(|p| Err(panicked(p)))
                .map_err(|e| with_sample_key(e, r));
                *samples[i].lock() = Some(made);
            }
        }
        let ns = t0.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish();
        }
    }

    /// Every row is done: assemble the batch, hand it on.
    fn finish(&self) {
        let made = catch_unwind(AssertUnwindSafe(|| self.assemble())).unwrap_or_else(|p| {
            Err(Error::Schema(format!(
                "assembling the batch of {} rows{} panicked: {}",
                self.rows.len(),
                (self.rows.first())
                    .map(|r| format!(" from {}", r.origin().location()))
                    .unwrap_or_default(),
                panic_message(&*p)
            )))
        });
        if let Some(done) = self.done.lock().take() {
            // What `done` does with the batch is the caller's; its panic
            // must not reach rayon (which would abort the process).
            let _ = catch_unwind(AssertUnwindSafe(|| done(made)));
        }
        self.in_flight.end();
    }

    fn assemble(&self) -> Result<Transformed> {
        let busy = Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed));
        let (batch, failed) = match &self.target {
            Target::InPlace {
                schema,
                units,
                buffers,
                results,
                ..
            } => {
                let buffers = buffers.lock().take().expect("assembled once");
                let results = results.iter().map(taken_once);
                self.core
                    .in_place(schema, units, buffers, results, &self.rows)?
            }
            Target::Samples(samples) => {
                let map = self.core.map.as_deref().expect("an instance map");
                self.core
                    .as_instances(map, samples.iter().map(taken_once), &self.rows)?
            }
        };
        let batch = match &self.core.batch_map {
            Some(f) => apply_batch_map(f, batch)?,
            None => batch,
        };
        Ok(Transformed {
            batch,
            failed,
            busy,
        })
    }
}

impl BatchTransformer {
    /// The transformer of `transforms` for rows of `input`, drawing
    /// per-instance RNGs from `seed`; `None` if there is neither an
    /// instance map nor a batch map.
    pub fn new(transforms: &Transforms, input: &Schema, seed: u64) -> Result<Option<Self>> {
        Self::made(transforms, input, seed, transforms.workers, None)
    }

    /// As [`new`](Self::new), with a pool of `threads` workers of which at
    /// most `gate`'s limit run rows at once (`transforms.workers` is then
    /// not read): the workers an autotuner changes while batches are made.
    pub fn gated(
        transforms: &Transforms,
        input: &Schema,
        seed: u64,
        threads: usize,
        gate: Arc<WorkerGate>,
    ) -> Result<Option<Self>> {
        Self::made(transforms, input, seed, threads, Some(gate))
    }

    fn made(
        transforms: &Transforms,
        input: &Schema,
        seed: u64,
        threads: usize,
        gate: Option<Arc<WorkerGate>>,
    ) -> Result<Option<Self>> {
        if transforms.instance.is_none() && transforms.batch.is_none() {
            return Ok(None);
        }
        if threads == 0 {
            return Err(Error::Config("transform workers: at least 1".into()));
        }
        let declared = (transforms.output_schema.clone()).or_else(|| {
            transforms
                .instance
                .as_ref()
                .and_then(|m| m.output_schema(input))
        });
        let pool = match &transforms.instance {
            Some(_) => Some(Workers::new(threads, "feedline-transform")?),
            None => None,
        };
        Ok(Some(BatchTransformer {
            core: Arc::new(Core {
                map: transforms.instance.clone(),
                batch_map: transforms.batch.clone(),
                seed,
                input: input.clone(),
                output: RwLock::new(
                    declared.or_else(|| transforms.instance.is_none().then(|| input.clone())),
                ),
                inferred_from: RwLock::new(None),
                stopping: AtomicBool::new(false),
                gate,
            }),
            pool,
            in_flight: Arc::default(),
        }))
    }

    /// The schema of the batches: declared, or inferred once an instance has
    /// transformed (`None` before).
    pub fn output_schema(&self) -> Option<Schema> {
        self.core.output_schema()
    }

    /// The transform workers (0 without an instance map: batches are then
    /// made on the caller's thread).
    pub fn workers(&self) -> usize {
        self.pool
            .as_ref()
            .map_or(0, |w| w.pool().current_num_threads())
    }

    /// The workers that may run rows at once: the gate's limit, else
    /// [`workers`](Self::workers).
    pub fn worker_limit(&self) -> usize {
        match &self.core.gate {
            Some(g) => g.limit().min(self.workers()),
            None => self.workers(),
        }
    }

    /// Make the batch of `rows` (drawn in pass `pass`) while the caller
    /// waits (from outside the workers).
    ///
    /// # Errors
    ///
    /// Failed rows are in [`Transformed::failed`]; an `Err` is a failure of
    /// the batch as a whole: collating it, the batch map, or a batch whose
    /// every row failed before any output schema was known.
    pub fn run(&self, rows: &[RowRef], pass: u64) -> Result<Transformed> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.spawn(rows.to_vec(), pass, move |made| {
            let _ = tx.send(made);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(Error::Schema("the batch was dropped unmade".into())))
    }

    /// Make the batch of `rows` on the workers without waiting for it:
    /// `done` gets what [`run`](Self::run) would return, on the worker that
    /// finished the batch's last row (on this thread, without an instance
    /// map). Each row is a task of its own, the oldest batch's first, so
    /// batches handed over one after the other are made side by side.
    pub fn spawn(
        &self,
        rows: Vec<RowRef>,
        pass: u64,
        done: impl FnOnce(Result<Transformed>) + Send + 'static,
    ) {
        let Some(workers) = &self.pool else {
            return done(self.core.make_here(&rows));
        };
        let (core, in_flight) = (self.core.clone(), self.in_flight.clone());
        in_flight.begin();
        workers
            .pool()
            .spawn_fifo(move || Assembly::start(core, rows, pass, Box::new(done), in_flight));
    }
}

impl Drop for BatchTransformer {
    /// Stop the batches in flight (rows not yet started fail fast) and wait
    /// for them, then for the workers ([`Workers`]' own drop).
    fn drop(&mut self) {
        self.core.stopping.store(true, Ordering::Relaxed);
        if !self.in_flight.wait_none(Instant::now() + STOP_GRACE) {
            log::warn!(
                "batches still being made {STOP_GRACE:?} after the pipeline stopped; their workers are left to end by themselves"
            );
        }
    }
}

impl Core {
    /// The batch of `rows` here and now: collated, then the batch map
    /// (a transformer without an instance map).
    fn make_here(&self, rows: &[RowRef]) -> Result<Transformed> {
        let batch = collate_rows(&self.input, rows)?;
        let batch = match &self.batch_map {
            Some(f) => apply_batch_map(f, batch)?,
            None => batch,
        };
        Ok(Transformed {
            batch,
            failed: Vec::new(),
            busy: Duration::ZERO,
        })
    }

    fn output_schema(&self) -> Option<Schema> {
        self.output.read().clone()
    }

    /// The pipeline stopped: `origin`'s row is not transformed.
    fn stopped(&self, origin: Origin) -> Result<()> {
        if !self.stopping.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(Error::Transform {
            location: origin.location(),
            transform: "making the batch".into(),
            what: "the pipeline stopped".into(),
        })
    }

    /// The batch of the rows written into `buffers` (`results`: each row's
    /// outcome, in order): the failed rows' places closed up.
    fn in_place(
        &self,
        schema: &Schema,
        units: &[usize],
        mut buffers: Vec<Buffer>,
        results: impl Iterator<Item = Result<()>>,
        rows: &[RowRef],
    ) -> Result<(Batch, Vec<Error>)> {
        let n = rows.len();
        let mut failed = Vec::new();
        let mut keep = Vec::with_capacity(n);
        for (i, r) in results.enumerate() {
            match r {
                Ok(()) => keep.push(i),
                Err(e) => failed.push(e),
            }
        }
        if keep.len() < n {
            for (b, &u) in buffers.iter_mut().zip(units) {
                b.keep_rows(&keep, u);
            }
        }
        let fields = (buffers.into_iter().zip(schema.fields()))
            .map(|(b, f)| {
                let shape = std::iter::once(keep.len()).chain(f.fixed_dims()).collect();
                Ok(BatchField {
                    data: b.into_array(shape)?,
                    offsets: None,
                    lengths: None,
                })
            })
            .collect::<Result<_>>()?;
        let origins = keep.iter().map(|&i| rows[i].origin()).collect();
        Ok((Batch::from_parts(schema, fields, origins)?, failed))
    }

    /// One row into its slots: the map's own fast path, or its owned output
    /// checked and copied.
    fn one_into(
        &self,
        map: &dyn InstanceMap,
        name: &str,
        r: &RowRef,
        pass: u64,
        out: &mut OutRow<'_>,
        schema: &Schema,
    ) -> Result<()> {
        let origin = r.origin();
        self.stopped(origin)?;
        let row = Row::new(&r.chunk, r.index);
        let mut ctx = TransformCtx::new(self.seed, pass, origin);
        let direct = guarded(name, origin, || {
            map.map_into(&row, &mut ctx, out).transpose()
        })?;
        if direct.is_some() {
            if let Some(field) = out.unwritten() {
                return Err(Error::Transform {
                    location: origin.location(),
                    transform: name.to_string(),
                    what: format!("output field `{field}` was not written"),
                });
            }
            return Ok(());
        }
        let sample = guarded(name, origin, || map.map(&row, &mut ctx))?;
        let inst = conform(sample, origin, schema).map_err(|e| self.explained(e))?;
        for (f, v) in schema.fields().iter().zip(inst.values()) {
            let slot = out.slot(&f.name).expect("a slot per output field");
            slot.copy_from(v, 0..v.len()).map_err(|actual| {
                self.explained(Error::Field {
                    location: origin.location(),
                    field: f.name.clone(),
                    expected: f.describe(),
                    actual,
                })
            })?;
        }
        Ok(())
    }

    /// One row's output as owned values.
    fn sample(&self, map: &dyn InstanceMap, name: &str, r: &RowRef, pass: u64) -> Result<Sample> {
        let origin = r.origin();
        self.stopped(origin)?;
        let row = Row::new(&r.chunk, r.index);
        let mut ctx = TransformCtx::new(self.seed, pass, origin);
        guarded(name, origin, || map.map(&row, &mut ctx))
    }

    /// The batch of the rows' owned outputs (`samples`, in order), each
    /// checked against the output schema (inferred from the first if none
    /// is known), and collated.
    fn as_instances(
        &self,
        map: &dyn InstanceMap,
        samples: impl Iterator<Item = Result<Sample>>,
        rows: &[RowRef],
    ) -> Result<(Batch, Vec<Error>)> {
        let mut failed = Vec::new();
        let mut kept = Vec::with_capacity(rows.len());
        for (r, s) in rows.iter().zip(samples) {
            let origin = r.origin();
            let checked = s.and_then(|sample| {
                let schema = self.schema_for(&sample, r)?;
                conform(sample, origin, &schema).map_err(|e| self.explained(e))
            });
            match checked {
                Ok(inst) => kept.push(inst),
                Err(e) => failed.push(e),
            }
        }
        // No row transformed yet: the map may know its output schema now
        // (an image map has seen which fields hold images, even in rows
        // that failed to decode), and the batch is made without rows.
        let known = self.output_schema().or_else(|| {
            let late = map.output_schema(&self.input)?;
            Some(self.output.write().get_or_insert(late).clone())
        });
        let Some(schema) = known else {
            return Err(Error::Schema(format!(
                "every instance of the first batch failed its transform ({} of them), so no output schema could be inferred: declare one; the first failure: {}",
                failed.len(),
                failed.first().map_or_else(String::new, |e| e.to_string())
            )));
        };
        let mut chunk = Chunk::with_capacity(&schema, kept.len());
        for inst in &kept {
            chunk.push_instance(inst);
        }
        Ok((collate_chunks(&schema, [&chunk])?, failed))
    }

    /// The output schema, inferred from `sample` (the output of row `r`) if
    /// none is known yet; a ragged input field the map passed through keeps
    /// its input's spec ([`keep_ragged_inputs`]).
    fn schema_for(&self, sample: &Sample, r: &RowRef) -> Result<Schema> {
        if let Some(s) = self.output.read().as_ref() {
            return Ok(s.clone());
        }
        let origin = r.origin();
        let record = sample.clone().into_record(origin.location());
        let inferred = Schema::infer([&record]).map_err(|e| Error::Transform {
            location: origin.location(),
            transform: "output schema".into(),
            what: e.to_string(),
        })?;
        let inferred =
            keep_ragged_inputs(inferred, &self.input, sample, &Row::new(&r.chunk, r.index));
        log::debug!(
            "transform output schema inferred from {}: {inferred}",
            origin.location()
        );
        let mut output = self.output.write();
        if output.is_none() {
            *self.inferred_from.write() = Some(origin.location().to_string());
        }
        Ok(output.get_or_insert(inferred).clone())
    }

    /// A row's failure; when it is a shape that does not fit an *inferred*
    /// output schema, said so, with what to do about it.
    fn explained(&self, e: Error) -> Error {
        let Some(from) = self.inferred_from.read().clone() else {
            return e;
        };
        match e {
            Error::Field {
                location,
                field,
                expected,
                actual,
            } => Error::Field {
                location,
                field,
                expected,
                actual: format!(
                    "{actual} — the expected shape was inferred from the first transformed instance ({from}); outputs of different shapes (e.g. `decode` of images of different sizes) cannot share a batch: resize or crop them to one shape (e.g. `decode,resize(256),center-crop(224)`), or, if only their first dimension differs, declare the output schema with that dimension variable"
                ),
            },
            e => e,
        }
    }
}

/// The schema inferred from one output, with each field that the input
/// declares ragged and that the map passed through — the same name, dtype,
/// trailing dims and values as in its input row — given the input's spec:
/// one row's length says nothing of the next's (a `decode` of the image
/// fields leaves a variable-length list field as it came). A field the map
/// changed keeps the shape inferred from its output.
fn keep_ragged_inputs(inferred: Schema, input: &Schema, sample: &Sample, row: &Row<'_>) -> Schema {
    let passed_through = |out: &Field, given: &Field| {
        given.is_ragged()
            && given.dtype == out.dtype
            && sample.get(&out.name).is_some_and(|t| {
                t.shape.len() == given.shape.len()
                    && t.shape.get(1..) == Some(&given.fixed_dims()[..])
                    && row.values(&out.name).is_ok_and(|v| v == t.values)
            })
    };
    let fields: Vec<Field> = (inferred.fields().iter())
        .map(|out| match input.field(&out.name) {
            Ok(given) if passed_through(out, given) => given.clone(),
            _ => out.clone(),
        })
        .collect();
    if fields.as_slice() == inferred.fields() {
        return inferred;
    }
    match (Schema::new(fields), inferred.inferred_source()) {
        (Ok(kept), Some(from)) => kept.inferred_from(from.to_string()),
        (Ok(kept), None) => kept,
        (Err(_), _) => inferred,
    }
}
