//! The crate's error type: every failure names where it happened.
//!
//! A bad record is reported with its [`Location`] (file or source name,
//! 0-based record index, byte offset of the record's frame in the
//! decompressed stream), and a shape or type mismatch names the field, the
//! expected and the actual value as well.

use std::path::PathBuf;

use crate::provenance::Location;

/// Everything that can go wrong in feedline's core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening or reading a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A record is malformed: bad checksum, truncated, undecodable.
    #[error("{location}: {what}")]
    Corrupt {
        /// Where.
        location: Location,
        /// What is wrong, e.g. "bad payload CRC (stored 0x…, computed 0x…)".
        what: String,
    },
    /// A file-level problem that is not tied to a record (bad header, …).
    #[error("{}: {what}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A record's field does not fit the schema.
    #[error("{location}: field `{field}`: expected {expected}, got {actual}")]
    Field {
        /// Where the record came from.
        location: Location,
        /// The field's name.
        field: String,
        /// What the schema declares (shape and type).
        expected: String,
        /// What the record holds.
        actual: String,
    },
    /// No registered format fits the path, or the named format is unknown.
    #[error("{path}: {what}")]
    UnknownFormat {
        /// The path as given (with any `FORMAT:` prefix).
        path: String,
        /// Why no format was chosen.
        what: String,
    },
    /// The schema is invalid, or a batch was asked for a field it lacks or
    /// with the wrong type.
    #[error("schema: {0}")]
    Schema(String),
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Two composed readers yielded different numbers of instances.
    #[error("compose: readers are not aligned: {0}")]
    NotAligned(String),
    /// A transform (user code, or a built-in operation) failed or panicked
    /// on an instance: a bad record.
    #[error("{location}: transform `{transform}`: {what}")]
    Transform {
        /// The instance's source and record.
        location: Location,
        /// The transform's name.
        transform: String,
        /// What went wrong (a panic says "panicked: …").
        what: String,
    },
    /// A batch map failed or panicked.
    #[error("batch map on the batch of {rows} instances{}: {what}", first.as_ref().map(|l| format!(" from {l}")).unwrap_or_default())]
    BatchMap {
        /// The batch's first instance, if it has any.
        first: Option<Location>,
        /// Instances in the batch.
        rows: usize,
        /// What went wrong.
        what: String,
    },
    /// A batch field was asked for as a type or a number of dimensions it
    /// does not have ([`Batch::view`](crate::Batch::view)).
    #[error("batch field `{field}`: asked for {asked}, but it is {actual}")]
    View {
        /// The field's name.
        field: String,
        /// What was asked for, e.g. "f32 with 4 dimensions (Ix4)".
        asked: String,
        /// What the field is, e.g. `f32 [32, 64]: 2 dimensions, the batch's and the schema shape [64]`.
        actual: String,
    },
    /// A batch row could not be read as the type asked
    /// ([`Batch::rows`](crate::Batch::rows)).
    #[error("batch row {row} ({origin}) as `{asked}`: {}{what}", field.as_deref().unwrap_or(""))]
    Row {
        /// The row's index in the batch.
        row: usize,
        /// Where the row's instance came from.
        origin: Location,
        /// The type asked for.
        asked: String,
        /// The field, with its schema shape (`` field `x` (f32 [2]): ``), if
        /// the error is about one.
        field: Option<String>,
        /// What serde expected and what the row holds, e.g. "invalid
        /// length 2, expected an array of length 3".
        what: String,
    },
    /// A worker thread (`buffered`, `xmap`) panicked.
    #[error("worker panicked: {0}")]
    WorkerPanic(String),
    /// The input needs a part of feedline this build leaves out: a cargo
    /// [`Feature`] that is off (a Parquet file without `parquet`, an
    /// `s3://` URL without `remote`).
    #[error("{input}: {}", feature.not_compiled_in())]
    NotCompiledIn {
        /// The input as given (path, URL or `FORMAT:` prefixed path).
        input: String,
        /// The feature it needs.
        feature: Feature,
    },
}

/// A cargo feature of this crate that some inputs need (see
/// [`Error::NotCompiledIn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// `parquet`: Parquet files (`.parquet`, `.pq`, `parquet:`).
    Parquet,
    /// `arrow`: Arrow IPC streams and files (`.arrow`, `.feather`,
    /// `arrow:`), Hugging Face `save_to_disk` directories.
    Arrow,
    /// `mds`: Mosaic Streaming MDS datasets (`index.json`, `mds:`).
    Mds,
    /// `remote`: `s3://`, `gs://`, `http://` and `https://` inputs.
    Remote,
    /// `toml`: schema files in TOML (`.toml`).
    Toml,
}

impl Feature {
    /// The feature's name in `Cargo.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Parquet => "parquet",
            Feature::Arrow => "arrow",
            Feature::Mds => "mds",
            Feature::Remote => "remote",
            Feature::Toml => "toml",
        }
    }

    /// Whether this build has it.
    pub fn enabled(self) -> bool {
        match self {
            Feature::Parquet => cfg!(feature = "parquet"),
            Feature::Arrow => cfg!(feature = "arrow"),
            Feature::Mds => cfg!(feature = "mds"),
            Feature::Remote => cfg!(feature = "remote"),
            Feature::Toml => cfg!(feature = "toml"),
        }
    }

    /// What a build without it says when it is needed.
    ///
    /// ```
    /// use feedline::Feature;
    /// assert_eq!(
    ///     Feature::Parquet.not_compiled_in(),
    ///     "Parquet support is not compiled in: enable the `parquet` feature"
    /// );
    /// ```
    pub fn not_compiled_in(self) -> String {
        let what = match self {
            Feature::Parquet => "Parquet support is",
            Feature::Arrow => "Arrow IPC support is",
            Feature::Mds => "MDS (Mosaic Streaming) support is",
            Feature::Remote => "Remote sources (s3://, gs://, http://, https://) are",
            Feature::Toml => "TOML schema support is",
        };
        format!(
            "{what} not compiled in: enable the `{}` feature",
            self.name()
        )
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// `input` needs `feature`, which this build leaves out.
    pub fn not_compiled_in(input: impl Into<String>, feature: Feature) -> Self {
        Error::NotCompiledIn {
            input: input.into(),
            feature,
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A corrupt-record error at `location`.
    pub fn corrupt(location: Location, what: impl Into<String>) -> Self {
        Error::Corrupt {
            location,
            what: what.into(),
        }
    }

    /// The record location this error is about, if any.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Corrupt { location, .. }
            | Error::Field { location, .. }
            | Error::Transform { location, .. }
            | Error::Row {
                origin: location, ..
            } => Some(location),
            _ => None,
        }
    }
}

/// `Result` with feedline's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
