//! The crate's error types: every way decoding, an operation, a plan or a
//! transform spec can fail, each saying what is wrong and where. Below
//! every other module: it imports none of them.

use thiserror::Error;

/// Everything that can go wrong in `feedline-vision`.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum VisionError {
    /// The bytes start with neither the JPEG nor the PNG signature.
    #[error("not a JPEG or PNG image: the bytes start with {prefix} (JPEG starts ff d8 ff, PNG 89 50 4e 47 0d 0a 1a 0a)")]
    UnknownFormat {
        /// The first bytes, in hex.
        prefix: String,
    },
    /// libjpeg-turbo refused the data: corrupt, truncated or a kind it cannot decode.
    #[error("JPEG decoding failed at about byte {offset} of {len}: {message}")]
    Jpeg {
        /// libjpeg-turbo's message.
        message: String,
        /// How far into the bytes the decoder had read when it failed.
        offset: usize,
        /// The length of the bytes.
        len: usize,
    },
    /// A valid JPEG of a kind this crate does not convert to RGB.
    #[error("unsupported JPEG: {what}")]
    UnsupportedJpeg {
        /// What the file is and why it cannot be converted.
        what: String,
    },
    /// The PNG decoder refused the data: corrupt, truncated or unsupported.
    #[error("PNG decoding failed: {message}")]
    Png {
        /// The `png` crate's message.
        message: String,
    },
    /// The image is larger than the decoder's pixel limit (refused from its
    /// header, before any pixel buffer is allocated).
    #[error("image of {width}x{height} pixels ({}) is over the pixel limit of {limit} (set it with --max-pixels, max_pixels= or ImageTransform::max_pixels)", width * height)]
    TooLarge {
        /// Width in the file's header.
        width: u64,
        /// Height in the file's header.
        height: u64,
        /// The decoder's limit, in pixels.
        limit: u64,
    },
    /// A step would make an image (its output, an intermediate, or the
    /// resampling's rows) of more pixels than the decoder's limit.
    #[error("it would make an image of {width}x{height} pixels ({}), over the pixel limit of {limit}", width.saturating_mul(*height))]
    OutputTooLarge {
        /// Columns.
        width: u64,
        /// Rows.
        height: u64,
        /// The decoder's limit, in pixels.
        limit: u64,
    },
    /// A parameter of an operation is out of its domain.
    #[error("invalid {operation} parameter: {message}")]
    InvalidParameter {
        /// The operation, as the spec names it (`resize`, `center-crop`, ...).
        operation: &'static str,
        /// What is wrong, with the value.
        message: String,
    },
    /// The caller's output buffer does not have the length the result needs.
    #[error("output buffer holds {actual} elements, the result {shape:?} needs {expected}")]
    OutputLength {
        /// Elements the result needs.
        expected: usize,
        /// Elements in the buffer.
        actual: usize,
        /// The result's shape.
        shape: [usize; 3],
    },
    /// The output element type of a call does not match the plan's dtype.
    #[error("the plan writes {plan} values, the output buffer holds {buffer}")]
    OutputDtype {
        /// The plan's dtype.
        plan: &'static str,
        /// The buffer's element type.
        buffer: &'static str,
    },
    /// A memory allocation failed.
    #[error("out of memory: {what}")]
    OutOfMemory {
        /// What was being allocated.
        what: String,
    },
    /// A `--transform` spec that does not parse or does not make sense.
    #[error(transparent)]
    Spec(#[from] SpecError),
}

/// An error of one step of a [`Plan`](crate::Plan): the step as the spec
/// spells it (`decode` for reading the bytes, `random-resized-crop(…)`,
/// `resize(256)`, `normalize(…),chw` for the output) and the error.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("step `{step}`: {error}")]
pub struct StepError {
    /// The failing step.
    pub step: String,
    /// What went wrong.
    #[source]
    pub error: VisionError,
}

/// A `--transform` spec that does not parse or does not make sense: where
/// and what (the spec language, [`crate::spec`], raises it).
#[derive(Debug, Error, Clone, PartialEq)]
#[error("transform spec {spec:?}, column {column}: {message}\n  {spec}\n  {caret:>width$}", caret = "^", width = column)]
pub struct SpecError {
    /// The whole spec.
    pub spec: String,
    /// 1-based column (in characters) of the offending token.
    pub column: usize,
    /// What was expected and what was found.
    pub message: String,
}

/// The crate's result type.
pub type Result<T, E = VisionError> = std::result::Result<T, E>;

impl VisionError {
    /// True for what reading the image's bytes raises (its format, its
    /// damage, its size against the pixel limit): the `decode` step's.
    pub fn is_decoding(&self) -> bool {
        matches!(
            self,
            VisionError::UnknownFormat { .. }
                | VisionError::Jpeg { .. }
                | VisionError::UnsupportedJpeg { .. }
                | VisionError::Png { .. }
                | VisionError::TooLarge { .. }
        )
    }

    pub(crate) fn invalid(operation: &'static str, message: impl Into<String>) -> Self {
        VisionError::InvalidParameter {
            operation,
            message: message.into(),
        }
    }
}
