//! Going on from checkpoints: the [`ResumePlan`] of one checkpoint, or of
//! the merged checkpoints of every rank of a job, made once
//! ([`ResumePlan::new`], for the Loader, the pipeline and the command
//! alike), then cut into the part each stage needs ([`ResumePlan::parts`]),
//! handed over at wiring: the file queue's (first pass, rebalanced files,
//! where a snapshot's draw reads on), the readers' (records to skip), the
//! shuffle stage's (batches to leave out, the draw's snapshot), the
//! consumers' (batch numbers to skip, the progress they start from).
//! Taking progress for checkpoints is `progress`'s.
//!
//! A resumed pipeline starts at the first pass not complete and continues
//! in one of two ways, chosen per resume:
//! - **by batch number** (one checkpoint, same rank and world size,
//!   deterministic mode): the pass is made again exactly as the
//!   uninterrupted run makes it — the same records, the same order —, and
//!   the batches already consumed are left out after the draw, before
//!   collation. What follows is identical to the uninterrupted run, with
//!   the same batch numbers, whatever the reader or device counts.
//! - **by record** (every other case: shuffled mode, elastic resume under
//!   another rank or world size): the readers drop the records the
//!   checkpoints say were consumed (in any rank), so the pass delivers
//!   exactly the rest, numbered from 0. In an elastic resume (one file
//!   set) what is left of each resumed pass is split between the new ranks
//!   record by record, in consecutive pieces whose sizes differ by at most
//!   one (`ResumePlan::rebalance`, from every file's record count), so
//!   every remaining instance is delivered once and the ranks are even;
//!   with file sets every file's remainder goes to the new rank the plan
//!   gives it.
//!
//! Later passes run as they would have.
//!
//! Under `equalize`, a pass resumed by record is equalized on what remains
//! (see `FileQueue::send_quota`): in an elastic resume every new rank
//! delivers the same number of batches in the resumed pass, `Drop`/`Pad`
//! applied to the new ranks' remainders (even pieces, so `Drop` leaves out
//! at most one record per rank and `Pad` repeats at most one); a shuffled
//! resume on the same shard delivers the uninterrupted pass's quota less
//! what it delivered before the stop.
//!
//! [`LoaderBuilder::resume`](crate::LoaderBuilder::resume) makes one; an
//! actix embedder sets [`StartOptions::resume`](crate::StartOptions), as
//! `feedline run --resume` does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::checkpoint::{Checkpoint, CheckpointError, DrawSnapshot, PassProgress, RecordRanges};
use feedline::plan::Equalize;
use feedline::{Chunk, Origin, SourceId};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::progress::{CheckpointBase, PassTaken, Progress};

mod check;

fn merge_error(what: String) -> PipelineError {
    PipelineError::Checkpoint(Arc::new(CheckpointError::Merge(what)))
}

/// A pass of an elastic resume split record by record between the new
/// ranks ([`ResumePlan::rebalance`]).
#[derive(Clone, Debug)]
struct Spread {
    /// The files (by index in the plan) holding this rank's share, in the
    /// pass's order.
    files: Vec<usize>,
    /// Records of every new rank's share (differing by at most one).
    sizes: Vec<u64>,
}

/// `[0, total)` less `ranges` (sorted, disjoint).
fn complement(ranges: &[[u64; 2]], total: u64) -> Vec<[u64; 2]> {
    let mut out = Vec::new();
    let mut at = 0;
    for &[s, e] in ranges {
        let (s, e) = (s.min(total), e.min(total));
        if s > at {
            out.push([at, s]);
        }
        at = at.max(e);
    }
    if at < total {
        out.push([at, total]);
    }
    out
}

/// How a resumed pass goes on.
#[derive(Clone, Debug)]
enum Rule {
    /// Leave out the batches of these numbers (after the draw).
    Batches(RecordRanges),
    /// Leave out these records (on the readers).
    Records(HashMap<SourceId, RecordRanges>),
    /// Every batch was consumed (all passes were): read nothing.
    Nothing,
}

