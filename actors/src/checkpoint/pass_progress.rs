//! The consumers' part of a checkpoint: what was consumed of one pass
//! ([`PassProgress`]: the batches taken, the records in them, the draw's
//! snapshot and the packer's partly delivered documents), and its checks.

use std::collections::BTreeMap;

use feedline::checkpoint::{CheckpointError, CheckpointResult, RecordRanges};
use serde::{Deserialize, Serialize};

use super::doc_pieces::DocPieces;
use super::draw_snapshot::DrawSnapshot;

/// What was consumed of one pass: the batches taken (their numbers, when
/// the pass's numbering is the uninterrupted run's) and the records in them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassProgress {
    /// The pass (0-based).
    pub pass: u64,
    /// True when every batch of the pass was consumed (kept so that the
    /// checkpoints of ranks one pass apart still merge).
    pub complete: bool,
    /// Batches of the pass consumed, over every run that led here.
    pub batches: u64,
    /// True when `seqs` numbers the batches as the uninterrupted run does
    /// (false once the pass was resumed by record filtering, which numbers
    /// the rest of the pass from 0).
    pub by_seq: bool,
    /// The numbers (`seq`) of the consumed batches.
    pub seqs: RecordRanges,
    /// The consumed records, per source index.
    pub records: BTreeMap<u32, RecordRanges>,
    /// The state of the draw before one of the pass's batches, all batches
    /// before it consumed (deterministic mode): a resume starts there
    /// instead of drawing the pass again from its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<DrawSnapshot>,
    /// Packing ([`crate::pack`]): the documents partly delivered — some of
    /// their pieces in consumed batches, not all — per source index; a
    /// resume by record delivers the rest of each. (A document delivered
    /// whole is in `records`.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pieces: BTreeMap<u32, Vec<DocPieces>>,
}

impl PassProgress {
    /// Check this pass's progress alone and against what it holds: its
    /// batch numbers and record ranges sorted and not overlapping, as many
    /// numbers as `batches`, records only where batches were taken; each
    /// partly delivered document's own checks ([`DocPieces::validate`]); a
    /// snapshot of the draw only in a deterministic pass not complete,
    /// numbered by batch, of this pass, before a batch all of whose
    /// predecessors were taken, whose pool adds up
    /// ([`DrawSnapshot::validate`]). `at` names this pass's place in the
    /// checkpoint (`passes[0]`), `sources` is the checkpoint's source table.
    pub fn validate(
        &self,
        at: &str,
        sources: &[String],
        deterministic: bool,
    ) -> CheckpointResult<()> {
        let bad = |field: String, what: String| Err(CheckpointError::Invalid { field, what });
        self.seqs
            .check_sorted()
            .or_else(|what| bad(format!("{at}.seqs"), what))?;
        for (&s, r) in &self.records {
            r.check_sorted().or_else(|what| {
                bad(
                    format!("{at}.records.{s}"),
                    format!("({}): {what}", sources[s as usize]),
                )
            })?;
        }
        if self.by_seq && self.seqs.count() != self.batches {
            return bad(
                format!("{at}.seqs"),
                format!(
                    "numbers {} batches, but `batches` is {}",
                    self.seqs.count(),
                    self.batches
                ),
            );
        }
        if !self.by_seq && !self.seqs.ranges().is_empty() {
            return bad(
                format!("{at}.seqs"),
                "batch numbers in a pass resumed by record (`by_seq` false)".into(),
            );
        }
        if self.batches == 0 && self.records.values().any(|r| r.count() > 0) {
            return bad(
                format!("{at}.records"),
                "consumed records, but `batches` is 0".into(),
            );
        }
        for (&s, docs) in &self.pieces {
            for (k, d) in docs.iter().enumerate() {
                d.validate(&format!("{at}.pieces.{s}[{k}]"))?;
            }
        }
        let Some(s) = &self.snapshot else {
            return Ok(());
        };
        let field = |f: &str| format!("{at}.snapshot.{f}");
        if !deterministic || !self.by_seq || self.complete {
            return bad(
                format!("{at}.snapshot"),
                "a snapshot of the draw belongs to a deterministic pass not complete, numbered by batch".into(),
            );
        }
        if s.pass != self.pass {
            return bad(
                field("pass"),
                format!("is {}, in the progress of pass {}", s.pass, self.pass),
            );
        }
        let first_gap = self.seqs.first_gap();
        if s.seq == 0 || s.seq > first_gap {
            return bad(
                field("seq"),
                format!(
                    "is {}, but the snapshot must be before a batch after 0 all of whose predecessors were taken (batches 0 to {} were)",
                    s.seq,
                    first_gap as i128 - 1
                ),
            );
        }
        s.validate(&field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(batches: u64) -> PassProgress {
        PassProgress {
            pass: 0,
            complete: false,
            batches,
            by_seq: true,
            seqs: RecordRanges::from_records(0..batches),
            records: BTreeMap::from([(0, RecordRanges::from_records(0..batches * 4))]),
            snapshot: None,
            pieces: BTreeMap::new(),
        }
    }

    #[test]
    fn a_pass_progress_that_does_not_add_up_is_refused_naming_the_field() {
        let sources = ["f0".to_string()];
        assert!(taken(3).validate("passes[0]", &sources, false).is_ok());
        type Edit = fn(&mut PassProgress);
        let edits: Vec<(Edit, &str, &str)> = vec![
            (
                |p| p.batches = 4,
                "passes[0].seqs",
                "numbers 3 batches, but `batches` is 4",
            ),
            (|p| p.by_seq = false, "passes[0].seqs", "resumed by record"),
            (
                |p| {
                    p.batches = 0;
                    p.seqs = RecordRanges::default();
                },
                "passes[0].records",
                "`batches` is 0",
            ),
            (
                |p| p.snapshot = Some(DrawSnapshot::default()),
                "passes[0].snapshot",
                "belongs to a deterministic pass",
            ),
            (
                |p| {
                    p.pieces.insert(
                        0,
                        vec![DocPieces {
                            record: 1,
                            tokens: 5,
                            delivered: RecordRanges::from_ranges([[0, 5]]),
                        }],
                    );
                },
                "passes[0].pieces.0[0]",
                "every token delivered",
            ),
        ];
        for (edit, at, words) in edits {
            let mut p = taken(3);
            edit(&mut p);
            match p.validate("passes[0]", &sources, false) {
                Err(CheckpointError::Invalid { field, what }) => {
                    assert_eq!(field, at);
                    assert!(what.contains(words), "{at}: {what}");
                }
                other => panic!("{at}: expected Invalid, got {other:?}"),
            }
        }
    }
}
