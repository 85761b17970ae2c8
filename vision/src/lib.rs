//! Image operations for feedline's transforms, with no actix and no
//! pipeline: decoding JPEG (libjpeg-turbo) and PNG (`png`) bytes to `u8
//! [H, W, 3]` RGB as PIL's `convert("RGB")` does; decoding only the region,
//! and the DCT scale, a crop needs; torchvision's `RandomResizedCrop` box
//! sampling, resize (antialiased bilinear, PIL's algorithm), centre crop,
//! horizontal flip and normalisation to `f32` CHW or HWC; one fused kernel
//! that does crop + resize + flip + normalise + layout from JPEG bytes into
//! a caller's buffer; and the `--transform SPEC` language with its [`Plan`].
//!
//! | module | owns |
//! |---|---|
//! | [`error`] | [`VisionError`], [`SpecError`]: below every other module |
//! | [`decode`](mod@decode) | format sniffing, [`Decoder`], what each file kind becomes |
//! | [`jpeg`] | libjpeg-turbo through the C shim: header, region decode, [`ReducedWork`], CMYK, the scan limit |
//! | [`png`] | PNG to RGB |
//! | [`image`] | [`RgbImage`], [`RgbView`] |
//! | [`resize`](mod@resize) | PIL's antialiased bilinear resampling |
//! | `coefficients` | the resampling's fixed-point weights, PIL's |
//! | `kernels` | the resampling's inner loops: AVX2 (detected at run time) and scalar |
//! | [`ops`] | the unfused operations (crop, centre crop, resize, flip) |
//! | [`rrc`] | `RandomResizedCrop` box sampling |
//! | [`output`] | dtype, normalisation and layout of outputs |
//! | [`fused`] | the fused crop-resize-flip-normalise kernel |
//! | [`plan`] | a parsed spec: output dtype/shape, running it |
//! | [`spec`] | the `--transform` grammar and presets, and [`Plan::parse`] |
//! | [`memory`] | what one call may hold at most, by the pixel limit |
//! | [`transform`] | [`ImageTransform`]: a plan as feedline's per-instance map |
//!
//! Building needs libjpeg-turbo's headers and library (Debian:
//! `apt-get install -y libjpeg62-turbo-dev`).

mod coefficients;
pub mod decode;
pub mod error;
pub mod fused;
pub mod image;
pub mod jpeg;
mod kernels;
mod limits;
pub mod memory;
pub mod ops;
pub mod output;
pub mod png;
pub mod resize;
pub mod rrc;
pub mod spec;
pub mod transform;
pub mod transform_plan;

pub use decode::{decode, sniff_format, Decoder, ImageFormat, ImageInfo, DEFAULT_MAX_PIXELS};
pub use error::{Result, SpecError, StepError, VisionError};
pub use fused::{crop_resize_into, CropResize, KernelReport, KernelSource};
pub use image::{RgbImage, RgbView};
pub use jpeg::{JpegColor, JpegInfo, JpegRegion, ReducedWork, DEFAULT_MAX_SCANS};
pub use ops::{center_crop, crop, flip_horizontal, resize, resized_crop, CropBox, ResizeTo};
pub use output::{
    to_array, write_image, write_pixels, Dtype, Element, Layout, Normalize, OutputFormat,
};
pub use png::{PngInfo, PNG_MAX_WIDTH};
pub use resize::{resize_box, SourceBox};
pub use rrc::RandomResizedCrop;
pub use spec::PRESETS;
pub use transform::{ImageFields, ImageTransform};
pub use transform_plan::{GeomOp, ImageArray, OutputShape, Plan};