/// Where a resumed pipeline starts and what it leaves out; see the module
/// doc. Made once ([`ResumePlan::new`]) and cut into the stages' parts
/// ([`ResumePlan::parts`]) by the wiring site.
#[derive(Clone, Debug)]
pub struct ResumePlan {
    first_pass: u64,
    rules: BTreeMap<u64, Rule>,
    /// The progress the resumed run starts from.
    taken: BTreeMap<u64, PassTaken>,
    done_before: u64,
    by_record: bool,
    /// True when the checkpoints are of another shard (several merged, or
    /// another rank or world size): an elastic resume.
    elastic: bool,
    /// Per pass rebalanced by [`ResumePlan::rebalance`]: the files this
    /// rank reads (whole, by index in the plan) and every new rank's share.
    spread: BTreeMap<u64, Spread>,
    /// Where the draw of the first pass starts (by batch number only).
    snapshot: Option<Arc<DrawSnapshot>>,
    /// The snapshot's field in its checkpoint (`passes[0].snapshot`).
    snapshot_field: String,
    /// Packing, per pass resumed by record: the token ranges delivered of
    /// each document partly delivered.
    delivered: BTreeMap<u64, feedline::pack::Delivered>,
}

impl ResumePlan {
    /// The inputs unchanged since every checkpoint and its settings
    /// those of `now` (a version-1 checkpoint's as it recorded them).
    fn same_inputs_and_settings(
        checkpoints: &[Checkpoint],
        now: &CheckpointBase,
    ) -> Result<(), PipelineError> {
        let cp_err = |e: CheckpointError| PipelineError::Checkpoint(Arc::new(e));
        for cp in checkpoints {
            cp.inputs.check_unchanged(&now.inputs).map_err(cp_err)?;
            // A version-1 checkpoint recorded the settings as text.
            let settings = match cp.version {
                1 => &now.legacy_settings,
                _ => &now.settings,
            };
            cp.settings
                .check_compatible(settings, &[])
                .map_err(cp_err)?;
        }
        Ok(())
    }

