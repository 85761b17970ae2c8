//! A parsed transform spec: the geometric steps, the output dtype, layout
//! and normalisation; what it produces (dtype and shape); and how it runs on
//! one field's bytes with the caller's RNG. The spec language that makes a
//! plan ([`Plan::parse`]) is [`crate::spec`], above this file.
//!
//! Running composes the geometric steps into as few resamplings as
//! possible: crops only narrow the region the resize reads, a centre crop
//! after a resize narrows its source box, a flip anywhere is applied as the
//! last write (boxes drawn after it are mirrored back), so `decode,
//! random-resized-crop, flip, normalize, chw` is one call of the fused
//! kernel ([`crate::fused`]) that decodes only the crop. A second resampling
//! (a resize or random-resized-crop after a resize) first materialises the
//! pending one as a `u8` image. Against the literal step-by-step chain, the
//! composed geometry is exact for crop → resize → flip (the ImageNet
//! training chain); moving a flip past a resize or a centre crop into a
//! resize's box can change a value by ±1 where PIL's floating-point filter
//! centres round differently (tested bounds in `tests/transform_plan.rs`).

use ndarray::Array3;
use rand::Rng;

use crate::decode::Decoder;
use crate::error::{Result, StepError, VisionError};
use crate::fused::{crop_resize_into, CropResize, KernelSource};
use crate::image::RgbImage;
use crate::jpeg::ReducedWork;
use crate::ops::{center_crop, center_offset, CropBox, ResizeTo};
use crate::output::{check_output_len, Dtype, Element, Layout, Normalize, OutputFormat};
use crate::resize::SourceBox;
use crate::rrc::RandomResizedCrop;

/// One geometric step of a plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GeomOp {
    /// torchvision `RandomResizedCrop((height, width), scale, ratio)`.
    RandomResizedCrop {
        /// Output rows.
        height: usize,
        /// Output columns.
        width: usize,
        /// Box sampling.
        params: RandomResizedCrop,
    },
    /// torchvision `Resize` (antialiased bilinear).
    Resize(ResizeTo),
    /// torchvision `CenterCrop((height, width))`.
    CenterCrop {
        /// Rows.
        height: usize,
        /// Columns.
        width: usize,
    },
    /// torchvision `RandomHorizontalFlip(p)`.
    Flip {
        /// Probability of a flip.
        p: f64,
    },
}

/// The shape of a plan's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputShape {
    /// The same for every image.
    Fixed([usize; 3]),
    /// Depends on the image: `[H, W, 3]` or `[3, H, W]` (the layout).
    Variable(Layout),
}

/// An owned output array of either dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageArray {
    /// `u8` values.
    U8(Array3<u8>),
    /// `f32` values.
    F32(Array3<f32>),
}

impl ImageArray {
    /// The array's shape.
    pub fn shape(&self) -> [usize; 3] {
        let s = match self {
            ImageArray::U8(a) => a.shape(),
            ImageArray::F32(a) => a.shape(),
        };
        [s[0], s[1], s[2]]
    }
}

/// A transform plan: what `--transform SPEC` asks for.
///
/// ```
/// use feedline_vision::{Decoder, ImageArray, Plan, RgbImage};
/// use rand::SeedableRng;
/// # fn main() -> Result<(), feedline_vision::VisionError> {
/// let plan = Plan::parse("imagenet-train")?;
/// assert_eq!(plan.to_string(), "decode,random-resized-crop(224x224,scale=0.08:1,ratio=0.75:1.3333333333333333),flip(0.5),normalize(mean=0.485:0.456:0.406,std=0.229:0.224:0.225),chw");
/// let image = RgbImage::from_pixels(300, 260, vec![128; 300 * 260 * 3])?;
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
/// let mut out = vec![0f32; 3 * 224 * 224];
/// plan.run_image_into(&mut Decoder::new(), &image, &mut rng, &mut out)?;
/// assert!((out[0] - (128.0 / 255.0 - 0.485) / 0.229).abs() < 1e-6);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    geometry: Vec<GeomOp>,
    dtype: Dtype,
    format: OutputFormat,
    work: ReducedWork,
}

