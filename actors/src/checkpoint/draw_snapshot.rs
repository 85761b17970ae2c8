//! The shuffle stage's part of a checkpoint: the state of a deterministic
//! draw between two batches ([`DrawSnapshot`]: the pool's chunks by
//! reference, [`ChunkRef`], its rows, the random stream's position, where
//! reading goes on), and its checks.

use feedline::checkpoint::{CheckpointError, CheckpointResult};
use serde::{Deserialize, Serialize};

/// A chunk of the shuffle pool by reference: the `chunk`-th chunk of the
/// `file`-th file of the pass (in this rank's order), read from record
/// `start` on; its rows still in the pool are named by their records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// The file's position in the pass's order.
    pub file: u64,
    /// The chunk's index in the file.
    pub chunk: u64,
    /// The record its reading started at.
    pub start: u64,
    /// Its instances (after the rank's stride).
    pub rows: u64,
    /// The bytes the pool counted it for.
    pub bytes: u64,
}

/// The state of a deterministic draw just before batch `seq` of `pass` —
/// the shuffle pool's chunks (by reference, [`ChunkRef`]) and rows, the
/// position of its random stream, where reading goes on — so that a
/// resumed run draws from there what the uninterrupted run drew, without
/// drawing the pass again from its start. Provenance, not data: ~8 bytes
/// per pooled instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawSnapshot {
    /// The pass.
    pub pass: u64,
    /// The number of the next batch drawn.
    pub seq: u64,
    /// By pool slot: its chunk (`None`: a free slot).
    pub chunks: Vec<Option<ChunkRef>>,
    /// The pool's rows in pool order: the slot of each…
    pub row_slots: Vec<u32>,
    /// …and its record (index in its file).
    pub row_records: Vec<u64>,
    /// The free slots, in reuse order.
    pub free_slots: Vec<u32>,
    /// Capacities of the pool's row, slot and free-slot tables.
    pub capacities: [u64; 3],
    /// The random stream's word position.
    pub word_pos: u64,
    /// The next chunk to take into the pool: the file's position in the
    /// pass's order…
    pub next_file: u64,
    /// …the chunk's index in it…
    pub next_chunk: u64,
    /// …and the record its reading starts at (`None`: the file's start).
    pub next_record: Option<u64>,
    /// Instances taken into the pool in the pass so far.
    pub pass_records: u64,
    /// Rows into and out of the batcher in the pass so far.
    pub batcher_rows: [u64; 2],
}