    /// How a pipeline identified by `now`, of `pass_count` passes, goes on
    /// from `checkpoints` ([`ResumePlan::new`] with the settings' parts).
    pub(crate) fn plan(
        checkpoints: &[Checkpoint],
        now: &CheckpointBase,
        pass_count: u64,
        equalize: Equalize,
    ) -> Result<Self, PipelineError> {
        let Some(first) = checkpoints.first() else {
            return Err(merge_error("no checkpoint given".into()));
        };
        Self::same_inputs_and_settings(checkpoints, now)?;
        let same_shard =
            checkpoints.len() == 1 && first.rank == now.rank && first.world_size == now.world_size;
        if !same_shard {
            let world = first.world_size;
            let mut ranks: Vec<u32> = checkpoints.iter().map(|c| c.rank).collect();
            ranks.sort_unstable();
            if let Some(c) = checkpoints.iter().find(|c| c.world_size != world) {
                return Err(merge_error(format!(
                    "the checkpoints are of world sizes {world} and {}: give the checkpoints of one job",
                    c.world_size
                )));
            }
            if ranks != (0..world).collect::<Vec<_>>() {
                return Err(merge_error(format!(
                    "an elastic resume needs the checkpoint of every rank of the old job (world size {world}), got ranks {ranks:?}"
                )));
            }
        }
        let first_pass = checkpoints.iter().map(|c| c.pass).min().unwrap_or(0);
        for cp in checkpoints {
            for q in first_pass..cp.pass {
                if !cp.passes.iter().any(|p| p.pass == q && p.complete) {
                    return Err(merge_error(format!(
                        "rank {}'s checkpoint is at pass {}, another rank's at pass {first_pass}: ranks more than one pass apart cannot be merged",
                        cp.rank, cp.pass
                    )));
                }
            }
        }
        let by_seq = same_shard
            && first.deterministic
            && (first.passes.iter())
                .filter(|p| p.pass >= first_pass)
                .all(|p| p.by_seq);
        let by_record = !by_seq;
        if by_record && equalize != Equalize::Off {
            log::info!(
                "equalize ({equalize:?}) under a resume by record: the resumed pass's quotas count {}",
                if same_shard {
                    "the uninterrupted pass's quota less what this rank delivered"
                } else {
                    "what remains for each new rank"
                }
            );
        }
        // Per pass from `first_pass` on: what every checkpoint took.
        let mut taken: BTreeMap<u64, PassTaken> = BTreeMap::new();
        let mut rules = BTreeMap::new();
        let mut delivered: BTreeMap<u64, feedline::pack::Delivered> = BTreeMap::new();
        let mut passes: BTreeMap<u64, Vec<(&Checkpoint, &PassProgress)>> = BTreeMap::new();
        for cp in checkpoints {
            for p in cp.passes.iter().filter(|p| p.pass >= first_pass) {
                passes.entry(p.pass).or_default().push((cp, p));
            }
        }
        for (&pass, parts) in &passes {
            let mut records: HashMap<SourceId, Vec<&RecordRanges>> = HashMap::new();
            for (cp, p) in parts {
                for (&s, r) in &p.records {
                    let name = &cp.sources[s as usize];
                    records.entry(SourceId::intern(name)).or_default().push(r);
                }
            }
            // Documents partly delivered by packing, merged over the
            // checkpoints; one that the ranks delivered all of between them
            // is a consumed record.
            let mut pieces: BTreeMap<Origin, (u64, RecordRanges)> = BTreeMap::new();
            for (cp, p) in parts {
                for (&s, docs) in &p.pieces {
                    let source = SourceId::intern(&cp.sources[s as usize]);
                    for d in docs {
                        let e = pieces
                            .entry(Origin::new(source, d.record))
                            .or_insert_with(|| (d.tokens, RecordRanges::default()));
                        e.1 = RecordRanges::union([&e.1, &d.delivered]);
                    }
                }
            }
            let mut whole: HashMap<SourceId, Vec<u64>> = HashMap::new();
            pieces.retain(|o, (tokens, r)| {
                let all = *r.ranges() == [[0, *tokens]];
                if all {
                    whole.entry(o.source).or_default().push(o.record);
                }
                !all
            });
            let mut records: HashMap<SourceId, RecordRanges> = records
                .into_iter()
                .map(|(s, rs)| (s, RecordRanges::union(rs)))
                .collect();
            for (source, recs) in whole {
                let done = RecordRanges::from_records(recs);
                let r = records.entry(source).or_default();
                *r = RecordRanges::union([&*r, &done]);
            }
            let seqs = RecordRanges::union(parts.iter().map(|(_, p)| &p.seqs));
            // A snapshot of the draw counts if every batch before it was
            // consumed (by batch number, one checkpoint).
            let snapshot = (by_seq && parts.len() == 1)
                .then(|| parts[0].1.snapshot.clone())
                .flatten()
                .map(Arc::new);
            let t = PassTaken {
                snapshot,
                complete: !by_record && parts.iter().all(|(_, p)| p.complete),
                batches: (parts.iter()).fold(0u64, |n, (_, p)| n.saturating_add(p.batches)),
                by_seq,
                seqs: if by_seq {
                    seqs.clone()
                } else {
                    RecordRanges::default()
                },
                records: records.iter().map(|(&s, r)| (s, r.clone())).collect(),
                pieces: pieces.clone(),
            };
            taken.insert(pass, t);
            if !by_seq && !pieces.is_empty() {
                delivered.insert(
                    pass,
                    Arc::new(pieces.iter().map(|(o, (_, r))| (*o, r.clone())).collect()),
                );
            }
            rules.insert(
                pass,
                if by_seq {
                    Rule::Batches(seqs)
                } else {
                    Rule::Records(records)
                },
            );
        }
        let snapshot = taken.get(&first_pass).and_then(|t| t.snapshot.clone());
        let snapshot_field = (first.passes.iter())
            .position(|p| p.pass == first_pass)
            .map_or_else(String::new, |i| format!("passes[{i}].snapshot"));
        let mut first_pass = first_pass;
        let mut done_before = first_pass;
        if first_pass >= pass_count {
            // Every pass was consumed: run the last one empty, so that the
            // pipeline ends as usual.
            first_pass = pass_count.saturating_sub(1);
            done_before = pass_count;
            rules = BTreeMap::from([(first_pass, Rule::Nothing)]);
            taken.clear();
        }
        let snapshot = snapshot.filter(|_| rules.contains_key(&first_pass) && !by_record);
        log::info!(
            "resuming from {} checkpoint(s) at pass {first_pass} by {}",
            checkpoints.len(),
            if by_record { "record" } else { "batch number" }
        );
        Ok(ResumePlan {
            first_pass,
            rules,
            taken,
            done_before,
            by_record,
            elastic: !same_shard,
            spread: BTreeMap::new(),
            snapshot,
            snapshot_field,
            delivered,
        })
    }

