//! Transforms: user work on each instance inside the pipeline — decode,
//! augment, tokenize, drop or fix a record — with randomness that does not
//! depend on scheduling.
//!
//! Three places take user code:
//!
//! | where | what | type |
//! |---|---|---|
//! | on the readers, before the shuffle | keep or drop a record, fix it (same schema) | [`RecordStage`] |
//! | after the shuffle draw, before collation, on a pool of transform workers | map an instance to new fields (bytes in, `f32 [3, 224, 224]` out) | [`InstanceMap`] |
//! | after collation | map a whole batch | [`BatchMap`] |
//!
//! The instance map's output schema is declared ([`InstanceMap::output_schema`]
//! or [`Transforms::output_schema`]) or inferred from the first transformed
//! instance, then checked on every one: an instance that does not fit is a
//! bad record naming its file, record, field, the expected and the actual
//! shape. An error or a panic in user code is a bad record too
//! ([`Error::Transform`](crate::Error::Transform), with the instance's
//! provenance); the caller's error policy decides whether it fails the pass
//! or is skipped and counted.
//!
//! **A skipped row's batch** is one row shorter (the rows after it move up;
//! the batch keeps its number and its lane); a batch whose every row is
//! skipped is delivered with no rows, so that batch numbers stay dense —
//! once the output schema is known: when it is inferred, every row of the
//! first batch fails and the map cannot tell its output schema from those
//! rows either ([`InstanceMap::output_schema`], asked again), there is no
//! schema to make that batch with, and the pass fails saying so (declare
//! the output schema to skip such rows).
//!
//! Each instance's transform gets an RNG seeded from (seed, pass, source
//! *name*, record) ([`instance_rng`]): the same instance is augmented the same
//! way whatever the reader count, the worker count and the timing.
//!
//! | module | owns |
//! |---|---|
//! | `seed` | the per-instance seed and RNG |
//! | `row` | [`Row`]: the input instance as the map sees it, without a copy |
//! | `slots` | [`OutRow`]: an output row written straight into the batch's buffers |
//! | `assemble` | [`BatchTransformer`]: the worker pool, the schema check, the batch |
//! | `records` | the reader-side record filter / map applied to a chunk |

mod assemble;
mod records;
mod row;
mod seed;
mod slots;
mod workers;

use std::fmt;
use std::sync::Arc;

pub use assemble::{BatchTransformer, Transformed};
pub use records::{RecordStage, StagedChunk};
pub use row::Row;
pub use seed::{instance_rng, instance_seed, InstanceRng};
pub use slots::{OutRow, SlotMut};
pub use workers::WorkerGate;

use crate::batch::Batch;
use crate::format::generator::Sample;
use crate::provenance::Origin;
use crate::record::Instance;
use crate::schema::Schema;

/// An error from user code, as it is given back.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What an instance's transform knows besides the instance: where it came
/// from, the pass, and its own RNG (seeded from seed, pass, source name and
/// record — see [`instance_rng`]).
pub struct TransformCtx {
    /// The instance's source and record.
    pub origin: Origin,
    /// The pass (epoch).
    pub pass: u64,
    rng: InstanceRng,
}

impl TransformCtx {
    /// The context of `origin` in `pass` of a pipeline seeded with `seed`.
    pub fn new(seed: u64, pass: u64, origin: Origin) -> Self {
        TransformCtx {
            origin,
            pass,
            rng: instance_rng(seed, pass, &origin.source.name(), origin.record),
        }
    }

    /// This instance's RNG: the same numbers on every run, whatever the
    /// scheduling.
    pub fn rng(&mut self) -> &mut InstanceRng {
        &mut self.rng
    }
}