impl DrawSnapshot {
    /// Check the pool alone: every row naming a slot that holds a chunk,
    /// no more rows in a slot than its chunk has, no record twice in a slot
    /// nor before its chunk's first, every chunk with a row, the free
    /// slots exactly the empty ones (each once), capacities at least the
    /// tables' lengths, the instances taken at least the pooled rows, the
    /// byte counts adding up. `field` names a field of this snapshot.
    pub fn validate(&self, field: &dyn Fn(&str) -> String) -> CheckpointResult<()> {
        let bad = |f: String, what: String| Err(CheckpointError::Invalid { field: f, what });
        if self.row_slots.len() != self.row_records.len() {
            return bad(
                field("row_records"),
                format!(
                    "{} records for {} rows (`row_slots`)",
                    self.row_records.len(),
                    self.row_slots.len()
                ),
            );
        }
        let n = self.chunks.len();
        let mut held = 0u64;
        for (j, c) in self.chunks.iter().enumerate() {
            if let Some(c) = c {
                if c.rows == 0 {
                    return bad(field(&format!("chunks[{j}].rows")), "is 0".into());
                }
                held = match held.checked_add(c.bytes) {
                    Some(h) => h,
                    None => {
                        return bad(
                            field(&format!("chunks[{j}].bytes")),
                            format!("{} bytes: the pool's bytes overflow", c.bytes),
                        )
                    }
                };
            }
        }
        let mut free = vec![false; n];
        for (k, &f) in self.free_slots.iter().enumerate() {
            let f = f as usize;
            let what = match self.chunks.get(f) {
                None => format!("slot {f} is out of range: the pool has {n} slots"),
                Some(Some(_)) => format!("slot {f} is in use: it holds a chunk"),
                Some(None) if free[f] => format!("slot {f} is given twice"),
                Some(None) => {
                    free[f] = true;
                    continue;
                }
            };
            return bad(field(&format!("free_slots[{k}]")), what);
        }
        if let Some(j) = (0..n).find(|&j| self.chunks[j].is_none() && !free[j]) {
            return bad(
                field("free_slots"),
                format!("slot {j} holds no chunk but is not among the free slots"),
            );
        }
        let mut rows: Vec<Vec<u64>> = vec![Vec::new(); n];
        for (k, (&slot, &record)) in self.row_slots.iter().zip(&self.row_records).enumerate() {
            let c = match self.chunks.get(slot as usize) {
                None => {
                    return bad(
                        field(&format!("row_slots[{k}]")),
                        format!("slot {slot} is out of range: the pool has {n} slots"),
                    )
                }
                Some(None) => {
                    return bad(
                        field(&format!("row_slots[{k}]")),
                        format!("slot {slot} is free: it holds no chunk"),
                    )
                }
                Some(Some(c)) => c,
            };
            if record < c.start {
                return bad(
                    field(&format!("row_records[{k}]")),
                    format!(
                        "record {record} is before the first record ({}) of its chunk in slot {slot}",
                        c.start
                    ),
                );
            }
            rows[slot as usize].push(record);
        }
        for (j, (r, c)) in rows.iter_mut().zip(&self.chunks).enumerate() {
            let Some(c) = c else { continue };
            if r.is_empty() {
                return bad(
                    field(&format!("chunks[{j}]")),
                    format!("slot {j} holds a chunk but no row of the pool"),
                );
            }
            if r.len() as u64 > c.rows {
                return bad(
                    field("row_slots"),
                    format!(
                        "{} rows name slot {j}, whose chunk has {} rows",
                        r.len(),
                        c.rows
                    ),
                );
            }
            r.sort_unstable();
            if let Some(w) = r.windows(2).find(|w| w[0] == w[1]) {
                return bad(
                    field("row_records"),
                    format!("record {} is in slot {j} twice", w[0]),
                );
            }
        }
        let lens = [self.row_slots.len(), n, self.free_slots.len()];
        for (k, (&cap, len)) in self.capacities.iter().zip(lens).enumerate() {
            if cap < len as u64 {
                return bad(
                    field(&format!("capacities[{k}]")),
                    format!("is {cap}, less than the {len} entries of its table"),
                );
            }
        }
        // Every instance taken into the pool is in it or was drawn into a
        // batch, and the snapshot is taken between batches.
        let [into, out] = self.batcher_rows;
        if into != out {
            return bad(
                field("batcher_rows"),
                format!("{into} rows into the batcher but {out} out of it, between two batches"),
            );
        }
        if self.pass_records.checked_sub(into) != Some(self.row_slots.len() as u64) {
            return bad(
                field("pass_records"),
                format!(
                    "is {}, but the pool holds {} rows and {into} were drawn: the pool's rows do not add up",
                    self.pass_records,
                    self.row_slots.len()
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A pool of two chunks (4 and 2 rows) in slots 0 and 2, slot 1 free,
    /// 10 records taken and 7 drawn: 3 rows pooled.
    pub(in crate::checkpoint) fn pool() -> DrawSnapshot {
        let chunk = |file, start, rows, bytes| {
            Some(ChunkRef {
                file,
                chunk: 0,
                start,
                rows,
                bytes,
            })
        };
        DrawSnapshot {
            pass: 1,
            seq: 3,
            chunks: vec![chunk(0, 0, 4, 100), None, chunk(1, 10, 2, 50)],
            row_slots: vec![0, 0, 2],
            row_records: vec![1, 3, 11],
            free_slots: vec![1],
            capacities: [8, 4, 4],
            word_pos: 14,
            next_file: 2,
            next_chunk: 0,
            next_record: None,
            pass_records: 10,
            batcher_rows: [7, 7],
        }
    }

    #[test]
    fn a_pool_that_does_not_add_up_is_refused_naming_the_field() {
        let field = |f: &str| format!("snap.{f}");
        assert!(pool().validate(&field).is_ok());
        type Edit = fn(&mut DrawSnapshot);
        let edits: Vec<(Edit, &str, &str)> = vec![
            (
                |s| s.free_slots = vec![0],
                "snap.free_slots[0]",
                "slot 0 is in use",
            ),
            (
                |s| s.row_slots[2] = 1,
                "snap.row_slots[2]",
                "slot 1 is free",
            ),
            (
                |s| s.row_records[1] = 1,
                "snap.row_records",
                "record 1 is in slot 0 twice",
            ),
            (
                |s| s.row_records[2] = 9,
                "snap.row_records[2]",
                "before the first record (10)",
            ),
            (
                |s| s.capacities[0] = 2,
                "snap.capacities[0]",
                "less than the 3 entries",
            ),
            (
                |s| s.pass_records = 11,
                "snap.pass_records",
                "do not add up",
            ),
            (
                |s| s.batcher_rows = [7, 6],
                "snap.batcher_rows",
                "between two batches",
            ),
        ];
        for (edit, at, words) in edits {
            let mut s = pool();
            edit(&mut s);
            match s.validate(&field) {
                Err(CheckpointError::Invalid { field, what }) => {
                    assert_eq!(field, at);
                    assert!(what.contains(words), "{at}: {what}");
                }
                other => panic!("{at}: expected Invalid, got {other:?}"),
            }
        }
    }
}