    /// The pass the resumed pipeline starts with.
    pub fn first_pass(&self) -> u64 {
        self.first_pass
    }

    /// A run that starts at pass `first_pass` ([`Resume::first_pass`](crate::Resume::first_pass))
    /// as if every earlier pass had been consumed and nothing of this one:
    /// no checkpoint, nothing left out, no snapshot — the pass is read and
    /// drawn from its start, as a run from pass 0 reads and draws it.
    pub(crate) fn at_pass(first_pass: u64) -> Self {
        ResumePlan {
            first_pass,
            rules: BTreeMap::new(),
            taken: BTreeMap::new(),
            done_before: first_pass,
            by_record: false,
            elastic: false,
            spread: BTreeMap::new(),
            snapshot: None,
            snapshot_field: String::new(),
            delivered: BTreeMap::new(),
        }
    }

    /// The progress of `consumers` consumers that go on from this plan's
    /// checkpoints (what they took is taken; none of it is this run's):
    /// for a [`Progress`] of your own beside a pipeline started with
    /// [`StartOptions::resume`](crate::StartOptions).
    pub fn progress(&self, consumers: usize) -> Progress {
        Progress::resumed(self.taken.clone(), self.done_before, consumers)
    }

    /// True when the passes go on by record (filtered on the readers),
    /// false when by batch number (deterministic, same shard).
    pub fn by_record(&self) -> bool {
        self.by_record
    }

    /// True when the checkpoints are of another shard (an elastic resume:
    /// several merged, or another rank or world size).
    pub fn elastic(&self) -> bool {
        self.elastic
    }

    /// Rebalance an elastic resume record by record: in every pass resumed
    /// by record, the records not consumed by any old rank — the files in
    /// `plan`'s order of the pass, each file's records in order — are cut
    /// into `world` consecutive pieces whose sizes differ by at most one;
    /// rank `rank` reads the files of its piece whole and leaves out every
    /// other record (the readers' [`Rule::Records`]). `files` are every
    /// plan file's source name (as a checkpoint names it) and record count.
    /// Deterministic for (checkpoints, plan and seed, world); across the
    /// new ranks every remaining record is delivered once.
    pub(crate) fn rebalance(
        &self,
        plan: &feedline::plan::PassPlan,
        files: &[(String, u64)],
        rank: usize,
        world: usize,
    ) -> Self {
        let mut out = self.clone();
        if !self.elastic || !self.by_record || world == 0 {
            return out;
        }
        for (&pass, rule) in &self.rules {
            let Rule::Records(taken) = rule else { continue };
            // The remaining records of the pass, file by file.
            let order = plan.order(pass);
            let left: Vec<(usize, Vec<[u64; 2]>)> = (order.iter())
                .filter_map(|&fi| {
                    let (name, total) = files.get(fi)?;
                    let t = taken.get(&SourceId::intern(name));
                    let r = t.map(|r| r.ranges());
                    Some((fi, complement(r.as_deref().unwrap_or(&[]), *total)))
                })
                .collect();
            let all: u64 = (left.iter())
                .flat_map(|(_, r)| r.iter().map(|[s, e]| e - s))
                .sum();
            let cut = |r: usize| (all as u128 * r as u128 / world as u128) as u64;
            let sizes: Vec<u64> = (0..world).map(|r| cut(r + 1) - cut(r)).collect();
            let (lo, hi) = (cut(rank), cut(rank + 1));
            let mut at = 0u64;
            let mut rules = HashMap::new();
            let mut mine_files = Vec::new();
            for (fi, ranges) in &left {
                let mut mine = Vec::new();
                for &[s, e] in ranges {
                    // Records s..e sit at positions at..at + (e - s).
                    let (ps, pe) = (at.max(lo), (at + (e - s)).min(hi));
                    if ps < pe {
                        mine.push([s + (ps - at), s + (pe - at)]);
                    }
                    at += e - s;
                }
                let (name, total) = &files[*fi];
                if !mine.is_empty() {
                    mine_files.push(*fi);
                }
                // Everything but its piece, and past the count too.
                let mut out = complement(&mine, *total);
                out.push([*total, u64::MAX]);
                rules.insert(SourceId::intern(name), RecordRanges::from_ranges(out));
            }
            log::info!(
                "pass {pass}: {all} records left, split between {world} ranks as {sizes:?}; rank {rank} reads {} files",
                mine_files.len()
            );
            out.rules.insert(pass, Rule::Records(rules));
            out.spread.insert(
                pass,
                Spread {
                    files: mine_files,
                    sizes,
                },
            );
        }
        out
    }