/// A per-instance map, run on the transform workers after the shuffle draw.
///
/// [`map`](Self::map) is required; [`map_into`](Self::map_into) is the fast
/// path that writes a fixed-shape output straight into its row of the
/// batch (no intermediate copy). Closures become maps with [`map_fn`].
pub trait InstanceMap: Send + Sync {
    /// The output instance as owned values (the schema is inferred from the
    /// first one when not declared).
    fn map(&self, row: &Row<'_>, ctx: &mut TransformCtx) -> Result<Sample, BoxError>;

    /// Write the output into `out` (every field of the output schema), if
    /// this map can; `None` means: use [`map`](Self::map).
    fn map_into(
        &self,
        _row: &Row<'_>,
        _ctx: &mut TransformCtx,
        _out: &mut OutRow<'_>,
    ) -> Option<Result<(), BoxError>> {
        None
    }

    /// The output schema for this input schema, if it is known before any
    /// instance is seen.
    fn output_schema(&self, _input: &Schema) -> Option<Schema> {
        None
    }

    /// A short name for logs, statistics, errors and checkpoints. A
    /// checkpoint records the map's name and [`version`](Self::version);
    /// resuming under a map of another name or version is refused. The
    /// built-in image transforms give their spec as the user wrote it (a
    /// preset's name, or the chain).
    fn name(&self) -> String {
        "map".into()
    }

    /// The most memory, in bytes, one call of [`map`](Self::map) or
    /// [`map_into`](Self::map_into) may hold besides its input row and the
    /// batch row it writes — decode buffers, scratch kept by the worker
    /// thread from call to call, an output it makes itself — whatever the
    /// instance (by the limits the map enforces). The pipeline counts it
    /// once per transform worker in its memory bound
    /// (`PipelineConfig::in_flight_bound_bytes` in `feedline-actors`). 0 by
    /// default: a map that holds more must say so to keep the bound true.
    fn working_memory_bytes(&self) -> usize {
        0
    }

    /// The version of the map's outputs, as its author declares it (none
    /// by default). This is how to say "same map" across a resume: a map
    /// changed without changing its outputs (a refactor, a faster path)
    /// keeps its name and version; one whose outputs change gets a new
    /// version, and a checkpoint taken under the old one is refused.
    fn version(&self) -> Option<String> {
        None
    }
}

/// A closure as an [`InstanceMap`]: `f(instance, ctx)` returns the output
/// [`Sample`] (or an error: a bad record).
///
/// ```
/// use feedline::format::generator::Sample;
/// use feedline::transform::{map_fn, InstanceMap};
/// use feedline::Values;
/// let double = map_fn(|inst: feedline::Instance, _ctx: &mut feedline::transform::TransformCtx| {
///     let x = inst.get("x")?.as_f32().ok_or("x is not f32")?.to_vec();
///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
///         Sample::new().with("x2", Values::F32(x.iter().map(|v| v * 2.0).collect()), [x.len()]),
///     )
/// });
/// assert_eq!(double.name(), "map");
/// ```
pub fn map_fn<F, E>(f: F) -> MapFn<F>
where
    F: Fn(Instance, &mut TransformCtx) -> Result<Sample, E> + Send + Sync,
    E: Into<BoxError>,
{
    MapFn {
        f,
        name: "map".into(),
        version: None,
    }
}

/// See [`map_fn`].
pub struct MapFn<F> {
    f: F,
    name: String,
    version: Option<String>,
}

impl<F> MapFn<F> {
    /// The map's name and version as checkpoints record them ([`InstanceMap::name`],
    /// [`InstanceMap::version`]; a closure is `map`, of no version, unless named).
    pub fn named(mut self, name: &str, version: &str) -> Self {
        self.name = name.to_string();
        self.version = Some(version.to_string());
        self
    }
}

impl<F, E> InstanceMap for MapFn<F>
where
    F: Fn(Instance, &mut TransformCtx) -> Result<Sample, E> + Send + Sync,
    E: Into<BoxError>,
{
    fn map(&self, row: &Row<'_>, ctx: &mut TransformCtx) -> Result<Sample, BoxError> {
        let inst = row.instance()?;
        (self.f)(inst, ctx).map_err(Into::into)
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn version(&self) -> Option<String> {
        self.version.clone()
    }
}

/// A per-batch map, after collation (on the stage that collates).
pub type BatchMap = Arc<dyn Fn(Batch) -> Result<Batch, BoxError> + Send + Sync>;

/// Every transform of a pipeline, as its settings hold them.
#[derive(Clone)]
pub struct Transforms {
    /// On the readers, before the shuffle.
    pub records: Option<RecordStage>,
    /// After the shuffle draw, on the transform workers.
    pub instance: Option<Arc<dyn InstanceMap>>,
    /// The instance map's output schema, declared (else the map's own, else inferred).
    pub output_schema: Option<Schema>,
    /// Transform workers (threads of their own); at least 1.
    pub workers: usize,
    /// After collation.
    pub batch: Option<BatchMap>,
    /// The version of this code (the record stage, the maps) as its author
    /// declares it: checkpoints record it, and a resume under another
    /// version is refused. Closures cannot be compared: keep the version
    /// to say "same transforms", change it when their outputs change.
    pub version: Option<String>,
}

/// Transform workers by default.
pub const DEFAULT_WORKERS: usize = 2;

impl Default for Transforms {
    fn default() -> Self {
        Transforms {
            records: None,
            instance: None,
            output_schema: None,
            workers: DEFAULT_WORKERS,
            batch: None,
            version: None,
        }
    }
}

impl Transforms {
    /// True if no transform is set.
    pub fn is_empty(&self) -> bool {
        self.records.is_none() && self.instance.is_none() && self.batch.is_none()
    }
}

impl fmt::Debug for Transforms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transforms")
            .field("records", &self.records.as_ref().map(|r| r.describe()))
            .field("instance", &self.instance.as_ref().map(|m| m.name()))
            .field("output_schema", &self.output_schema)
            .field("workers", &self.workers)
            .field("batch", &self.batch.is_some())
            .field("version", &self.version)
            .finish()
    }
}
