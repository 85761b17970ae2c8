//! JPEG decoding through libjpeg-turbo (the system library, via the C shim
//! in `csrc/jpeg_shim.c` that turns libjpeg's `exit()`-on-error into an
//! error code): header reading, and decoding of a region of the image at a
//! DCT scale of 1, 1/2, 1/4 or 1/8 with the reduced-work tricks
//! ([`ReducedWork`]). CMYK and YCCK files are converted to RGB here, as PIL
//! converts them.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{Result, VisionError};

mod ffi {
    use std::os::raw::{c_char, c_int, c_long};

    #[repr(C)]
    pub struct FlJpeg {
        _private: [u8; 0],
    }

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct FlJpegInfo {
        pub width: u32,
        pub height: u32,
        pub components: i32,
        pub color_space: i32,
        pub progressive: i32,
        pub precision: i32,
        pub saw_adobe_marker: i32,
        pub adobe_transform: i32,
        pub h_samp: [i32; 4],
        pub v_samp: [i32; 4],
    }

    #[repr(C)]
    pub struct FlJpegRegion {
        pub scale_denom: u32,
        pub x: u32,
        pub y: u32,
        pub width: u32,
        pub height: u32,
        pub flags: u32,
        pub cmyk: i32,
        pub out: *mut u8,
        pub out_stride: usize,
        pub out_len: usize,
    }

    pub const FL_OK: c_int = 0;
    pub const FL_JPEG_ERROR: c_int = 1;
    pub const FL_BAD_REQUEST: c_int = 2;
    pub const FL_OUT_OF_MEMORY: c_int = 3;

    pub const FL_SKIP_ROWS: u32 = 1;
    pub const FL_CROP_COLS: u32 = 2;
    pub const FL_STOP_EARLY: u32 = 4;

    extern "C" {
        pub fn fl_jpeg_new() -> *mut FlJpeg;
        pub fn fl_jpeg_free(j: *mut FlJpeg);
        pub fn fl_jpeg_message(j: *const FlJpeg) -> *const c_char;
        pub fn fl_jpeg_input_offset(j: *const FlJpeg) -> usize;
        pub fn fl_jpeg_set_max_memory(j: *mut FlJpeg, bytes: c_long);
        pub fn fl_jpeg_read_header(
            j: *mut FlJpeg,
            data: *const u8,
            len: usize,
            info: *mut FlJpegInfo,
        ) -> c_int;
        pub fn fl_jpeg_decode(j: *mut FlJpeg, region: *const FlJpegRegion) -> c_int;
    }
}

/// libjpeg's `J_COLOR_SPACE` values the shim reports.
const JCS_GRAYSCALE: i32 = 1;
const JCS_RGB: i32 = 2;
const JCS_YCBCR: i32 = 3;
const JCS_CMYK: i32 = 4;
const JCS_YCCK: i32 = 5;

/// The colour model of a JPEG file, as libjpeg-turbo reads its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JpegColor {
    /// One component: grey. Becomes R = G = B.
    Grayscale,
    /// Three components stored as YCbCr (the usual case).
    YCbCr,
    /// Three components stored as RGB (Adobe transform 0).
    Rgb,
    /// Four components, CMYK (Adobe convention: stored inverted).
    Cmyk,
    /// Four components, YCCK (Adobe transform 2), converted to CMYK by libjpeg.
    Ycck,
    /// Anything else (component count, libjpeg colour space code).
    Other(i32, i32),
}

/// What a JPEG header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JpegInfo {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The colour model.
    pub color: JpegColor,
    /// Progressive (multi-scan) coding.
    pub progressive: bool,
    /// Bits per sample (8 for everything libjpeg-turbo 2 decodes).
    pub precision: u8,
    /// Sampling factors (h, v) of the first components (zero past `components`).
    pub sampling: [(u8, u8); 4],
}

/// The reduced-work tricks of a region decode; all on by default. Turning
/// one off changes only the work done, never the pixels of the region
/// (tested), except `dct_scaling` which the caller (the fused kernel)
/// applies when choosing the scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReducedWork {
    /// Skip the rows above the region (`jpeg_skip_scanlines`: entropy decoding
    /// only, no IDCT, upsampling or colour conversion).
    pub skip_rows: bool,
    /// Decode only the region's columns, rounded out to whole iMCUs
    /// (`jpeg_crop_scanline`).
    pub crop_cols: bool,
    /// Stop after the region's last row (no entropy decoding of the rest; the
    /// rest of the file is then not checked for damage).
    pub stop_early: bool,
    /// Decode at 1/2, 1/4 or 1/8 scale (libjpeg's `scale_denom`, PIL's
    /// `draft`) when the scaled crop is still at least the output size.
    pub dct_scaling: bool,
}

impl Default for ReducedWork {
    fn default() -> Self {
        ReducedWork::ALL
    }
}

