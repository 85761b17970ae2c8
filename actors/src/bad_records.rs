//! The bad-record policy, in one place: what a bad record does under the
//! pipeline's [`ErrorPolicy`] — fail the pipeline with it, or skip it
//! (logged, counted, listed with its place) until the count budget
//! (`max_bad`) is exceeded —, the per-pass fraction (`max_bad_fraction`)
//! judged once a pass's last batch is made, and whether the readers may
//! defer checksums to collation.
//!
//! The readers (a record that cannot be read, or the unreadable rest of a
//! file) and the batch maker (an instance whose transform failed) both
//! judge through a [`BadRecords`] made by the wiring site; neither knows
//! the budgets.

use std::sync::Arc;

use crate::config::ErrorPolicy;
use crate::error::PipelineError;
use crate::recorder::BadRecordRecorder;
use crate::stats::SkippedRecord;

/// True when, under `policy`, a record's checksum may be checked when its
/// bytes are copied into a batch rather than when it is read: only when a
/// bad record fails the pipeline — a record to skip must be found bad by
/// its reader, which can skip it.
pub(crate) fn checksums_may_wait(policy: &ErrorPolicy) -> bool {
    matches!(policy, ErrorPolicy::Fail)
}

/// The bad-record policy of one pipeline, and where skipped records are
/// counted (shared by every stage that finds bad records).
#[derive(Clone)]
pub(crate) struct BadRecords {
    policy: ErrorPolicy,
    recorder: BadRecordRecorder,
    /// The count budget is each pass's own (an endless run, whose total
    /// would exceed any budget in time).
    per_pass: bool,
}

impl BadRecords {
    /// The policy `policy`, counting through `recorder`.
    pub fn new(policy: ErrorPolicy, recorder: BadRecordRecorder) -> Self {
        BadRecords {
            policy,
            recorder,
            per_pass: false,
        }
    }

    /// Judge the count budget (`max_bad`) on each pass's bad records
    /// (true) or on the run's (false, the default): an endless run
    /// ([`ENDLESS`](crate::config::ENDLESS) passes) judges per pass.
    pub fn per_pass(mut self, yes: bool) -> Self {
        self.per_pass = yes;
        self
    }

    /// A bad record in `pass` — `rec.records` of them: one, a run read
    /// together, or the rest of a file (what the count budget judges) —,
    /// whose error is `e`: `Ok` when it is skipped (logged,
    /// counted and listed), else the pipeline's error: `e` itself under
    /// [`ErrorPolicy::Fail`], [`PipelineError::TooManyBad`] once the count
    /// budget is exceeded.
    pub fn judge(
        &self,
        rec: SkippedRecord,
        pass: u64,
        e: feedline::Error,
    ) -> Result<(), PipelineError> {
        let ErrorPolicy::Skip { max_bad, .. } = self.policy else {
            return Err(e.into());
        };
        log::warn!("skipping {rec}");
        let e = Arc::new(e);
        let mut bad = self.recorder.skipped(rec, pass, e.clone());
        if self.per_pass {
            bad = self.recorder.bad_in_pass(pass).map_or(bad, |(n, _)| n);
        }
        match max_bad {
            Some(m) if bad > m => Err(PipelineError::TooManyBad {
                bad,
                budget: if self.per_pass {
                    format!("{m} records in pass {pass}")
                } else {
                    format!("{m} records")
                },
                last: e,
            }),
            _ => Ok(()),
        }
    }

    /// The fraction budget, once every batch of `pass` is made: `read` of
    /// its records reached the shuffle pool (the bad ones counted besides).
    /// Judged on the whole pass, so the verdict is the same whatever the
    /// reader and worker counts and the timing.
    pub fn judge_pass(&self, pass: u64, read: u64) -> Result<(), PipelineError> {
        let ErrorPolicy::Skip {
            max_bad_fraction: Some(f),
            ..
        } = self.policy
        else {
            return Ok(());
        };
        let Some((bad, last)) = self.recorder.bad_in_pass(pass) else {
            return Ok(());
        };
        let read = read + bad;
        if (bad as f64) <= f * read as f64 {
            return Ok(());
        }
        Err(PipelineError::TooManyBad {
            bad,
            budget: format!(
                "{:.3}% of the records of a pass ({read} records in pass {pass})",
                f * 100.0
            ),
            last,
        })
    }
}
