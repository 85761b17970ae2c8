//! The packer's part of a checkpoint: a document partly delivered
//! ([`DocPieces`]: its record, its tokens, the token ranges delivered), and
//! its checks.

use feedline::checkpoint::{CheckpointError, CheckpointResult, RecordRanges};
use serde::{Deserialize, Serialize};

/// A document partly delivered by packing: its record, its tokens as
/// packed, the token ranges of it delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocPieces {
    /// The record (the document) in its source.
    pub record: u64,
    /// Its tokens as packed (after truncation).
    pub tokens: u64,
    /// The token ranges delivered: sorted, within `[0, tokens)`, not all of it.
    pub delivered: RecordRanges,
}

impl DocPieces {
    /// Check it alone: its delivered token ranges sorted, not overlapping,
    /// some and within the document, not all of it (a document delivered
    /// whole is a consumed record). `field` names it in the checkpoint.
    pub fn validate(&self, field: &str) -> CheckpointResult<()> {
        let bad = |what: String| {
            Err(CheckpointError::Invalid {
                field: field.to_string(),
                what,
            })
        };
        self.delivered.check_sorted().or_else(bad)?;
        let end = self.delivered.end();
        if self.delivered.ranges().is_empty() || end > self.tokens {
            return bad(format!(
                "delivered token ranges {:?} of a document of {} tokens: expected some, within it",
                self.delivered.ranges(),
                self.tokens
            ));
        }
        if *self.delivered.ranges() == [[0, self.tokens]] {
            return bad(format!(
                "record {}: every token delivered, so it belongs in `records`",
                self.record
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(delivered: RecordRanges) -> DocPieces {
        DocPieces {
            record: 4,
            tokens: 10,
            delivered,
        }
    }

    #[test]
    fn a_document_partly_delivered_is_some_of_it_within_it() {
        assert!(doc(RecordRanges::from_ranges([[0, 4]]))
            .validate("d")
            .is_ok());
        let cases = [
            (RecordRanges::default(), "expected some, within it"),
            (
                RecordRanges::from_ranges([[5, 12]]),
                "expected some, within it",
            ),
            (
                RecordRanges::from_ranges([[0, 10]]),
                "record 4: every token delivered",
            ),
            (RecordRanges::unchecked(vec![[5, 6], [0, 2]]), ""),
        ];
        for (delivered, words) in cases {
            match doc(delivered.clone()).validate("d") {
                Err(CheckpointError::Invalid { field, what }) => {
                    assert_eq!(field, "d");
                    assert!(what.contains(words), "{delivered:?}: {what}");
                }
                other => panic!("{delivered:?}: expected Invalid, got {other:?}"),
            }
        }
    }
}