impl ReducedWork {
    /// Every trick on.
    pub const ALL: ReducedWork = ReducedWork {
        skip_rows: true,
        crop_cols: true,
        stop_early: true,
        dct_scaling: true,
    };
    /// Every trick off: the whole image is decoded and checked, at full scale.
    pub const NONE: ReducedWork = ReducedWork {
        skip_rows: false,
        crop_cols: false,
        stop_early: false,
        dct_scaling: false,
    };

    fn flags(self) -> u32 {
        let mut flags = 0;
        if self.skip_rows {
            flags |= ffi::FL_SKIP_ROWS;
        }
        if self.crop_cols {
            flags |= ffi::FL_CROP_COLS;
        }
        if self.stop_early {
            flags |= ffi::FL_STOP_EARLY;
        }
        flags
    }
}

/// A rectangle of the image at a DCT scale: `scale_denom` is 1, 2, 4 or 8
/// and the other fields are in pixels of the image scaled by 1/`scale_denom`
/// (whose size is `ceil(width / scale_denom)` x `ceil(height / scale_denom)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JpegRegion {
    /// 1, 2, 4 or 8.
    pub scale_denom: u32,
    /// First column.
    pub x: u32,
    /// First row.
    pub y: u32,
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

/// The size of a `width` x `height` JPEG decoded at 1/`scale_denom`
/// (libjpeg's `jdiv_round_up`).
pub fn scaled_size(width: u32, height: u32, scale_denom: u32) -> (u32, u32) {
    (width.div_ceil(scale_denom), height.div_ceil(scale_denom))
}

/// A libjpeg-turbo decompressor, reused from image to image (one thread at a
/// time).
pub(crate) struct JpegDecoder {
    raw: NonNull<ffi::FlJpeg>,
    /// CMYK pixels of the current region before their conversion to RGB.
    cmyk: Vec<u8>,
}

// SAFETY: the decompressor is plain heap memory owned by this value; libjpeg
// keeps no thread-local state.
unsafe impl Send for JpegDecoder {}

impl Drop for JpegDecoder {
    fn drop(&mut self) {
        // SAFETY: raw came from fl_jpeg_new and is freed once.
        unsafe { ffi::fl_jpeg_free(self.raw.as_ptr()) }
    }
}

impl JpegDecoder {
    pub(crate) fn new(max_memory: usize) -> Result<Self> {
        // SAFETY: plain constructor.
        let raw = unsafe { ffi::fl_jpeg_new() };
        let raw = NonNull::new(raw).ok_or_else(|| VisionError::OutOfMemory {
            what: "a libjpeg decompressor".into(),
        })?;
        // SAFETY: raw is live.
        unsafe {
            ffi::fl_jpeg_set_max_memory(
                raw.as_ptr(),
                std::os::raw::c_long::try_from(max_memory).unwrap_or(std::os::raw::c_long::MAX),
            )
        };
        Ok(JpegDecoder {
            raw,
            cmyk: Vec::new(),
        })
    }

    fn error(&self, len: usize) -> VisionError {
        // SAFETY: the shim's message is a NUL-terminated buffer inside the object.
        let message = unsafe { CStr::from_ptr(ffi::fl_jpeg_message(self.raw.as_ptr())) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: raw is live.
        let offset = unsafe { ffi::fl_jpeg_input_offset(self.raw.as_ptr()) };
        VisionError::Jpeg {
            message,
            offset: offset.min(len),
            len,
        }
    }

    /// Reads the header of `data`; the returned handle decodes it.
    pub(crate) fn open<'s, 'd>(&'s mut self, data: &'d [u8]) -> Result<OpenJpeg<'s, 'd>> {
        let mut info = ffi::FlJpegInfo::default();
        // SAFETY: data outlives the handle ('d), which is the only way to
        // reach the decoder while libjpeg holds the pointer.
        let status = unsafe {
            ffi::fl_jpeg_read_header(self.raw.as_ptr(), data.as_ptr(), data.len(), &mut info)
        };
        if status != ffi::FL_OK {
            return Err(self.error(data.len()));
        }
        let color = match (info.components, info.color_space) {
            (1, JCS_GRAYSCALE) => JpegColor::Grayscale,
            (3, JCS_YCBCR) => JpegColor::YCbCr,
            (3, JCS_RGB) => JpegColor::Rgb,
            (4, JCS_CMYK) => JpegColor::Cmyk,
            (4, JCS_YCCK) => JpegColor::Ycck,
            (n, c) => JpegColor::Other(n, c),
        };
        let mut sampling = [(0u8, 0u8); 4];
        for (c, s) in sampling
            .iter_mut()
            .enumerate()
            .take(info.components.clamp(0, 4) as usize)
        {
            *s = (info.h_samp[c] as u8, info.v_samp[c] as u8);
        }
        let info = JpegInfo {
            width: info.width,
            height: info.height,
            color,
            progressive: info.progressive != 0,
            precision: info.precision as u8,
            sampling,
        };
        Ok(OpenJpeg {
            decoder: self,
            info,
            len: data.len(),
            _data: PhantomData,
        })
    }
}

/// A JPEG whose header was read, ready to decode.
pub(crate) struct OpenJpeg<'s, 'd> {
    decoder: &'s mut JpegDecoder,
    info: JpegInfo,
    len: usize,
    _data: PhantomData<&'d [u8]>,
}

impl OpenJpeg<'_, '_> {
    pub(crate) fn info(&self) -> &JpegInfo {
        &self.info
    }