/// The geometry not yet applied, relative to the current base image.
#[derive(Clone, Copy, Debug)]
struct Pending {
    crop: CropBox,
    source: SourceBox,
    out_width: usize,
    out_height: usize,
    resized: bool,
    flip: bool,
}

impl Pending {
    fn identity(width: usize, height: usize) -> Self {
        Pending {
            crop: CropBox {
                top: 0,
                left: 0,
                height,
                width,
            },
            source: SourceBox::whole(width, height),
            out_width: width,
            out_height: height,
            resized: false,
            flip: false,
        }
    }

    fn is_identity(&self, width: usize, height: usize) -> bool {
        !self.resized && !self.flip && self.crop.width == width && self.crop.height == height
    }

    fn geometry(&self) -> CropResize {
        CropResize {
            crop: self.crop,
            source: self.source,
            out_width: self.out_width,
            out_height: self.out_height,
            flip: self.flip,
        }
    }

    /// Narrows the pending image to the window `b` of its output (in the
    /// output's, possibly flipped, coordinates).
    fn window(&mut self, b: CropBox) {
        let left = if self.flip {
            self.out_width - b.left - b.width
        } else {
            b.left
        };
        if self.resized {
            let sx = self.source.width() / self.out_width as f64;
            let sy = self.source.height() / self.out_height as f64;
            let (x0, y0) = (self.source.x0, self.source.y0);
            self.source = SourceBox {
                x0: x0 + left as f64 * sx,
                x1: x0 + (left + b.width) as f64 * sx,
                y0: y0 + b.top as f64 * sy,
                y1: y0 + (b.top + b.height) as f64 * sy,
            };
        } else {
            self.crop = CropBox {
                top: self.crop.top + b.top,
                left: self.crop.left + left,
                height: b.height,
                width: b.width,
            };
            self.source = SourceBox::whole(b.width, b.height);
        }
        self.out_width = b.width;
        self.out_height = b.height;
    }
}

/// What one geometric step needs before it can be composed.
enum Step {
    /// Composed into the pending geometry.
    Done,
    /// The pending resampling must be materialised first.
    Materialize,
    /// Replace the base with this image (a padded centre crop).
    Replace(RgbImage),
}

impl Plan {
    pub(crate) fn new(
        geometry: Vec<GeomOp>,
        float: bool,
        normalize: Option<Normalize>,
        layout: Layout,
    ) -> Plan {
        Plan {
            geometry,
            dtype: if float { Dtype::F32 } else { Dtype::U8 },
            format: OutputFormat { normalize, layout },
            work: ReducedWork::ALL,
        }
    }

    /// The same plan with other reduced-work settings (all on by default).
    pub fn with_reduced_work(mut self, work: ReducedWork) -> Plan {
        self.work = work;
        self
    }

    /// The geometric steps.
    pub fn geometry(&self) -> &[GeomOp] {
        &self.geometry
    }

    /// The output's element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The output's normalisation and layout.
    pub fn format(&self) -> &OutputFormat {
        &self.format
    }

    /// The plan's pixel steps alone: the same geometry (and so the same
    /// random draws) with the output left as decoded, `u8` `[H, W, 3]`.
    /// [`write_pixels`](crate::write_pixels) with this plan's
    /// [`format`](Self::format) then makes, to the bit, what this plan
    /// makes — so a worker can ship a quarter of the bytes of an `f32`
    /// output and the output steps run where the batch is used.
    ///
    /// ```
    /// use feedline_vision::{Dtype, Plan};
    /// let plan = Plan::parse("imagenet-train").unwrap();
    /// assert!(plan.has_output_steps());
    /// let pixels = plan.pixels();
    /// assert_eq!(pixels.dtype(), Dtype::U8);
    /// assert!(!pixels.has_output_steps());
    /// assert_eq!(pixels.to_string(), "decode,random-resized-crop(224x224,scale=0.08:1,ratio=0.75:1.3333333333333333),flip(0.5)");
    /// ```
    pub fn pixels(&self) -> Plan {
        Plan {
            geometry: self.geometry.clone(),
            dtype: Dtype::U8,
            format: OutputFormat::default(),
            work: self.work,
        }
    }

    /// Whether the output is other than the pixels as decoded (`f32`,
    /// normalised, or CHW).
    pub fn has_output_steps(&self) -> bool {
        self.dtype != Dtype::U8 || self.format != OutputFormat::default()
    }

