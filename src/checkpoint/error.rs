//! What can go wrong saving, loading, checking or resuming from a
//! checkpoint ([`CheckpointError`]): each error names the file, the field
//! or the record, and what was expected.

use std::path::PathBuf;

use super::path_kind::PathKind;
use super::OLDEST_CHECKPOINT_VERSION;

/// What went wrong saving, loading or resuming from a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing the checkpoint file (or a data file's metadata).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a checkpoint: empty, cut short or not valid JSON.
    #[error("{}: not a valid checkpoint: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column.
        what: String,
    },
    /// The checkpoint was written by another format version.
    #[error("{}: checkpoint format version {found}, this build reads versions {OLDEST_CHECKPOINT_VERSION} to {expected}", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The content checksum does not match the content: the file was
    /// edited by hand or damaged.
    #[error("{}: checkpoint modified or corrupt: {what}", path.display())]
    Modified {
        /// The file.
        path: PathBuf,
        /// What does not match.
        what: String,
    },
    /// A field is not what it must be, alone or beside the fields (or the
    /// settings and inputs) it must agree with.
    #[error("checkpoint field `{field}`: {what}")]
    Invalid {
        /// The field, as a path in the JSON (`passes[0].seqs`).
        field: String,
        /// What is wrong with it.
        what: String,
    },
    /// The input files differ from those the checkpoint was taken on.
    #[error("the inputs changed since the checkpoint: {}", changes.join("; "))]
    InputsChanged {
        /// One line per change: which file, old vs new.
        changes: Vec<String>,
    },
    /// A setting that fixes the order differs from the checkpoint's.
    #[error("setting `{name}` changed since the checkpoint: was {old}, now {new}")]
    SettingChanged {
        /// The setting.
        name: String,
        /// Its value in the checkpoint (`(unset)` if absent).
        old: String,
        /// Its value now (`(unset)` if absent).
        new: String,
    },
    /// A reference names a source index outside the checkpoint's source table.
    #[error(
        "checkpoint: reference to source #{index}, but the checkpoint names {sources} source(s)"
    )]
    BadSourceIndex {
        /// The index.
        index: u32,
        /// How many sources the table holds.
        sources: usize,
    },
    /// A referenced record is not in its file any more (the file is shorter).
    #[error("{source_name}: record {record} is referenced by the checkpoint but the file ends at record {end}")]
    MissingRecord {
        /// The file.
        source_name: String,
        /// The referenced record.
        record: u64,
        /// The number of records the file has.
        end: u64,
    },
    /// The path to save a checkpoint to exists and is not a regular file
    /// (symbolic links followed): the save, a rename over it, would replace
    /// it — a device for the whole machine.
    #[error("{}: that is {kind}, not a regular file; saving a checkpoint there would replace it with a file: give the path of a regular file", path.display())]
    NotARegularFile {
        /// The path given.
        path: PathBuf,
        /// What is there.
        kind: PathKind,
    },
    /// The path to save a checkpoint to is one of the loader's own input
    /// files: the next run could not read it.
    #[error("{}: that is one of this loader's input files ({}); saving a checkpoint there would destroy it: give another path", path.display(), input.display())]
    IsAnInput {
        /// The path given.
        path: PathBuf,
        /// The input, as the loader was given it.
        input: PathBuf,
    },
    /// The directory of the path to save a checkpoint to does not exist.
    #[error("{}: cannot save a checkpoint there: the directory {} does not exist", path.display(), dir.display())]
    MissingDirectory {
        /// The path given.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// On the way to the path to save a checkpoint to is a file that is not
    /// a directory.
    #[error("{}: cannot save a checkpoint there: {} is not a directory", path.display(), dir.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// The file in the way (its directory or an ancestor of it).
        dir: PathBuf,
    },
    /// Merging or splitting checkpoints: they do not belong together.
    #[error("cannot merge the checkpoints: {0}")]
    Merge(String),
    /// Reading a referenced record failed.
    #[error(transparent)]
    Read(#[from] crate::Error),
}

/// Result with a [`CheckpointError`].
pub type CheckpointResult<T> = std::result::Result<T, CheckpointError>;
