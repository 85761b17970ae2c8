//! The unfused image operations, one owned image in and one out, with
//! torchvision's semantics (`torchvision.transforms.v2.functional` on a PIL
//! or uint8 image): crop, centre crop (zero padding when the crop is larger
//! than the image), resize (shorter side or exact size; antialiased
//! bilinear) and horizontal flip. The plan composes the same geometry into
//! one pass instead ([`crate::fused`]); these are the step-by-step reference.

use crate::error::{Result, VisionError};
use crate::image::RgbImage;
use crate::resize::{resize_box, SourceBox};

/// A rectangle of whole pixels: `top`, `left`, `height`, `width`
/// (torchvision's `(i, j, h, w)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CropBox {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl CropBox {
    /// Is it inside a `width` x `height` image, and not empty?
    pub fn fits(&self, width: usize, height: usize) -> bool {
        self.width > 0
            && self.height > 0
            && self
                .left
                .checked_add(self.width)
                .is_some_and(|r| r <= width)
            && self
                .top
                .checked_add(self.height)
                .is_some_and(|b| b <= height)
    }

    pub(crate) fn check_inside(&self, width: usize, height: usize) -> Result<()> {
        if !self.fits(width, height) {
            return Err(VisionError::invalid(
                "crop",
                format!(
                    "box {}x{} at (top {}, left {}) is empty or not inside the {width}x{height} image",
                    self.width, self.height, self.top, self.left
                ),
            ));
        }
        Ok(())
    }
}

/// The size a resize asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeTo {
    /// The shorter side becomes this many pixels, the aspect ratio kept
    /// (torchvision `Resize(n)`: the longer side is `int(n * long / short)`).
    Shorter(usize),
    /// Exactly `height` x `width` (torchvision `Resize((h, w))`).
    Exact {
        /// Rows.
        height: usize,
        /// Columns.
        width: usize,
    },
}

impl ResizeTo {
    /// The `(width, height)` of a `width` x `height` image resized so.
    pub fn output_size(self, width: usize, height: usize) -> Result<(usize, usize)> {
        let size = match self {
            ResizeTo::Exact {
                height: h,
                width: w,
            } => (w, h),
            ResizeTo::Shorter(n) => {
                if width == 0 || height == 0 {
                    (0, 0)
                } else if width <= height {
                    (n, (n as f64 * height as f64 / width as f64) as usize)
                } else {
                    ((n as f64 * width as f64 / height as f64) as usize, n)
                }
            }
        };
        if size.0 == 0 || size.1 == 0 {
            return Err(VisionError::invalid(
                "resize",
                format!("{self:?} of a {width}x{height} image gives an empty image"),
            ));
        }
        Ok(size)
    }
}

/// The pixels of `crop` (which must be inside the image).
pub fn crop(image: &RgbImage, crop: CropBox) -> Result<RgbImage> {
    crop.check_inside(image.width(), image.height())?;
    Ok(image
        .view()
        .sub(crop.left, crop.top, crop.width, crop.height)?
        .to_image())
}

/// torchvision's `center_crop` offsets: `int(round((size - crop) / 2.0))`
/// (Python rounds half to even).
pub(crate) fn center_offset(size: usize, crop: usize) -> usize {
    ((size as f64 - crop as f64) / 2.0).round_ties_even() as usize
}

/// torchvision's `center_crop`: the centred `height` x `width` window; where
/// the crop is larger than the image, the image is first padded with zeros
/// (left/top get the smaller half).
pub fn center_crop(image: &RgbImage, height: usize, width: usize) -> Result<RgbImage> {
    if width == 0 || height == 0 {
        return Err(VisionError::invalid(
            "center-crop",
            format!("size {height}x{width} is empty"),
        ));
    }
    if width <= image.width() && height <= image.height() {
        return crop(
            image,
            CropBox {
                top: center_offset(image.height(), height),
                left: center_offset(image.width(), width),
                height,
                width,
            },
        );
    }
    // Zero padding on the sides the crop is larger (torchvision pads by
    // (crop - size) / 2 before, the rest after), a centred window on the
    // others: written straight into the result (no padded image, which
    // for a wide image and a tall crop could be far larger than either).
    let axis = |size: usize, crop: usize| -> (usize, usize, usize) {
        if crop >= size {
            (0, (crop - size) / 2, size)
        } else {
            (center_offset(size, crop), 0, crop)
        }
    };
    let (src_x, dst_x, cols) = axis(image.width(), width);
    let (src_y, dst_y, rows) = axis(image.height(), height);
    let mut out = RgbImage::zeroed(width, height)?;
    for y in 0..rows {
        let from = &image.row(src_y + y)[src_x * 3..(src_x + cols) * 3];
        let start = ((dst_y + y) * width + dst_x) * 3;
        out.pixels_mut()[start..start + cols * 3].copy_from_slice(from);
    }
    Ok(out)
}

/// Antialiased bilinear resize of the whole image (torchvision `resize` with
/// `antialias=True`, PIL `BILINEAR`).
pub fn resize(image: &RgbImage, to: ResizeTo) -> Result<RgbImage> {
    let (width, height) = to.output_size(image.width(), image.height())?;
    resize_box(
        &image.view(),
        SourceBox::whole(image.width(), image.height()),
        width,
        height,
    )
}

/// torchvision's `resized_crop`: crop, then resize to `height` x `width`.
pub fn resized_crop(
    image: &RgbImage,
    crop_box: CropBox,
    height: usize,
    width: usize,
) -> Result<RgbImage> {
    let cropped = crop(image, crop_box)?;
    resize(&cropped, ResizeTo::Exact { height, width })
}

/// Mirror left-right.
pub fn flip_horizontal(image: &RgbImage) -> RgbImage {
    let mut out = image.clone();
    let row_len = image.width() * 3;
    if row_len == 0 {
        return out;
    }
    for (out_row, in_row) in out
        .pixels_mut()
        .chunks_exact_mut(row_len)
        .zip(image.pixels().chunks_exact(row_len))
    {
        for (o, p) in out_row
            .chunks_exact_mut(3)
            .zip(in_row.chunks_exact(3).rev())
        {
            o.copy_from_slice(p);
        }
    }
    out
}