    /// The files (by index in the plan) this rank reads whole in `pass`
    /// when the pass was rebalanced ([`ResumePlan::rebalance`]).
    fn spread_files(&self, pass: u64) -> Option<&[usize]> {
        self.spread.get(&pass).map(|s| &s.files[..])
    }

    /// Every new rank's records in `pass` when it was rebalanced.
    fn spread_sizes(&self, pass: u64) -> Option<&[u64]> {
        self.spread.get(&pass).map(|s| &s.sizes[..])
    }

    /// Batches of `pass` consumed before the resume (all checkpoints'),
    /// when `pass` goes on by record; `None` otherwise.
    fn batches_taken(&self, pass: u64) -> Option<u64> {
        match self.rules.get(&pass) {
            Some(Rule::Records(_)) => self.taken.get(&pass).map(|t| t.batches),
            _ => None,
        }
    }

    /// How many of the records of `source` that `stride` keeps from `start`
    /// to `total` were consumed before the resume in `pass` (0 unless the
    /// pass goes on by record).
    fn taken_of(
        &self,
        pass: u64,
        source: &str,
        stride: &feedline::plan::RecordStride,
        start: u64,
        total: u64,
    ) -> u64 {
        let Some(Rule::Records(taken)) = self.rules.get(&pass) else {
            return 0;
        };
        let Some(ranges) = taken.get(&SourceId::intern(source)) else {
            return 0;
        };
        ranges
            .ranges()
            .iter()
            .map(|&[s, e]| {
                let (s, e) = (s.max(start).min(total), e.max(start).min(total));
                stride.count_from(s, e)
            })
            .sum()
    }

    /// The snapshot of the draw the first pass starts from (deterministic
    /// resume by batch number), if the checkpoint has one.
    pub fn snapshot(&self) -> Option<&DrawSnapshot> {
        self.snapshot.as_deref()
    }

    /// The same resume, drawing the first pass from its start.
    pub(crate) fn without_snapshot(&self) -> Self {
        ResumePlan {
            snapshot: None,
            ..self.clone()
        }
    }

    /// True when batch `seq` of `pass` was consumed before: left out.
    fn skips_batch(&self, pass: u64, seq: u64) -> bool {
        matches!(self.rules.get(&pass), Some(Rule::Batches(s)) if s.contains(seq))
    }

    /// The first batch number of `pass` from `seq` on not left out (past
    /// the consumed range `seq` is in, at once).
    fn next_seq(&self, pass: u64, seq: u64) -> u64 {
        let Some(Rule::Batches(s)) = self.rules.get(&pass) else {
            return seq;
        };
        let r = s.ranges();
        match r.get(r.partition_point(|&[_, e]| e <= seq)) {
            Some(&[start, end]) if start <= seq => end,
            _ => seq,
        }
    }

    /// True when `pass` reads nothing.
    fn reads_nothing(&self, pass: u64) -> bool {
        matches!(self.rules.get(&pass), Some(Rule::Nothing))
    }

