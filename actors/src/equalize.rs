//! Equal batch counts per rank (`equalize`: drop or pad), the arithmetic
//! in one place: every file's records counted once at start-up
//! ([`count_records`]), each rank's records of a pass — whole, or what a
//! resume left ([`EqualizeRanks::quota`]) — and this rank's share of them
//! (keep, drop, pad). The file queue tells the shuffle stage the share of
//! each pass; the shuffle stage applies it to its draw (`shuffle_batch/quota.rs`).
//! With packing, ranks are equalized in packed rows instead ([`packed`]).

mod packed;

use feedline::plan::{equalized_counts, Equalize, EqualizedCount, PassPlan};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::resume_plan::FileQueueResume;
use crate::stall::within_stall_timeout;
pub(crate) use packed::{count_tokens, PackedRanks};

/// Equalizing ranks: records per file (by `FileTask::file_index`), the
/// batch size, drop_last and how.
pub(crate) struct EqualizeRanks {
    pub counts: Vec<u64>,
    /// Every file's path as a checkpoint names it (a resume's sources).
    pub sources: Vec<String>,
    pub batch: usize,
    pub drop_last: bool,
    pub how: Equalize,
}

/// This rank's share of a pass, and every rank's records it comes from.
#[derive(Clone, Debug)]
pub(crate) struct Quota {
    /// Every rank's records in the pass (what a resume left, when resumed).
    pub per_rank: Vec<u64>,
    /// This rank's share.
    pub mine: EqualizedCount,
    /// The pass was resumed elastically (another shard).
    pub elastic: bool,
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ranks have {:?} records{}; this rank keeps {}, drops {}, pads {} ({} batches)",
            self.per_rank,
            if self.elastic {
                " left (elastic resume)"
            } else {
                ""
            },
            self.mine.keep,
            self.mine.drop,
            self.mine.pad,
            self.mine.batches
        )
    }
}

impl EqualizeRanks {
    /// This rank's share of `pass` of `plan`, from every rank's records in
    /// it; an error (naming the ranks' records) if ranks cannot be
    /// equalized.
    ///
    /// What "equal" means on a pass resumed by record (shuffled mode, or
    /// another shard):
    /// - elastic resume (the checkpoints of all old ranks, merged, or another
    ///   rank/world size): each new rank's records are its piece of what the
    ///   old ranks left of the pass (`ResumePlan::rebalance`; with file sets,
    ///   its files' remainders); [`equalized_counts`] over these gives every new
    ///   rank the same number of batches (and batch sizes) in the resumed
    ///   pass, dropping or padding only by its rule applied to the
    ///   remainders;
    /// - same shard (one checkpoint, shuffled): the rank's quota of the
    ///   uninterrupted pass less what it delivered before the stop (batches ×
    ///   batch size; kept instances first, then pads), so that before + after
    ///   deliver exactly the uninterrupted pass's batch count;
    ///
    /// later passes are equalized as usual.
    pub fn quota(
        &self,
        plan: &PassPlan,
        pass: u64,
        resume: Option<&FileQueueResume>,
    ) -> Result<Quota, String> {
        let world = plan.get_shard().world_size;
        let resumed = resume.and_then(|r| r.batches_taken(pass).map(|b| (r, b)));
        let elastic = resumed.filter(|(r, _)| r.elastic()).map(|(r, _)| r);
        let spread = resumed.and_then(|(r, _)| r.spread_sizes(pass));
        let per_rank: Vec<u64> = (0..world)
            .map(|r| {
                if let Some(sizes) = spread {
                    return sizes.get(r).copied().unwrap_or(0);
                }
                plan.for_rank(r).map_or(0, |p| {
                    p.tasks(pass)
                        .iter()
                        .map(|t| {
                            let total = self.counts[t.file_index];
                            let all = t.stride.count_from(t.start_record, total);
                            let taken = elastic.map_or(0, |res| {
                                res.taken_of(
                                    pass,
                                    &self.sources[t.file_index],
                                    &t.stride,
                                    t.start_record,
                                    total,
                                )
                            });
                            all - taken.min(all)
                        })
                        .sum()
                })
            })
            .collect();
        let rank = plan.get_shard().rank;
        let batch = self.batch as u64;
        let mine =
            equalized_counts(&per_rank, self.batch, self.drop_last, self.how).and_then(|c| {
                let mine = c[rank];
                match resumed {
                    Some((r, batches)) if !r.elastic() => {
                        resumed_quota(mine, batches * batch, batch, pass, rank)
                    }
                    _ => Ok(mine),
                }
            });
        match mine {
            Ok(mine) => Ok(Quota {
                per_rank,
                mine,
                elastic: elastic.is_some(),
            }),
            Err(e) => Err(format!(
                "ranks have {per_rank:?} records{}: {e}",
                if elastic.is_some() {
                    " left after the resumed checkpoints"
                } else {
                    ""
                },
            )),
        }
    }
}

