//! Decoding JPEG and PNG bytes to [`RgbImage`]: format sniffing, the pixel
//! limit (refused from the header, before any pixel buffer is allocated),
//! the JPEG scan limit, and the reusable per-thread [`Decoder`] that owns
//! libjpeg's decompressor and the scratch buffers of the fused kernel.
//! What one call may hold, by these limits, is [`crate::memory`]'s.
//!
//! What each kind of file becomes (the same as PIL's
//! `Image.open(f).convert("RGB")`, tested against PIL's pixels):
//!
//! | file | RGB |
//! |---|---|
//! | JPEG YCbCr (any sampling, baseline or progressive, Huffman or arithmetic) | libjpeg-turbo's ISLOW IDCT and fancy upsampling, as PIL |
//! | JPEG grey | R = G = B = grey |
//! | JPEG RGB (Adobe transform 0) | as stored |
//! | JPEG CMYK / YCCK (Adobe) | inverted CMYK, then PIL's `cmyk2rgb` (`R = K' - K'(255-C')/255`) |
//! | JPEG of 12 or 16 bits, lossless, other component counts | [`VisionError::Jpeg`] / [`VisionError::UnsupportedJpeg`] naming it |
//! | PNG | see [`crate::png`]'s table (16-bit grey clips at 255, as PIL) |
//!
//! EXIF orientation is not applied (neither PIL's `open` nor torchvision's
//! `decode_jpeg` apply it by default); ICC profiles are ignored.

use crate::error::{Result, VisionError};
use crate::image::RgbImage;
use crate::jpeg::{
    scaled_size, JpegDecoder, JpegInfo, JpegRegion, OpenJpeg, ReducedWork, DEFAULT_MAX_SCANS,
};
use crate::limits::{libjpeg_memory_cap, too_large};
use crate::ops::CropBox;
use crate::png::{decode_png_region, png_info, PngInfo};

/// PIL's decompression-bomb limit (`2 * Image.MAX_IMAGE_PIXELS`): PIL
/// refuses an image of more pixels than this with `DecompressionBombError`.
pub const DEFAULT_MAX_PIXELS: u64 = 178_956_970;

/// The image formats this crate decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// JPEG (JFIF, Exif, Adobe).
    Jpeg,
    /// PNG.
    Png,
}

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

/// The format of `bytes` from its signature.
pub fn sniff_format(bytes: &[u8]) -> Result<ImageFormat> {
    if bytes.len() >= 3 && bytes[..3] == [0xff, 0xd8, 0xff] {
        Ok(ImageFormat::Jpeg)
    } else if bytes.len() >= 8 && bytes[..8] == PNG_SIGNATURE {
        Ok(ImageFormat::Png)
    } else {
        let prefix = if bytes.is_empty() {
            "nothing (0 bytes)".to_string()
        } else {
            bytes
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        Err(VisionError::UnknownFormat { prefix })
    }
}

/// What an image's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageInfo {
    /// A JPEG.
    Jpeg(JpegInfo),
    /// A PNG.
    Png(PngInfo),
}

impl ImageInfo {
    /// Width in pixels.
    pub fn width(&self) -> u32 {
        match self {
            ImageInfo::Jpeg(i) => i.width,
            ImageInfo::Png(i) => i.width,
        }
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        match self {
            ImageInfo::Jpeg(i) => i.height,
            ImageInfo::Png(i) => i.height,
        }
    }
}

/// A reusable decoder: keeps libjpeg's decompressor and scratch buffers
/// from image to image. One per thread (it is `Send`, not `Sync`).
pub struct Decoder {
    jpeg: Option<JpegDecoder>,
    max_pixels: u64,
    max_scans: u32,
    pub(crate) scratch: Scratch,
}

