//! Record references in a checkpoint: one table of source names
//! ([`SourceTable`]) and references by index into it ([`RefList`], an
//! ordered list kept as two columns).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{CheckpointError, CheckpointResult};
use crate::{Origin, SourceId};

/// An ordered list of record references (source index, record), stored as
/// two parallel columns so a 10,000-row pool stays ~100 KiB of JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefList {
    /// Index of each reference's source in [`Checkpoint::sources`].
    pub sources: Vec<u32>,
    /// Record index of each reference.
    pub records: Vec<u64>,
}

impl RefList {
    /// The references of `origins`, interning their sources in `table`.
    pub fn encode(origins: &[Origin], table: &mut SourceTable) -> Self {
        let mut list = RefList::default();
        for o in origins {
            list.sources.push(table.index(o.source));
            list.records.push(o.record);
        }
        list
    }

    /// The origins, their sources named by `table`. A length mismatch of the
    /// two columns or an index outside the table is an error.
    pub fn decode(&self, table: &[String]) -> CheckpointResult<Vec<Origin>> {
        if self.sources.len() != self.records.len() {
            return Err(CheckpointError::Merge(format!(
                "reference list has {} sources but {} records",
                self.sources.len(),
                self.records.len()
            )));
        }
        let ids = intern_table(table);
        self.sources
            .iter()
            .zip(&self.records)
            .map(|(&s, &r)| {
                ids.get(s as usize).map(|&id| Origin::new(id, r)).ok_or(
                    CheckpointError::BadSourceIndex {
                        index: s,
                        sources: table.len(),
                    },
                )
            })
            .collect()
    }

    /// Number of references.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

fn intern_table(table: &[String]) -> Vec<SourceId> {
    table.iter().map(|n| SourceId::intern(n)).collect()
}

/// The source names a checkpoint refers to, each once, in first-use order.
#[derive(Clone, Debug, Default)]
pub struct SourceTable {
    names: Vec<String>,
    index: HashMap<SourceId, u32>,
}

impl SourceTable {
    /// The index of `source`, adding it on first use.
    pub fn index(&mut self, source: SourceId) -> u32 {
        let names = &mut self.names;
        *self.index.entry(source).or_insert_with(|| {
            names.push(source.name().to_string());
            (names.len() - 1) as u32
        })
    }

    /// The names, by index.
    pub fn into_names(self) -> Vec<String> {
        self.names
    }
}
