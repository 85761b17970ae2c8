//! JPEG decoding through libjpeg-turbo (the system library, via the C shim
//! in `csrc/jpeg_shim.c` that turns libjpeg's `exit()`-on-error into an
//! error code): header reading, and decoding of a region of the image at a
//! DCT scale of 1, 1/2, 1/4 or 1/8 with the reduced-work tricks
//! ([`ReducedWork`]). CMYK and YCCK files are converted to RGB by the shim,
//! row by row, as PIL converts them. libjpeg's own memory is capped
//! (`max_memory_to_use`: the progressive coefficient buffers above all) and
//! so is the number of scans a file may have ([`DEFAULT_MAX_SCANS`]).

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
        pub fn fl_jpeg_set_max_scans(j: *mut FlJpeg, max_scans: c_int);
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

/// The most scans a JPEG may have by default, as libjpeg-turbo's
/// `djpeg -maxscans` and TurboJPEG's scan limit are commonly set: a
/// progressive JPEG of thousands of scans (each a pass over every
/// coefficient) costs seconds of CPU for one small file. Baseline JPEGs
/// have one scan, progressive ones from libjpeg or PIL about ten.
pub const DEFAULT_MAX_SCANS: u32 = 500;

/// A libjpeg-turbo decompressor, reused from image to image (one thread at a
/// time).
pub(crate) struct JpegDecoder {
    raw: NonNull<ffi::FlJpeg>,
    /// libjpeg's memory cap in force, bytes.
    max_memory: usize,
    /// The scan limit in force.
    max_scans: u32,
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
    pub(crate) fn new(max_memory: usize, max_scans: u32) -> Result<Self> {
        // SAFETY: plain constructor.
        let raw = unsafe { ffi::fl_jpeg_new() };
        let raw = NonNull::new(raw).ok_or_else(|| VisionError::OutOfMemory {
            what: "a libjpeg decompressor".into(),
        })?;
        let mut decoder = JpegDecoder {
            raw,
            max_memory: 0,
            max_scans: 0,
        };
        decoder.set_limits(max_memory, max_scans);
        Ok(decoder)
    }

    /// Sets libjpeg's memory cap (bytes) and the scan limit (0: none) for
    /// the next images.
    pub(crate) fn set_limits(&mut self, max_memory: usize, max_scans: u32) {
        if (max_memory, max_scans) == (self.max_memory, self.max_scans) {
            return;
        }
        // SAFETY: raw is live; the setters only store the values.
        unsafe {
            ffi::fl_jpeg_set_max_memory(
                self.raw.as_ptr(),
                std::os::raw::c_long::try_from(max_memory).unwrap_or(std::os::raw::c_long::MAX),
            );
            ffi::fl_jpeg_set_max_scans(
                self.raw.as_ptr(),
                std::os::raw::c_int::try_from(max_scans).unwrap_or(std::os::raw::c_int::MAX),
            );
        }
        (self.max_memory, self.max_scans) = (max_memory, max_scans);
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
        let request = ffi::FlJpegRegion {
            scale_denom: region.scale_denom,
            x: region.x,
            y: region.y,
            width: region.width,
            height: region.height,
            flags: work.flags(),
            cmyk: i32::from(cmyk),
            out: out.as_mut_ptr(),
            out_stride: stride,
            out_len: out.len(),
        };
        // SAFETY: the header was read from data that is still borrowed ('d);
        // `out` has out_len writable bytes.
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
        Ok(())
    }
}
