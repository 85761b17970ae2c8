//! The pixel containers: [`RgbImage`], an owned `u8 [H, W, 3]` image in
//! row-major HWC order, and [`RgbView`], a borrowed rectangle of one.

use ndarray::Array3;

use crate::error::{Result, VisionError};

/// An owned 8-bit RGB image, `height` rows of `width` pixels of 3 bytes
/// (R, G, B), rows contiguous: the C-order array `u8 [height, width, 3]`.
#[derive(Clone, PartialEq, Eq)]
pub struct RgbImage {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl std::fmt::Debug for RgbImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RgbImage({}x{})", self.width, self.height)
    }
}

impl RgbImage {
    /// An image from its pixels (`width * height * 3` bytes, HWC).
    pub fn from_pixels(width: usize, height: usize, pixels: Vec<u8>) -> Result<Self> {
        let expected = width
            .checked_mul(height)
            .and_then(|n| n.checked_mul(3))
            .ok_or_else(|| VisionError::invalid("image", format!("{width}x{height} overflows")))?;
        if pixels.len() != expected {
            return Err(VisionError::invalid(
                "image",
                format!(
                    "{width}x{height} RGB needs {expected} bytes, got {}",
                    pixels.len()
                ),
            ));
        }
        Ok(RgbImage {
            width,
            height,
            pixels,
        })
    }

    /// A black image.
    pub fn zeroed(width: usize, height: usize) -> Result<Self> {
        let len = width
            .checked_mul(height)
            .and_then(|n| n.checked_mul(3))
            .ok_or_else(|| VisionError::invalid("image", format!("{width}x{height} overflows")))?;
        let mut pixels = Vec::new();
        pixels
            .try_reserve_exact(len)
            .map_err(|_| VisionError::OutOfMemory {
                what: format!("a {width}x{height} RGB image"),
            })?;
        pixels.resize(len, 0);
        Ok(RgbImage {
            width,
            height,
            pixels,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// The pixels, HWC.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// The pixels, HWC, writable.
    pub fn pixels_mut(&mut self) -> &mut [u8] {
        &mut self.pixels
    }

    /// The pixels, HWC, owned.
    pub fn into_pixels(self) -> Vec<u8> {
        self.pixels
    }

    /// One row of `width * 3` bytes.
    pub fn row(&self, y: usize) -> &[u8] {
        &self.pixels[y * self.width * 3..(y + 1) * self.width * 3]
    }

    /// The whole image as a view.
    pub fn view(&self) -> RgbView<'_> {
        RgbView {
            pixels: &self.pixels,
            width: self.width,
            height: self.height,
            stride: self.width * 3,
        }
    }

    /// The image as an `ndarray` `u8 [H, W, 3]`.
    pub fn into_array(self) -> Array3<u8> {
        Array3::from_shape_vec((self.height, self.width, 3), self.pixels)
            .expect("an RgbImage holds height * width * 3 bytes")
    }
}

/// A borrowed rectangle of RGB pixels: `height` rows of `width` pixels,
/// `stride` bytes from one row to the next.
#[derive(Clone, Copy, Debug)]
pub struct RgbView<'a> {
    pixels: &'a [u8],
    width: usize,
    height: usize,
    stride: usize,
}

impl<'a> RgbView<'a> {
    /// A view of `pixels` (rows `stride` bytes apart).
    pub fn new(pixels: &'a [u8], width: usize, height: usize, stride: usize) -> Result<Self> {
        let needed = if height == 0 {
            0
        } else {
            (height - 1) * stride + width * 3
        };
        if stride < width * 3 || pixels.len() < needed {
            return Err(VisionError::invalid(
                "image view",
                format!(
                    "{width}x{height} with stride {stride} needs {needed} bytes, got {}",
                    pixels.len()
                ),
            ));
        }
        Ok(RgbView {
            pixels,
            width,
            height,
            stride,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// One row of `width * 3` bytes.
    pub fn row(&self, y: usize) -> &'a [u8] {
        &self.pixels[y * self.stride..y * self.stride + self.width * 3]
    }

    /// The sub-rectangle at (`x`, `y`) of `width` x `height` pixels.
    pub fn sub(&self, x: usize, y: usize, width: usize, height: usize) -> Result<RgbView<'a>> {
        if x + width > self.width || y + height > self.height {
            return Err(VisionError::invalid(
                "crop",
                format!(
                    "box {width}x{height} at (x {x}, y {y}) is not inside the {}x{} image",
                    self.width, self.height
                ),
            ));
        }
        if width == 0 || height == 0 {
            return Ok(RgbView {
                pixels: &[],
                width,
                height,
                stride: width * 3,
            });
        }
        let start = y * self.stride + x * 3;
        Ok(RgbView {
            pixels: &self.pixels[start..],
            width,
            height,
            stride: self.stride,
        })
    }

    /// The rectangle copied into an owned image.
    pub fn to_image(&self) -> RgbImage {
        let mut pixels = Vec::with_capacity(self.width * self.height * 3);
        for y in 0..self.height {
            pixels.extend_from_slice(self.row(y));
        }
        RgbImage {
            width: self.width,
            height: self.height,
            pixels,
        }
    }
}