/// Buffers the fused kernel reuses from image to image (each at most
/// `3 × max_pixels` bytes: see [`crate::memory`]).
#[derive(Default)]
pub(crate) struct Scratch {
    /// Decoded pixels of the region a kernel reads (JPEG or PNG).
    pub(crate) region: Vec<u8>,
    /// The horizontal pass's rows.
    pub(crate) rows: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

/// An image whose header was read, ready to decode.
pub(crate) enum OpenImage<'s, 'd> {
    Jpeg(OpenJpeg<'s, 'd>),
    Png(&'d [u8], PngInfo),
}

impl OpenImage<'_, '_> {
    pub(crate) fn width(&self) -> u32 {
        match self {
            OpenImage::Jpeg(j) => j.info().width,
            OpenImage::Png(_, i) => i.width,
        }
    }

    pub(crate) fn height(&self) -> u32 {
        match self {
            OpenImage::Jpeg(j) => j.info().height,
            OpenImage::Png(_, i) => i.height,
        }
    }
}

impl Decoder {
    /// A decoder with PIL's pixel limit ([`DEFAULT_MAX_PIXELS`]) and
    /// libjpeg-turbo's usual scan limit ([`DEFAULT_MAX_SCANS`]).
    pub fn new() -> Self {
        Decoder {
            jpeg: None,
            max_pixels: DEFAULT_MAX_PIXELS,
            max_scans: DEFAULT_MAX_SCANS,
            scratch: Scratch::default(),
        }
    }

    /// A decoder that refuses images of more than `max_pixels` pixels.
    pub fn with_max_pixels(max_pixels: u64) -> Self {
        Decoder {
            max_pixels,
            ..Decoder::new()
        }
    }

    /// The pixel limit: an image of more pixels is refused from its
    /// header, and so is an intermediate or output image of more (a resize
    /// to more pixels, the resampling's rows).
    pub fn max_pixels(&self) -> u64 {
        self.max_pixels
    }

    /// Sets the pixel limit for the next images (a thread's decoder serves
    /// transforms of different limits).
    pub fn set_max_pixels(&mut self, max_pixels: u64) {
        self.max_pixels = max_pixels;
    }

    /// The most scans a JPEG may have (0: no limit).
    pub fn max_scans(&self) -> u32 {
        self.max_scans
    }

    /// Sets the JPEG scan limit (0: none; default [`DEFAULT_MAX_SCANS`]).
    pub fn set_max_scans(&mut self, max_scans: u32) {
        self.max_scans = max_scans;
    }

    /// Reads the header: format, size, colour model.
    pub fn info(&mut self, bytes: &[u8]) -> Result<ImageInfo> {
        match self.open(bytes)? {
            OpenImage::Jpeg(j) => Ok(ImageInfo::Jpeg(*j.info())),
            OpenImage::Png(_, info) => Ok(ImageInfo::Png(info)),
        }
    }

    /// Reads the header (and checks the pixel limit); the result decodes.
    pub(crate) fn open<'s, 'd>(&'s mut self, bytes: &'d [u8]) -> Result<OpenImage<'s, 'd>> {
        open_image(&mut self.jpeg, self.max_pixels, self.max_scans, bytes)
    }

    /// [`Decoder::open`], and the scratch buffers beside it.
    pub(crate) fn open_with_scratch<'s, 'd>(
        &'s mut self,
        bytes: &'d [u8],
    ) -> Result<(OpenImage<'s, 'd>, &'s mut Scratch)> {
        let open = open_image(&mut self.jpeg, self.max_pixels, self.max_scans, bytes)?;
        Ok((open, &mut self.scratch))
    }

    /// Decodes a whole JPEG or PNG to RGB, checking the whole file.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<RgbImage> {
        let max_pixels = self.max_pixels;
        match self.open(bytes)? {
            OpenImage::Jpeg(open) => {
                let (width, height) = (open.info().width, open.info().height);
                let region = JpegRegion {
                    scale_denom: 1,
                    x: 0,
                    y: 0,
                    width,
                    height,
                };
                decode_jpeg_region(open, region, ReducedWork::NONE)
            }
            OpenImage::Png(bytes, info) => {
                let (width, height) = (info.width as usize, info.height as usize);
                let mut image = RgbImage::zeroed(width, height)?;
                let whole = CropBox {
                    top: 0,
                    left: 0,
                    height,
                    width,
                };
                decode_png_region(bytes, max_pixels, whole, image.pixels_mut(), width * 3)?;
                Ok(image)
            }
        }
    }

