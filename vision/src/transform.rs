//! [`ImageTransform`]: a [`Plan`] as feedline's per-instance map
//! ([`InstanceMap`]), for the pipeline's transform workers and the
//! `--transform` flag: the image fields (encoded JPEG or PNG bytes) become
//! the plan's output under the same name; every other field passes through.
//!
//! With a plan of fixed output shape, each image is decoded, cropped,
//! resized, flipped and normalised by one fused pass straight into its row
//! of the batch ([`Plan::run_into`]); each worker thread keeps its own
//! [`Decoder`]. The plan's random draws come from the instance's RNG, so an
//! instance gets the same crop and flip whatever worker runs it.

use std::cell::RefCell;
use std::sync::OnceLock;

use feedline::format::generator::Sample;
use feedline::transform::{BoxError, InstanceMap, OutRow, Row, SlotMut, TransformCtx};
use feedline::{DType, Field, Schema, Tensor, Values};

use crate::decode::{sniff_format, Decoder, DEFAULT_MAX_PIXELS};
use crate::error::{StepError, VisionError};
use crate::jpeg::DEFAULT_MAX_SCANS;
use crate::output::Dtype;
use crate::transform_plan::{ImageArray, OutputShape, Plan};

thread_local! {
    /// Each worker thread's decoder (libjpeg's state and scratch buffers).
    static DECODER: RefCell<Decoder> = RefCell::new(Decoder::new());
}

/// Which fields hold encoded images.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageFields {
    /// These fields (each one byte string per instance).
    Named(Vec<String>),
    /// Every field of one byte string whose first instance's bytes are a
    /// JPEG or a PNG (decided on the first instance transformed).
    Detect,
}

/// A plan run on an instance's image fields.
///
/// ```
/// use feedline::transform::InstanceMap;
/// use feedline_vision::{ImageFields, ImageTransform};
/// let t = ImageTransform::parse("imagenet-train", ImageFields::Detect)
///     .unwrap()
///     .max_pixels(16_000_000);
/// assert_eq!(t.name(), "imagenet-train");
/// assert_eq!(t.max_pixels_limit(), 16_000_000);
/// assert_eq!(t.working_memory_bytes() as u64, t.plan().working_memory_bytes(16_000_000));
/// ```
pub struct ImageTransform {
    plan: Plan,
    name: String,
    fields: ImageFields,
    max_pixels: u64,
    max_scans: u32,
    detected: OnceLock<Vec<String>>,
}

impl ImageTransform {
    /// `plan` on `fields`, named by its spelled-out chain, with PIL's pixel
    /// limit and libjpeg-turbo's usual scan limit.
    pub fn new(plan: Plan, fields: ImageFields) -> Self {
        ImageTransform {
            name: plan.to_string(),
            plan,
            fields,
            max_pixels: DEFAULT_MAX_PIXELS,
            max_scans: DEFAULT_MAX_SCANS,
            detected: OnceLock::new(),
        }
    }

    /// The plan of a `--transform` spec (a preset or a chain) on `fields`,
    /// named by the spec as given (`imagenet-train`), so that errors and
    /// logs say what the user wrote.
    pub fn parse(spec: &str, fields: ImageFields) -> Result<Self, crate::SpecError> {
        let plan = Plan::parse(spec)?;
        Ok(ImageTransform {
            name: spec.trim().to_string(),
            ..ImageTransform::new(plan, fields)
        })
    }

    /// The same transform refusing images of more than `max_pixels`
    /// pixels (width × height from the header, before any buffer is
    /// made), and any output or intermediate image of more; the default is
    /// PIL's ([`DEFAULT_MAX_PIXELS`]). The limit bounds what each worker
    /// holds ([`InstanceMap::working_memory_bytes`]).
    pub fn max_pixels(mut self, max_pixels: u64) -> Self {
        self.max_pixels = max_pixels;
        self
    }

    /// The pixel limit in force.
    pub fn max_pixels_limit(&self) -> u64 {
        self.max_pixels
    }

    /// The same transform refusing JPEGs of more than `max_scans` scans (0:
    /// no limit; default [`DEFAULT_MAX_SCANS`]).
    pub fn max_scans(mut self, max_scans: u32) -> Self {
        self.max_scans = max_scans;
        self
    }

    /// The plan as a spelled-out chain (`decode,random-resized-crop(…),…`),
    /// whatever the name: the same for a preset and its chain.
    pub fn spec(&self) -> String {
        self.plan.to_string()
    }