    /// Where a reader of `source` in `pass` starts, asked to start at
    /// `start`: past the consumed records that follow `start` without a gap.
    fn start_record(&self, pass: u64, source: &str, start: u64) -> u64 {
        let Some(Rule::Records(taken)) = self.rules.get(&pass) else {
            return start;
        };
        let Some(ranges) = taken.get(&SourceId::intern(source)) else {
            return start;
        };
        let r = ranges.ranges();
        let i = r.partition_point(|&[_, e]| e <= start);
        match r.get(i) {
            Some(&[s, e]) if s <= start => e,
            _ => start,
        }
    }

    /// The rows of `chunk` (of `pass`) not consumed before.
    fn filter(&self, pass: u64, chunk: Chunk) -> Chunk {
        match self.rules.get(&pass) {
            Some(Rule::Records(taken)) => chunk
                .retain_origins(|o| !taken.get(&o.source).is_some_and(|r| r.contains(o.record))),
            _ => chunk,
        }
    }
}

impl ResumePlan {
    /// How `config` goes on from `checkpoints` — one, or one per rank of
    /// the old job (merged: an elastic resume under `config`'s shard).
    /// Every checkpoint must match `config`'s inputs and order-fixing
    /// settings; the error says what changed.
    pub fn new(checkpoints: &[Checkpoint], config: &PipelineConfig) -> Result<Self, PipelineError> {
        if config.inputs.push.is_some() {
            return Err(PipelineError::config(
                "push mode cannot resume from a checkpoint: its data is what is pushed",
            ));
        }
        // Every field against what it must agree with, before anything
        // starts (and before the plan, which takes the ranges as they are):
        // alone; the inputs' fingerprints and the settings compared; the
        // fields against the settings, then against the records in the
        // inputs; once the plan has them as one job's, the ranks'
        // checkpoints against each other.
        check::alone(checkpoints, config)?;
        let now = CheckpointBase::of(config)?;
        Self::same_inputs_and_settings(checkpoints, &now)?;
        check::against_settings(checkpoints, config)?;
        if config.order.shuffle_mode.reads_by_position() {
            // Its checkpoints name the runs of its order, not its files.
            check::against_files(checkpoints, &crate::global_shuffle::as_runs(config)?)?;
        } else {
            check::against_files(checkpoints, config)?;
        }
        let plan = ResumePlan::plan(
            checkpoints,
            &now,
            config.order.passes,
            config.batching.equalize,
        )?;
        // The checkpoints of one job (the plan): no record taken twice.
        check::consumed_once(checkpoints)?;
        Ok(plan)
    }

    /// Check the snapshot the first pass is drawn from against the pass
    /// plan and the files (its files and records in the pass, no more
    /// instances taken than the files before where reading goes on hold),
    /// once the plan is made, before anything starts.
    pub(crate) fn check_snapshot(
        &self,
        plan: &feedline::plan::PassPlan,
        config: &PipelineConfig,
    ) -> Result<(), PipelineError> {
        match &self.snapshot {
            Some(s) => check::snapshot_against_plan(s, &self.snapshot_field, plan, config),
            None => Ok(()),
        }
    }
}

/// A resume plan cut into the part each stage needs (tokio's thin faces
/// over one core: each part answers only its stage's questions).
pub(crate) struct ResumeParts {
    /// The file queue's.
    pub file_queue: FileQueueResume,
    /// The readers'.
    pub readers: ReaderResume,
    /// The shuffle stage's.
    pub shuffle: ShuffleResume,
    /// The batch maker's (packing).
    pub maker: MakerResume,
    /// The consumers' (the loader's iterators, `Pop` consumers, trainers).
    pub consumers: ConsumerResume,
}

impl ResumePlan {
    /// The part of each stage. With `packing`, consumed batch numbers are
    /// the packed batches': the batch maker leaves them out after packing,
    /// and the shuffle stage, whose batches are of documents, none.
    pub(crate) fn parts(self: &Arc<Self>, packing: bool) -> ResumeParts {
        ResumeParts {
            file_queue: FileQueueResume(self.clone()),
            readers: ReaderResume(self.clone()),
            shuffle: ShuffleResume(self.clone(), !packing),
            maker: MakerResume(self.clone()),
            consumers: ConsumerResume(self.clone()),
        }
    }
}

