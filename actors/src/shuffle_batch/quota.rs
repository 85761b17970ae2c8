//! The equalize quota: when data-parallel ranks must get the same number of
//! batches (unequal counts hang collective ops), the file queue gives this
//! rank its share of each pass — keep the first `keep` instances drawn,
//! then repeat `pad` of them. This part counts what was drawn, drops what is
//! past the share, and keeps the first rows drawn to repeat as padding.
//!
//! Generic over the row type `R`, so it is tested without actors.

use serde::{Deserialize, Serialize};

/// This rank's share of a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Share {
    /// The pass.
    pub pass: u64,
    /// Instances to keep.
    pub keep: u64,
    /// Instances to repeat at the end.
    pub pad: u64,
}

/// The quota; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct EqualizeQuota<R> {
    share: Option<Share>,
    /// Instances drawn this pass.
    drawn: u64,
    /// The first rows drawn, kept to repeat.
    pad_rows: Vec<R>,
}

/// The quota's state as a plain value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct QuotaState<P> {
    /// The share in force.
    pub share: Option<Share>,
    /// Instances drawn this pass.
    pub drawn: u64,
    /// The rows kept to repeat, as the caller describes them.
    pub pad_rows: Vec<P>,
}

/// What to do with a drawn row.
#[derive(Debug, PartialEq)]
pub(crate) enum Drawn<R> {
    /// Into a batch.
    Keep(R),
    /// Past this rank's share: left out.
    Drop,
}

/// Padding asked for that cannot be given.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("pass {pass}: {pad} padding instances asked, none to repeat")]
pub(crate) struct NothingToRepeat {
    /// The pass.
    pub pass: u64,
    /// The padding asked.
    pub pad: u64,
}

impl<R: Clone> EqualizeQuota<R> {
    /// No share: every row is kept.
    pub fn new() -> Self {
        EqualizeQuota {
            share: None,
            drawn: 0,
            pad_rows: Vec::new(),
        }
    }

    /// This rank's share of a pass (given before its first row).
    pub fn set(&mut self, share: Share) {
        self.share = Some(share);
        self.pad_rows.clear();
    }

    fn share_of(&self, pass: u64) -> Option<Share> {
        self.share.filter(|s| s.pass == pass)
    }

    /// A row of `pass` was drawn.
    pub fn draw(&mut self, pass: u64, row: R) -> Drawn<R> {
        if let Some(s) = self.share_of(pass) {
            if self.drawn >= s.keep {
                return Drawn::Drop;
            }
            if (self.pad_rows.len() as u64) < s.pad {
                self.pad_rows.push(row.clone());
            }
        }
        self.drawn += 1;
        Drawn::Keep(row)
    }

    /// The end of `pass`: the rows to repeat (the first drawn, cycled to
    /// the padding asked); the count starts again for the next pass.
    pub fn end_pass(&mut self, pass: u64) -> Result<Vec<R>, NothingToRepeat> {
        self.drawn = 0;
        let rows = std::mem::take(&mut self.pad_rows);
        let Some(s) = self.share_of(pass) else {
            return Ok(Vec::new());
        };
        if s.pad > 0 && rows.is_empty() {
            return Err(NothingToRepeat { pass, pad: s.pad });
        }
        Ok((0..s.pad as usize)
            .map(|i| rows[i % rows.len()].clone())
            .collect())
    }

    /// The state, each kept row described by `describe`.
    pub fn state<P>(&self, describe: impl Fn(&R) -> P) -> QuotaState<P> {
        QuotaState {
            share: self.share,
            drawn: self.drawn,
            pad_rows: self.pad_rows.iter().map(describe).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(q: &mut EqualizeQuota<u32>, pass: u64, rows: std::ops::Range<u32>) -> Vec<u32> {
        rows.filter_map(|r| match q.draw(pass, r) {
            Drawn::Keep(r) => Some(r),
            Drawn::Drop => None,
        })
        .collect()
    }

    #[test]
    fn without_a_share_every_row_is_kept_and_nothing_padded() {
        let mut q = EqualizeQuota::new();
        assert_eq!(drawn(&mut q, 0, 0..5), [0, 1, 2, 3, 4]);
        assert_eq!(q.end_pass(0), Ok(vec![]));
    }

    #[test]
    fn rows_past_the_share_are_dropped() {
        let mut q = EqualizeQuota::new();
        q.set(Share {
            pass: 0,
            keep: 3,
            pad: 0,
        });
        assert_eq!(drawn(&mut q, 0, 0..5), [0, 1, 2]);
        assert_eq!(q.state(|r| *r).drawn, 3);
        assert_eq!(q.end_pass(0), Ok(vec![]));
        // A share of another pass does not apply.
        assert_eq!(drawn(&mut q, 1, 0..5).len(), 5);
    }

    #[test]
    fn padding_repeats_the_first_rows_drawn_cycled() {
        let mut q = EqualizeQuota::new();
        q.set(Share {
            pass: 2,
            keep: 10,
            pad: 5,
        });
        assert_eq!(drawn(&mut q, 2, 7..10), [7, 8, 9]);
        let s = q.state(|r| r.to_string());
        assert_eq!(s.pad_rows, ["7", "8", "9"]);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            serde_json::from_str::<QuotaState<String>>(&json).unwrap(),
            s
        );
        assert_eq!(q.end_pass(2), Ok(vec![7, 8, 9, 7, 8]));
        assert_eq!(q.state(|r| *r).drawn, 0);
    }

    #[test]
    fn padding_with_nothing_to_repeat_is_an_error() {
        let mut q = EqualizeQuota::<u32>::new();
        q.set(Share {
            pass: 0,
            keep: 0,
            pad: 4,
        });
        let e = q.end_pass(0).unwrap_err();
        assert_eq!(e, NothingToRepeat { pass: 0, pad: 4 });
        assert_eq!(
            e.to_string(),
            "pass 0: 4 padding instances asked, none to repeat"
        );
    }
}