    /// Runs `f` with this thread's decoder set to this transform's limits.
    fn with_decoder<T>(&self, f: impl FnOnce(&mut Decoder) -> T) -> T {
        DECODER.with(|d| {
            let d = &mut d.borrow_mut();
            d.set_max_pixels(self.max_pixels);
            d.set_max_scans(self.max_scans);
            f(d)
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The image fields, if known: named, or detected already (on the
    /// first instance transformed).
    pub fn image_fields(&self) -> Option<&[String]> {
        self.known_fields()
    }

    /// The image fields, if known (named, or detected already).
    fn known_fields(&self) -> Option<&[String]> {
        match &self.fields {
            ImageFields::Named(v) => Some(v),
            ImageFields::Detect => self.detected.get().map(Vec::as_slice),
        }
    }

    /// The image fields of `row`'s pipeline.
    fn fields_of(&self, row: &Row<'_>) -> Result<&[String], BoxError> {
        if let Some(f) = self.known_fields() {
            return Ok(f);
        }
        let mut found = Vec::new();
        for f in row.schema().fields() {
            if !matches!(f.dtype, DType::Bytes | DType::U8) {
                continue;
            }
            if let Ok(bytes) = row.bytes(&f.name) {
                if sniff_format(&bytes).is_ok() {
                    found.push(f.name.clone());
                }
            }
        }
        if found.is_empty() {
            return Err(format!(
                "no field holds a JPEG or PNG image (fields: {})",
                (row.schema().fields().iter())
                    .map(|f| format!("`{}` {}", f.name, f.describe()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        }
        Ok(self.detected.get_or_init(|| found))
    }

    fn output_dtype(&self) -> DType {
        match self.plan.dtype() {
            Dtype::U8 => DType::U8,
            Dtype::F32 => DType::F32,
        }
    }
}

/// A field's error, naming it.
fn in_field(name: &str, e: impl std::fmt::Display) -> BoxError {
    format!("field `{name}`: {e}").into()
}

impl InstanceMap for ImageTransform {
    /// The spec as the user gave it ([`ImageTransform::parse`]), else the
    /// plan's chain.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn working_memory_bytes(&self) -> usize {
        usize::try_from(self.plan.working_memory_bytes(self.max_pixels)).unwrap_or(usize::MAX)
    }

    fn output_schema(&self, input: &Schema) -> Option<Schema> {
        let OutputShape::Fixed(shape) = self.plan.shape() else {
            return None;
        };
        let images = self.known_fields()?;
        let fields = (input.fields().iter())
            .map(|f| {
                if images.contains(&f.name) {
                    Field::new(&f.name, self.output_dtype(), shape)
                } else {
                    f.clone()
                }
            })
            .collect();
        Schema::new(fields).ok()
    }

    fn map(&self, row: &Row<'_>, ctx: &mut TransformCtx) -> Result<Sample, BoxError> {
        let images = self.fields_of(row)?;
        let mut sample = Sample::new();
        for f in row.schema().fields() {
            if images.contains(&f.name) {
                let bytes = row.bytes(&f.name)?;
                let out = self
                    .with_decoder(|d| self.plan.run_steps(d, &bytes, ctx.rng()))
                    .map_err(|e| in_field(&f.name, e))?;
                let shape = out.shape().to_vec();
                let values = match out {
                    ImageArray::U8(a) => Values::U8(a.into_raw_vec_and_offset().0),
                    ImageArray::F32(a) => Values::F32(a.into_raw_vec_and_offset().0),
                };
                sample.insert(&f.name, Tensor { values, shape });
            } else {
                let values = row.values(&f.name)?;
                let shape = if f.is_ragged() {
                    let lead = values.len().checked_div(f.unit_elements()).unwrap_or(0);
                    std::iter::once(lead).chain(f.fixed_dims()).collect()
                } else {
                    f.fixed_dims()
                };
                sample.insert(&f.name, Tensor { values, shape });
            }
        }
        Ok(sample)
    }

    fn map_into(
        &self,
        row: &Row<'_>,
        ctx: &mut TransformCtx,
        out: &mut OutRow<'_>,
    ) -> Option<Result<(), BoxError>> {
        if !matches!(self.plan.shape(), OutputShape::Fixed(_)) {
            return None;
        }
        Some((|| {
            let images = self.fields_of(row)?;
            let names: Vec<String> = out
                .schema()
                .fields()
                .iter()
                .map(|f| f.name.clone())
                .collect();
            for name in &names {
                let slot = out
                    .slot(name)
                    .ok_or_else(|| in_field(name, "not in the output schema"))?;
                if images.contains(name) {
                    let bytes = row.bytes(name)?;
                    self.with_decoder(|d| match slot {
                        SlotMut::F32(s) => self.plan.run_into_steps(d, &bytes, ctx.rng(), s),
                        SlotMut::U8(s) => self.plan.run_into_steps(d, &bytes, ctx.rng(), s),
                        other => Err(StepError {
                            step: "output".into(),
                            error: VisionError::OutputDtype {
                                plan: self.plan.dtype().name(),
                                buffer: other.dtype().name(),
                            },
                        }),
                    })
                    .map_err(|e| in_field(name, e))?;
                } else {
                    row.copy_into(name, slot)?;
                }
            }
            Ok(())
        })())
    }
}