    /// The output's shape: fixed, or that of the image.
    pub fn shape(&self) -> OutputShape {
        let mut size: Option<(usize, usize)> = None;
        for op in &self.geometry {
            match *op {
                GeomOp::RandomResizedCrop { height, width, .. }
                | GeomOp::CenterCrop { height, width }
                | GeomOp::Resize(ResizeTo::Exact { height, width }) => size = Some((height, width)),
                GeomOp::Resize(ResizeTo::Shorter(_)) => size = None,
                GeomOp::Flip { .. } => {}
            }
        }
        match size {
            Some((h, w)) => OutputShape::Fixed(self.format.layout.shape(h, w)),
            None => OutputShape::Variable(self.format.layout),
        }
    }

    /// Composes one step into `pending` (drawing from `rng` as torchvision
    /// would), or says what must happen first.
    fn compose<R: Rng + ?Sized>(
        op: &GeomOp,
        pending: &mut Pending,
        base: Option<&RgbImage>,
        rng: &mut R,
        max_pixels: u64,
    ) -> Result<Step> {
        let step = Self::compose_unchecked(op, pending, base, rng, max_pixels)?;
        if let Step::Done = step {
            fits(pending.out_width, pending.out_height, max_pixels)?;
        }
        Ok(step)
    }

    fn compose_unchecked<R: Rng + ?Sized>(
        op: &GeomOp,
        pending: &mut Pending,
        base: Option<&RgbImage>,
        rng: &mut R,
        max_pixels: u64,
    ) -> Result<Step> {
        match *op {
            GeomOp::Flip { p } => {
                if rng.gen::<f64>() < p {
                    pending.flip = !pending.flip;
                }
            }
            GeomOp::CenterCrop { height, width } => {
                fits(width, height, max_pixels)?;
                if height > pending.out_height || width > pending.out_width {
                    // Zero padding: done on a decoded image with nothing pending.
                    return Ok(match base {
                        Some(image) if pending.is_identity(image.width(), image.height()) => {
                            Step::Replace(center_crop(image, height, width)?)
                        }
                        _ => Step::Materialize,
                    });
                }
                pending.window(CropBox {
                    top: center_offset(pending.out_height, height),
                    left: center_offset(pending.out_width, width),
                    height,
                    width,
                });
            }
            GeomOp::RandomResizedCrop {
                height,
                width,
                params,
            } => {
                if pending.resized {
                    return Ok(Step::Materialize);
                }
                let b = params.sample(rng, pending.out_width, pending.out_height)?;
                pending.window(b);
                pending.out_width = width;
                pending.out_height = height;
                pending.resized = true;
            }
            GeomOp::Resize(to) => {
                if pending.resized {
                    return Ok(Step::Materialize);
                }
                let (w, h) = to.output_size(pending.out_width, pending.out_height)?;
                pending.out_width = w;
                pending.out_height = h;
                pending.resized = true;
            }
        }
        Ok(Step::Done)
    }

