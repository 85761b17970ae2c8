//! The shuffle stage's state as one plain value — what its parts hold, the
//! records named by source and index — for the checkpoint (and the debug
//! log at each pass's end).

use std::sync::Arc;

use feedline::{Chunk, Origin};
use serde::{Deserialize, Serialize};

use super::drain::PendingState;
use super::mix::MixState;
use super::quota::QuotaState;
use super::reorder::ReorderState;

/// A record, by its source and index: how the stage's state names what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordRef {
    /// The file or source.
    pub source: String,
    /// The record's index in it.
    pub record: u64,
}

impl From<Origin> for RecordRef {
    fn from(o: Origin) -> Self {
        RecordRef {
            source: o.source.to_string(),
            record: o.record,
        }
    }
}

/// What the shuffle stage holds besides its pool, as a plain value: the
/// view a checkpoint takes of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ShuffleState {
    /// The pass being made.
    pub pass: u64,
    /// Batches numbered so far in it.
    pub batches: u64,
    /// The reorder window (deterministic mode).
    pub reorder: Option<ReorderState<Vec<RecordRef>>>,
    /// The file-set mix (several sets).
    pub mix: Option<MixState<Vec<RecordRef>>>,
    /// The equalize quota.
    pub quota: QuotaState<RecordRef>,
    /// Batches of the end-of-pass drain not yet collated, and markers.
    pub drain: Vec<PendingState<RecordRef>>,
}

/// The records of a chunk.
pub(super) fn records_of(chunk: &Arc<Chunk>) -> Vec<RecordRef> {
    chunk
        .origins()
        .iter()
        .map(|o| RecordRef::from(*o))
        .collect()
}
