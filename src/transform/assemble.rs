//! [`BatchTransformer`]: makes a batch from drawn rows through the instance
//! map, on a pool of transform workers of its own, then the batch map.
//!
//! - Each row's map gets its [`TransformCtx`] (RNG from seed, pass, source
//!   name and record), so the output does not depend on which worker runs it.
//! - The output schema is declared (the settings', else the map's own) or
//!   inferred from the first instance that transforms, and every instance is
//!   checked against it ([`Instance::from_record`]: a missing field, another
//!   type or shape is an error naming the instance's file, record and field,
//!   the expected and the actual).
//! - When every output field has a fixed shape, the batch's buffers are
//!   allocated first and each worker writes its rows straight into them
//!   ([`InstanceMap::map_into`], or a copy of [`InstanceMap::map`]'s output);
//!   otherwise the outputs are collated as instances.
//! - An error or a panic in the map is that row's failure, with its
//!   provenance; the batch holds the other rows, in order (the failed rows'
//!   places closed up). The caller's error policy decides what a failure does.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::RwLock;
use rayon::prelude::*;

use super::workers::Workers;
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
use crate::schema::{DType, Schema};

/// A batch made through the transforms, and the rows that failed.
#[derive(Debug)]
pub struct Transformed {
    /// The rows that transformed, in their order.
    pub batch: Batch,
    /// Each failed row's error (with its provenance), in batch order.
    pub failed: Vec<Error>,
}

/// The instance map on its worker pool, the output schema, the batch map.
pub struct BatchTransformer {
    map: Option<Arc<dyn InstanceMap>>,
    batch_map: Option<BatchMap>,
    pool: Option<Workers>,
    seed: u64,
    input: Schema,
    output: RwLock<Option<Schema>>,
    /// Where the output schema was inferred from (`None`: declared, or not
    /// known yet).
    inferred_from: RwLock<Option<String>>,
}

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

    /// The buffer cut into `rows` slots of `unit` elements.
    fn slots(&mut self, rows: usize, unit: usize) -> Vec<SlotMut<'_>> {
        fn cut<'a, T>(
            v: &'a mut [T],
            rows: usize,
            unit: usize,
            f: fn(&'a mut [T]) -> SlotMut<'a>,
        ) -> Vec<SlotMut<'a>> {
            if unit == 0 {
                return (0..rows).map(|_| f(&mut [])).collect();
            }
            v.chunks_exact_mut(unit).map(f).collect()
        }
        match self {
            Buffer::F32(v) => cut(v.as_mut_slice(), rows, unit, SlotMut::F32),
            Buffer::F64(v) => cut(v.as_mut_slice(), rows, unit, SlotMut::F64),
            Buffer::I64(v) => cut(v.as_mut_slice(), rows, unit, SlotMut::I64),
            Buffer::I32(v) => cut(v.as_mut_slice(), rows, unit, SlotMut::I32),
            Buffer::U8(v) => cut(v.as_mut_slice(), rows, unit, SlotMut::U8),
            Buffer::Bool(v) => cut(v.as_mut_slice(), rows, unit, SlotMut::Bool),
        }
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