    /// Decodes one region of a JPEG at a DCT scale, with the reduced-work
    /// tricks of `work` (`work.dct_scaling` is not looked at: the scale is
    /// `region.scale_denom`). The pixels equal the same rectangle of the
    /// whole image decoded at that scale.
    pub fn decode_jpeg_region(
        &mut self,
        bytes: &[u8],
        region: JpegRegion,
        work: ReducedWork,
    ) -> Result<RgbImage> {
        match self.open(bytes)? {
            OpenImage::Jpeg(open) => decode_jpeg_region(open, region, work),
            OpenImage::Png(..) => Err(VisionError::invalid(
                "jpeg region",
                "the bytes are a PNG, not a JPEG",
            )),
        }
    }
}

/// Reads the header of `bytes` with the JPEG decompressor in `jpeg` (made
/// on first use, its limits set from `max_pixels` and `max_scans`) and
/// checks the pixel limit.
fn open_image<'s, 'd>(
    jpeg: &'s mut Option<JpegDecoder>,
    max_pixels: u64,
    max_scans: u32,
    bytes: &'d [u8],
) -> Result<OpenImage<'s, 'd>> {
    match sniff_format(bytes)? {
        ImageFormat::Jpeg => {
            let cap = usize::try_from(libjpeg_memory_cap(max_pixels)).unwrap_or(usize::MAX);
            let decoder = match jpeg {
                Some(decoder) => {
                    decoder.set_limits(cap, max_scans);
                    decoder
                }
                slot => slot.insert(JpegDecoder::new(cap, max_scans)?),
            };
            let open = decoder.open(bytes)?;
            too_large(open.info().width, open.info().height, max_pixels)?;
            Ok(OpenImage::Jpeg(open))
        }
        ImageFormat::Png => {
            let info = png_info(bytes)?;
            too_large(info.width, info.height, max_pixels)?;
            crate::png::too_wide(&info)?;
            Ok(OpenImage::Png(bytes, info))
        }
    }
}

/// Decodes `region` of an open JPEG into a new image.
pub(crate) fn decode_jpeg_region(
    open: OpenJpeg<'_, '_>,
    region: JpegRegion,
    work: ReducedWork,
) -> Result<RgbImage> {
    let info = *open.info();
    let (scaled_w, scaled_h) = scaled_size(info.width, info.height, region.scale_denom.max(1));
    if u64::from(region.x) + u64::from(region.width) > u64::from(scaled_w)
        || u64::from(region.y) + u64::from(region.height) > u64::from(scaled_h)
    {
        return Err(VisionError::invalid(
            "jpeg region",
            format!(
                "{}x{} at ({}, {}) is not inside the {scaled_w}x{scaled_h} image decoded at 1/{}",
                region.width, region.height, region.x, region.y, region.scale_denom
            ),
        ));
    }
    let mut image = RgbImage::zeroed(region.width as usize, region.height as usize)?;
    if region.width == 0 || region.height == 0 {
        return Ok(image);
    }
    let stride = region.width as usize * 3;
    open.decode_region(region, work, image.pixels_mut(), stride)?;
    Ok(image)
}

thread_local! {
    static THREAD_DECODER: std::cell::RefCell<Decoder> = std::cell::RefCell::new(Decoder::new());
}

/// Decodes a whole JPEG or PNG to RGB with this thread's [`Decoder`].
///
/// ```
/// # fn main() -> Result<(), feedline_vision::VisionError> {
/// let err = feedline_vision::decode(b"not an image").unwrap_err();
/// assert!(err.to_string().contains("not a JPEG or PNG"));
/// # Ok(()) }
/// ```
pub fn decode(bytes: &[u8]) -> Result<RgbImage> {
    THREAD_DECODER.with(|d| d.borrow_mut().decode(bytes))
}