/// The file queue's part of a resume: where the run starts, which files a
/// rebalanced pass reads, where a snapshot's draw reads on, and what the
/// equalize quota of a resumed pass counts.
#[derive(Clone, Debug)]
pub(crate) struct FileQueueResume(Arc<ResumePlan>);

impl FileQueueResume {
    /// The pass the run starts with.
    pub fn first_pass(&self) -> u64 {
        self.0.first_pass
    }

    /// True when `pass` reads nothing (every batch was consumed).
    pub fn reads_nothing(&self, pass: u64) -> bool {
        self.0.reads_nothing(pass)
    }

    /// Where the draw of `pass` reads on when it is resumed from a
    /// snapshot: (file in the pass's order, next chunk, first record).
    pub fn reads_on_from(&self, pass: u64) -> Option<(usize, u64, Option<u64>)> {
        let s = self
            .0
            .snapshot
            .as_deref()
            .filter(|_| self.0.first_pass == pass)?;
        Some((s.next_file as usize, s.next_chunk, s.next_record))
    }

    /// The files (by index in the plan) this rank reads whole in `pass`
    /// when the pass was rebalanced.
    pub fn spread_files(&self, pass: u64) -> Option<&[usize]> {
        self.0.spread_files(pass)
    }

    /// Every new rank's records in `pass` when it was rebalanced.
    pub fn spread_sizes(&self, pass: u64) -> Option<&[u64]> {
        self.0.spread_sizes(pass)
    }

    /// Batches of `pass` consumed before, when it goes on by record.
    pub fn batches_taken(&self, pass: u64) -> Option<u64> {
        self.0.batches_taken(pass)
    }

    /// True for an elastic resume (another shard).
    pub fn elastic(&self) -> bool {
        self.0.elastic
    }

    /// The consumed records of `source` in `pass` that `stride` keeps
    /// from `start` to `total`.
    pub fn taken_of(
        &self,
        pass: u64,
        source: &str,
        stride: &feedline::plan::RecordStride,
        start: u64,
        total: u64,
    ) -> u64 {
        self.0.taken_of(pass, source, stride, start, total)
    }
}

/// The readers' part of a resume: the consumed records they leave out.
#[derive(Clone, Debug)]
pub(crate) struct ReaderResume(Arc<ResumePlan>);

impl ReaderResume {
    /// Where a reader of `source` in `pass` starts, asked to start at
    /// `start`: past the consumed records that follow without a gap.
    pub fn start_record(&self, pass: u64, source: &str, start: u64) -> u64 {
        self.0.start_record(pass, source, start)
    }

    /// The rows of `chunk` (of `pass`) not consumed before.
    pub fn filter(&self, pass: u64, chunk: Chunk) -> Chunk {
        self.0.filter(pass, chunk)
    }
}

/// The shuffle stage's part of a resume: where its draw starts and the
/// consumed batches it leaves out (after the draw, before they are made).
#[derive(Clone, Debug)]
pub(crate) struct ShuffleResume(Arc<ResumePlan>, bool);

impl ShuffleResume {
    /// The pass the run starts with.
    pub fn first_pass(&self) -> u64 {
        self.0.first_pass
    }

    /// True when batch `seq` of `pass` was consumed before: left out.
    pub fn skips_batch(&self, pass: u64, seq: u64) -> bool {
        self.1 && self.0.skips_batch(pass, seq)
    }

    /// The snapshot of the draw the first pass starts from, if any.
    pub fn snapshot(&self) -> Option<&DrawSnapshot> {
        self.0.snapshot.as_deref()
    }
}

/// The batch maker's part of a resume, when it packs: the packed batches
/// consumed before (left out after packing, by batch number), and the
/// documents partly delivered (their rest packed, by record).
#[derive(Clone, Debug)]
pub(crate) struct MakerResume(Arc<ResumePlan>);

impl MakerResume {
    /// True when packed batch `seq` of `pass` was consumed before: left out.
    pub fn skips_batch(&self, pass: u64, seq: u64) -> bool {
        self.0.skips_batch(pass, seq)
    }

    /// The token ranges delivered of each document partly delivered in
    /// `pass` (resumed by record).
    pub fn delivered(&self, pass: u64) -> Option<feedline::pack::Delivered> {
        self.0.delivered.get(&pass).cloned()
    }