    /// Runs the plan on encoded bytes into `out` (its length must be the
    /// output's element count); returns the output's shape.
    pub fn run_into<T: Element, R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        bytes: &[u8],
        rng: &mut R,
        out: &mut [T],
    ) -> Result<[usize; 3]> {
        self.run_into_steps(decoder, bytes, rng, out)
            .map_err(|e| e.error)
    }

    /// [`Plan::run_into`], its error naming the failing step as the spec
    /// spells it (`decode` for the bytes, `random-resized-crop(…)`, …).
    pub fn run_into_steps<T: Element, R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        bytes: &[u8],
        rng: &mut R,
        out: &mut [T],
    ) -> Result<[usize; 3], StepError> {
        self.run_source_into(decoder, KernelSource::Bytes(bytes), rng, out)
    }

    /// [`Plan::run_into`] on pixels already decoded.
    pub fn run_image_into<T: Element, R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        image: &RgbImage,
        rng: &mut R,
        out: &mut [T],
    ) -> Result<[usize; 3]> {
        self.run_source_into(decoder, KernelSource::Image(image), rng, out)
            .map_err(|e| e.error)
    }

    fn run_source_into<T: Element, R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        source: KernelSource<'_>,
        rng: &mut R,
        out: &mut [T],
    ) -> Result<[usize; 3], StepError> {
        self.check_dtype::<T>().map_err(|e| self.output_step(e))?;
        self.execute(decoder, source, rng, |shape| {
            check_output_len(out.len(), shape)?;
            Ok(&mut *out)
        })
    }

    /// Runs the plan on encoded bytes into a new array.
    pub fn run<R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        bytes: &[u8],
        rng: &mut R,
    ) -> Result<ImageArray> {
        self.run_steps(decoder, bytes, rng).map_err(|e| e.error)
    }

    /// [`Plan::run`], its error naming the failing step as the spec spells
    /// it (`decode` for the bytes, `random-resized-crop(…)`, …).
    pub fn run_steps<R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        bytes: &[u8],
        rng: &mut R,
    ) -> Result<ImageArray, StepError> {
        match self.dtype {
            Dtype::U8 => self
                .run_owned::<u8, R>(decoder, bytes, rng)
                .map(ImageArray::U8),
            Dtype::F32 => self
                .run_owned::<f32, R>(decoder, bytes, rng)
                .map(ImageArray::F32),
        }
    }

    fn run_owned<T: Element, R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        bytes: &[u8],
        rng: &mut R,
    ) -> Result<Array3<T>, StepError> {
        let mut buffer: Vec<T> = Vec::new();
        let mut shape = [0; 3];
        self.execute(decoder, KernelSource::Bytes(bytes), rng, |s| {
            shape = s;
            let len = s.iter().product();
            buffer
                .try_reserve_exact(len)
                .map_err(|_| VisionError::OutOfMemory {
                    what: format!("an output array of shape {s:?}"),
                })?;
            buffer.resize(len, T::default());
            Ok(&mut buffer[..])
        })?;
        Ok(
            Array3::from_shape_vec((shape[0], shape[1], shape[2]), buffer)
                .expect("the buffer was sized for the shape"),
        )
    }

    fn check_dtype<T: Element>(&self) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(VisionError::OutputDtype {
                plan: self.dtype.name(),
                buffer: T::DTYPE.name(),
            });
        }
        Ok(())
    }

    /// The output steps as the spec spells them (`normalize(…),chw`), or
    /// `decode` when there are none: what a failure to write the output
    /// is blamed on.
    fn output_step(&self, error: VisionError) -> StepError {
        let mut spelled = String::new();
        self.write_output_steps(&mut spelled)
            .expect("writing to a String");
        let step = spelled.trim_start_matches(',');
        StepError {
            step: if step.is_empty() { "decode" } else { step }.to_string(),
            error,
        }
    }

    /// Composes the steps over the current base (the bytes, then any
    /// materialised image), then writes the last pending geometry into the
    /// buffer `output` gives for the final shape. An error names its step:
    /// `decode` for what reading the bytes raises, else the geometric step
    /// being composed, or the last resampling for what the kernel raises.
    fn execute<'o, T: Element, R: Rng + ?Sized>(
        &self,
        decoder: &mut Decoder,
        source: KernelSource<'_>,
        rng: &mut R,
        output: impl FnOnce([usize; 3]) -> Result<&'o mut [T]>,
    ) -> Result<[usize; 3], StepError> {
        let max_pixels = decoder.max_pixels();
        let (mut width, mut height) = match source {
            KernelSource::Bytes(bytes) => {
                let info = decoder.info(bytes).map_err(at(None))?;
                (info.width() as usize, info.height() as usize)
            }
            KernelSource::Image(image) => (image.width(), image.height()),
        };
        let mut materialized: Option<RgbImage> = None;
        let mut pending = Pending::identity(width, height);
        // The step whose resampling is pending (what the kernel's errors
        // other than decoding are blamed on).
        let mut resampling: Option<&GeomOp> = None;
        let mut ops = self.geometry.iter().peekable();
        while let Some(&op) = ops.peek() {
            match Self::compose(op, &mut pending, materialized.as_ref(), rng, max_pixels)
                .map_err(at(Some(op)))?
            {
                Step::Done => {
                    ops.next();
                    if matches!(op, GeomOp::RandomResizedCrop { .. } | GeomOp::Resize(_)) {
                        resampling = Some(op);
                    }
                }
                Step::Replace(image) => {
                    ops.next();
                    (width, height) = (image.width(), image.height());
                    pending = Pending::identity(width, height);
                    materialized = Some(image);
                    resampling = None;
                }
                Step::Materialize => {
                    let base = match &materialized {
                        Some(image) => KernelSource::Image(image),
                        None => source,
                    };
                    let image = self
                        .materialize(decoder, base, &pending)
                        .map_err(at(resampling))?;
                    (width, height) = (image.width(), image.height());
                    pending = Pending::identity(width, height);
                    materialized = Some(image);
                    resampling = None;
                }
            }
        }
        let shape = self
            .format
            .layout
            .shape(pending.out_height, pending.out_width);
        let out = output(shape).map_err(|e| self.output_step(e))?;
        let base = match &materialized {
            Some(image) => KernelSource::Image(image),
            None => source,
        };
        let geometry = pending.geometry();
        let (w0, h0) = (width, height);
        crop_resize_into(
            decoder,
            base,
            &mut |w, h| {
                if (w, h) != (w0, h0) {
                    return Err(VisionError::invalid(
                        "plan",
                        format!("the image is {w}x{h} but its header said {w0}x{h0}"),
                    ));
                }
                Ok(geometry)
            },
            &self.format,
            self.work,
            out,
        )
        .map_err(at(resampling))?;
        Ok(shape)
    }

    fn materialize(
        &self,
        decoder: &mut Decoder,
        base: KernelSource<'_>,
        pending: &Pending,
    ) -> Result<RgbImage> {
        let mut image = RgbImage::zeroed(pending.out_width, pending.out_height)?;
        let geometry = pending.geometry();
        crop_resize_into(
            decoder,
            base,
            &mut |_, _| Ok(geometry),
            &OutputFormat::default(),
            self.work,
            image.pixels_mut(),
        )?;
        Ok(image)
    }
}