/// True if every field has a fixed shape and is not `bytes`: the batch's
/// buffers can be made before any row is transformed.
fn all_fixed(schema: &Schema) -> bool {
    schema
        .fields()
        .iter()
        .all(|f| !f.is_ragged() && f.dtype != DType::Bytes)
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

impl BatchTransformer {
    /// The transformer of `transforms` for rows of `input`, drawing
    /// per-instance RNGs from `seed`; `None` if there is neither an
    /// instance map nor a batch map.
    pub fn new(transforms: &Transforms, input: &Schema, seed: u64) -> Result<Option<Self>> {
        if transforms.instance.is_none() && transforms.batch.is_none() {
            return Ok(None);
        }
        if transforms.workers == 0 {
            return Err(Error::Config("transform workers: at least 1".into()));
        }
        let declared = (transforms.output_schema.clone()).or_else(|| {
            transforms
                .instance
                .as_ref()
                .and_then(|m| m.output_schema(input))
        });
        let pool = match &transforms.instance {
            Some(_) => Some(Workers::new(transforms.workers, "feedline-transform")?),
            None => None,
        };
        Ok(Some(BatchTransformer {
            map: transforms.instance.clone(),
            batch_map: transforms.batch.clone(),
            pool,
            seed,
            input: input.clone(),
            output: RwLock::new(
                declared.or_else(|| transforms.instance.is_none().then(|| input.clone())),
            ),
            inferred_from: RwLock::new(None),
        }))
    }

    /// The schema of the batches: declared, or inferred once an instance has
    /// transformed (`None` before).
    pub fn output_schema(&self) -> Option<Schema> {
        self.output.read().clone()
    }

    /// Make the batch of `rows` (drawn in pass `pass`).
    ///
    /// # Errors
    ///
    /// Failed rows are in [`Transformed::failed`]; an `Err` is a failure of
    /// the batch as a whole: collating it, the batch map, or a batch whose
    /// every row failed before any output schema was known.
    pub fn run(&self, rows: &[RowRef], pass: u64) -> Result<Transformed> {
        let Transformed { batch, failed } = match (&self.map, &self.pool) {
            (Some(map), Some(workers)) => {
                self.transform(map.as_ref(), workers.pool(), rows, pass)?
            }
            _ => Transformed {
                batch: collate_rows(&self.input, rows)?,
                failed: Vec::new(),
            },
        };
        let batch = match &self.batch_map {
            Some(f) => apply_batch_map(f, batch)?,
            None => batch,
        };
        Ok(Transformed { batch, failed })
    }

    fn transform(
        &self,
        map: &dyn InstanceMap,
        pool: &rayon::ThreadPool,
        rows: &[RowRef],
        pass: u64,
    ) -> Result<Transformed> {
        match self.output_schema() {
            Some(schema) if all_fixed(&schema) => self.in_place(map, pool, rows, pass, &schema),
            _ => self.as_instances(map, pool, rows, pass),
        }
    }

    /// Every row written straight into the batch's buffers.
    fn in_place(
        &self,
        map: &dyn InstanceMap,
        pool: &rayon::ThreadPool,
        rows: &[RowRef],
        pass: u64,
        schema: &Schema,
    ) -> Result<Transformed> {
        let n = rows.len();
        let units: Vec<usize> = schema.fields().iter().map(|f| f.unit_elements()).collect();
        let mut buffers: Vec<Buffer> = (schema.fields().iter().zip(&units))
            .map(|(f, &u)| Buffer::new(f.dtype, n * u))
            .collect();
        let results: Vec<Result<()>> = {
            let mut per_field: Vec<std::vec::IntoIter<SlotMut<'_>>> =
                (buffers.iter_mut().zip(&units))
                    .map(|(b, &u)| b.slots(n, u).into_iter())
                    .collect();
            let out_rows: Vec<OutRow<'_>> = (0..n)
                .map(|_| {
                    OutRow::new(
                        schema,
                        per_field
                            .iter_mut()
                            .map(|s| s.next().expect("a slot per row"))
                            .collect(),
                    )
                })
                .collect();
            let name = map.name();
            pool.install(|| {
                (rows.par_iter().zip(out_rows.into_par_iter()))
                    .map(|(r, mut out)| self.one_into(map, &name, r, pass, &mut out, schema))
                    .collect()
            })
        };
        let mut failed = Vec::new();
        let mut keep = Vec::with_capacity(n);
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => keep.push(i),
                Err(e) => failed.push(e),
            }
        }
        if keep.len() < n {
            for (b, &u) in buffers.iter_mut().zip(&units) {
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
        Ok(Transformed {
            batch: Batch::from_parts(schema, fields, origins)?,
            failed,
        })
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

    /// Every row mapped to owned values, checked, and collated.
    fn as_instances(
        &self,
        map: &dyn InstanceMap,
        pool: &rayon::ThreadPool,
        rows: &[RowRef],
        pass: u64,
    ) -> Result<Transformed> {
        let name = map.name();
        let samples: Vec<Result<Sample>> = pool.install(|| {
            rows.par_iter()
                .map(|r| {
                    let origin = r.origin();
                    let row = Row::new(&r.chunk, r.index);
                    let mut ctx = TransformCtx::new(self.seed, pass, origin);
                    guarded(&name, origin, || map.map(&row, &mut ctx))
                })
                .collect()
        });
        let mut failed = Vec::new();
        let mut kept = Vec::with_capacity(rows.len());
        for (r, s) in rows.iter().zip(samples) {
            let origin = r.origin();
            let checked = s.and_then(|sample| {
                let schema = self.schema_for(&sample, origin)?;
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
        Ok(Transformed {
            batch: collate_chunks(&schema, [&chunk])?,
            failed,
        })
    }

    /// The output schema, inferred from `sample` if none is known yet.
    fn schema_for(&self, sample: &Sample, origin: Origin) -> Result<Schema> {
        if let Some(s) = self.output.read().as_ref() {
            return Ok(s.clone());
        }
        let record = sample.clone().into_record(origin.location());
        let inferred = Schema::infer([&record]).map_err(|e| Error::Transform {
            location: origin.location(),
            transform: "output schema".into(),
            what: e.to_string(),
        })?;
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