    /// What `pass`, resumed by record, had delivered before the stop (for
    /// equalized packed rows); `None` when it goes on by batch number or
    /// delivered nothing.
    pub fn packed_before(&self, pass: u64) -> Option<PackedBefore> {
        if !self.0.by_record {
            return None;
        }
        let taken = self.0.taken.get(&pass)?;
        Some(PackedBefore {
            batches: taken.batches,
            records: (taken.records.iter())
                .map(|(s, set)| (*s, RecordRanges::from_ranges(set.ranges().iter().copied())))
                .collect(),
            delivered: self.delivered(pass),
        })
    }
}

/// What a pass resumed by record had delivered of its packed rows.
#[derive(Clone, Debug)]
pub(crate) struct PackedBefore {
    /// Packed batches consumed.
    pub batches: u64,
    /// Documents delivered whole, by source.
    pub records: HashMap<SourceId, RecordRanges>,
    /// The token ranges delivered of documents partly delivered.
    pub delivered: Option<feedline::pack::Delivered>,
}

/// The consumers' part of a resume: the batch numbers left out, and the
/// progress they start from.
#[derive(Clone, Debug)]
pub(crate) struct ConsumerResume(Arc<ResumePlan>);

impl ConsumerResume {
    /// The pass the run starts with.
    pub fn first_pass(&self) -> u64 {
        self.0.first_pass
    }

    /// The first batch number of `pass` from `seq` on not left out.
    pub fn next_seq(&self, pass: u64, seq: u64) -> u64 {
        self.0.next_seq(pass, seq)
    }

    /// The progress of `consumers` consumers that go on from the plan's
    /// checkpoints (what they took is taken; none of it is this run's).
    pub fn progress(&self, consumers: usize) -> Progress {
        self.0.progress(consumers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_start_past_a_consumed_prefix_and_batches_are_left_out() {
        let src = SourceId::intern("/resume/unit/f0");
        let by_record = ResumePlan {
            first_pass: 1,
            rules: BTreeMap::from([(
                1,
                Rule::Records(HashMap::from([(
                    src,
                    RecordRanges::from_ranges([[0, 10], [12, 15]]),
                )])),
            )]),
            taken: BTreeMap::new(),
            done_before: 1,
            by_record: true,
            elastic: true,
            spread: BTreeMap::new(),
            snapshot: None,
            snapshot_field: String::new(),
            delivered: BTreeMap::new(),
        };
        // Consumed records a stride keeps: every 3rd from 1 of 0..10 and
        // 12..15 within 4..14 is 4, 7, 13.
        let every3 = feedline::plan::RecordStride { offset: 1, step: 3 };
        assert_eq!(by_record.taken_of(1, "/resume/unit/f0", &every3, 4, 14), 3);
        let all = feedline::plan::RecordStride::ALL;
        assert_eq!(by_record.taken_of(1, "/resume/unit/f0", &all, 0, 100), 13);
        assert_eq!(by_record.taken_of(2, "/resume/unit/f0", &all, 0, 100), 0);
        assert_eq!(by_record.taken_of(1, "/resume/unit/other", &all, 0, 100), 0);
        assert_eq!(by_record.start_record(1, "/resume/unit/f0", 0), 10);
        assert_eq!(by_record.start_record(1, "/resume/unit/f0", 10), 10);
        assert_eq!(by_record.start_record(1, "/resume/unit/f0", 13), 15);
        assert_eq!(by_record.start_record(1, "/resume/unit/other", 0), 0);
        assert_eq!(by_record.start_record(2, "/resume/unit/f0", 0), 0);
        let by_seq = ResumePlan {
            rules: BTreeMap::from([(1, Rule::Batches(RecordRanges::from_records([0, 1, 2, 5])))]),
            by_record: false,
            ..by_record
        };
        assert!(by_seq.skips_batch(1, 2) && !by_seq.skips_batch(1, 3) && !by_seq.skips_batch(2, 0));
        assert_eq!(by_seq.next_seq(1, 0), 3);
        assert_eq!(by_seq.next_seq(1, 5), 6);
        assert_eq!(by_seq.next_seq(2, 0), 0);
    }
}