/// One geometric step as the spec spells it (`resize(256)`, `flip(0.5)`).
pub(crate) fn step_name(op: &GeomOp) -> String {
    match op {
        GeomOp::RandomResizedCrop {
            height,
            width,
            params,
        } => format!(
            "random-resized-crop({height}x{width},scale={}:{},ratio={}:{})",
            params.scale.0, params.scale.1, params.ratio.0, params.ratio.1
        ),
        GeomOp::Resize(ResizeTo::Shorter(n)) => format!("resize({n})"),
        GeomOp::Resize(ResizeTo::Exact { height, width }) => format!("resize({height}x{width})"),
        GeomOp::CenterCrop { height, width } => format!("center-crop({height}x{width})"),
        GeomOp::Flip { p } => format!("flip({p})"),
    }
}

/// What blames an error on `op` (`decode` for what reading the bytes
/// raises, or when no step is pending).
fn at(op: Option<&GeomOp>) -> impl Fn(VisionError) -> StepError + '_ {
    move |error| StepError {
        step: match op {
            Some(op) if !error.is_decoding() => step_name(op),
            _ => "decode".to_string(),
        },
        error,
    }
}

/// Refuses an image (an output, an intermediate, a crop) of more pixels
/// than the decoder's limit, before it is made.
fn fits(width: usize, height: usize, max_pixels: u64) -> Result<()> {
    if (width as u64).saturating_mul(height as u64) > max_pixels {
        return Err(VisionError::OutputTooLarge {
            width: width as u64,
            height: height as u64,
            limit: max_pixels,
        });
    }
    Ok(())
}

impl Plan {
    /// The output steps, each with a leading comma.
    fn write_output_steps(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        match (&self.format.normalize, self.dtype) {
            (Some(n), _) => write!(
                f,
                ",normalize(mean={}:{}:{},std={}:{}:{})",
                n.mean[0], n.mean[1], n.mean[2], n.std[0], n.std[1], n.std[2]
            )?,
            (None, Dtype::F32) => write!(f, ",to-f32")?,
            (None, Dtype::U8) => {}
        }
        if self.format.layout == Layout::Chw {
            write!(f, ",chw")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Plan {
    /// The spelled-out chain, which parses back to the same plan.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "decode")?;
        for op in &self.geometry {
            write!(f, ",{}", step_name(op))?;
        }
        self.write_output_steps(f)
    }
}
