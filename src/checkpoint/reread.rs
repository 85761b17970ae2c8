//! Records re-read by reference: what a resume needs of the records a
//! checkpoint names (a pool's, a partial batch's), each file read once.

use std::collections::{BTreeMap, HashMap};

use super::{CheckpointError, CheckpointResult};
use crate::format::{OpenOptions, Registry};
use crate::{Origin, Record, SourceId};

/// Re-read the records `wanted` refers to, each file once: its needed
/// indices sorted, opened at the smallest, read in order keeping only the
/// needed records and stopping after the largest. Memory: the needed
/// records only. Returns the records in `wanted`'s order (a reference
/// given twice gets its record twice).
pub fn reread(
    registry: &Registry,
    wanted: &[Origin],
    opts: &OpenOptions,
) -> CheckpointResult<Vec<Record>> {
    let mut by_source: BTreeMap<SourceId, Vec<u64>> = BTreeMap::new();
    for o in wanted {
        by_source.entry(o.source).or_default().push(o.record);
    }
    let mut found: HashMap<Origin, Record> = HashMap::with_capacity(wanted.len());
    for (source, mut records) in by_source {
        records.sort_unstable();
        records.dedup();
        let name = source.name();
        let open = OpenOptions {
            start_record: records[0],
            ..opts.clone()
        };
        let mut reader = registry.open(&name, None, &open)?;
        let mut need = records.iter().copied().peekable();
        while let Some(&next) = need.peek() {
            let index = reader.next_index();
            match reader.next_record()? {
                None => {
                    return Err(CheckpointError::MissingRecord {
                        source_name: name.to_string(),
                        record: next,
                        end: index,
                    })
                }
                Some(rec) if index == next => {
                    need.next();
                    found.insert(Origin::new(source, index), rec);
                }
                Some(_) => {}
            }
        }
    }
    Ok(wanted.iter().map(|o| found[o].clone()).collect())
}