/// Records per file (in `config.files` order), for equalizing ranks: the
/// format's own count where it has one, else a read through the file —
/// each within the stall timeout. With each, the file's source name as its
/// records (and so a checkpoint) name it — read from its first record when
/// the pipeline is `resumed` (a resumed pass counts what is left of a file),
/// else (or when the file has none or it cannot be read) the resolved path.
pub(crate) fn count_records(
    config: &PipelineConfig,
    resumed: bool,
) -> Result<(Vec<u64>, Vec<String>), PipelineError> {
    let mut counts = Vec::with_capacity(config.inputs.files.len());
    let mut sources = Vec::with_capacity(config.inputs.files.len());
    // Equalize counts the records a read yields; an elastic resume alone
    // only needs where each file's records end.
    let counts_bad = config.batching.equalize != Equalize::Off;
    for f in &config.inputs.files {
        let (registry, format, open, file) = (
            config.inputs.registry.clone(),
            config.inputs.format.clone(),
            config.reading.open.clone(),
            f.clone(),
        );
        let (n, source) = within_stall_timeout(
            config.faults.stall_timeout,
            f,
            "counting its records",
            move || {
                let resolved = match registry.resolve(&file, format.as_deref()) {
                    Ok((_, path, _)) => path.to_string_lossy().into_owned(),
                    Err(_) => file.clone(),
                };
                let mut r = registry.open(&file, format.as_deref(), &open)?;
                let first = |r: &mut Box<dyn feedline::format::RecordReader>| match r.next_record()
                {
                    Ok(Some(rec)) => rec.location.source.name().to_string(),
                    _ => resolved.clone(),
                };
                if let Some(n) = r.len_hint() {
                    let source = if resumed && n > 0 {
                        first(&mut r)
                    } else {
                        resolved.clone()
                    };
                    return Ok((n, source));
                }
                if !counts_bad {
                    // An elastic resume alone: frame past every record (formats
                    // that can do without decoding, such as TFRecord).
                    let source = if resumed {
                        first(&mut r)
                    } else {
                        resolved.clone()
                    };
                    r.skip_to(u64::MAX)?;
                    let _ = r.next_record()?;
                    return Ok((r.next_index(), source));
                }
                let mut n = 0;
                let mut source = resolved.clone();
                while let Some(rec) = r.next_record()? {
                    if n == 0 {
                        source = rec.location.source.name().to_string();
                    }
                    n += 1;
                }
                Ok((n, source))
            },
        )??;
        counts.push(n);
        sources.push(source);
    }
    Ok((counts, sources))
}

/// A rank's quota of a pass resumed on the same shard: `whole` (the quota of
/// the uninterrupted pass) less the `delivered` instances before the stop —
/// kept instances first, then pads (the pipeline pads after the kept ones).
/// An error when pads are left but every kept instance was delivered before
/// the stop (the resumed run has nothing of its own to repeat).
fn resumed_quota(
    whole: EqualizedCount,
    delivered: u64,
    batch: u64,
    pass: u64,
    rank: usize,
) -> feedline::Result<EqualizedCount> {
    let kept_before = delivered.min(whole.keep);
    let padded_before = (delivered - kept_before).min(whole.pad);
    let keep = whole.keep - kept_before;
    let pad = whole.pad - padded_before;
    if keep == 0 && pad > 0 {
        return Err(feedline::Error::Config(format!(
            "rank {rank} stopped in pass {pass} after all its {} kept instances: the {pad} pads left repeat instances delivered before the stop, which a resume does not have; resume in deterministic mode or with another checkpoint",
            whole.keep
        )));
    }
    Ok(EqualizedCount::of(
        whole.available - kept_before,
        keep,
        pad,
        batch,
    ))
}