    /// Decodes `region` as RGB into `out` (`region.height` rows of
    /// `region.width * 3` bytes, `stride` bytes apart).
    pub(crate) fn decode_region(
        self,
        region: JpegRegion,
        work: ReducedWork,
        out: &mut [u8],
        stride: usize,
    ) -> Result<()> {
        let cmyk = match self.info.color {
            JpegColor::Grayscale | JpegColor::YCbCr | JpegColor::Rgb => false,
            JpegColor::Cmyk | JpegColor::Ycck => true,
            JpegColor::Other(components, code) => {
                return Err(VisionError::UnsupportedJpeg {
                    what: format!(
                        "{components} components in libjpeg colour space {code}: only grey, \
                         YCbCr, RGB, CMYK and YCCK JPEGs are converted to RGB"
                    ),
                })
            }
        };
        let row_bytes = region.width as usize * 3;
        let needed = (region.height as usize).saturating_sub(1) * stride + row_bytes;
        if stride < row_bytes || out.len() < needed {
            return Err(VisionError::invalid(
                "jpeg region",
                format!(
                    "{}x{} region needs {needed} bytes at stride {stride}, buffer has {}",
                    region.width,
                    region.height,
                    out.len()
                ),
            ));
        }
        let decoder = self.decoder;
        let (target, target_stride) = if cmyk {
            let len = region.width as usize * region.height as usize * 4;
            decoder.cmyk.clear();
            decoder
                .cmyk
                .try_reserve(len)
                .map_err(|_| VisionError::OutOfMemory {
                    what: format!("{}x{} CMYK pixels", region.width, region.height),
                })?;
            decoder.cmyk.resize(len, 0);
            (decoder.cmyk.as_mut_ptr(), region.width as usize * 4)
        } else {
            (out.as_mut_ptr(), stride)
        };
        let request = ffi::FlJpegRegion {
            scale_denom: region.scale_denom,
            x: region.x,
            y: region.y,
            width: region.width,
            height: region.height,
            flags: work.flags(),
            cmyk: i32::from(cmyk),
            out: target,
            out_stride: target_stride,
            out_len: if cmyk { decoder.cmyk.len() } else { out.len() },
        };
        // SAFETY: the header was read from data that is still borrowed ('d);
        // `target` has out_len writable bytes.
        let status = unsafe { ffi::fl_jpeg_decode(decoder.raw.as_ptr(), &request) };
        match status {
            ffi::FL_OK => {}
            ffi::FL_OUT_OF_MEMORY => {
                return Err(VisionError::OutOfMemory {
                    what: "libjpeg's scanline buffer".into(),
                })
            }
            ffi::FL_BAD_REQUEST | ffi::FL_JPEG_ERROR => return Err(decoder.error(self.len)),
            other => {
                return Err(VisionError::Jpeg {
                    message: format!("unexpected status {other} from the libjpeg shim"),
                    offset: 0,
                    len: self.len,
                })
            }
        }
        if cmyk {
            let width = region.width as usize;
            for (y, cmyk_row) in decoder.cmyk.chunks_exact(width * 4).enumerate() {
                inverted_cmyk_to_rgb(cmyk_row, &mut out[y * stride..y * stride + width * 3]);
            }
        }
        Ok(())
    }
}

/// PIL's conversion of a CMYK JPEG: PIL reads every 4-component JPEG with
/// the Adobe (inverted) convention (rawmode `"CMYK;I"`: `C = 255 - c` for a
/// stored byte `c`), then `convert("RGB")` computes per channel
/// `R = nk - muldiv255(C, nk)` with `nk = 255 - K` (Pillow's `cmyk2rgb`).
/// With the stored bytes that is `k - muldiv255(255 - c, k)`.
pub(crate) fn inverted_cmyk_to_rgb(cmyk: &[u8], rgb: &mut [u8]) {
    for (px, out) in cmyk.chunks_exact(4).zip(rgb.chunks_exact_mut(3)) {
        let nk = u32::from(px[3]);
        for channel in 0..3 {
            let ink = 255 - u32::from(px[channel]);
            out[channel] = (nk - muldiv255(ink, nk)) as u8;
        }
    }
}

/// PIL's `MULDIV255`: `a * b / 255` rounded, for `a, b` in 0..=255.
fn muldiv255(a: u32, b: u32) -> u32 {
    let tmp = a * b + 128;
    ((tmp >> 8) + tmp) >> 8
}
