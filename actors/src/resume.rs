//! Checkpoint and resume, the pipeline's side (issue 17). It owns what the
//! consumers took ([`Progress`]: per pass, the numbers of the batches and
//! the records in them, kept as range sets), the checkpoint made of it with
//! the fingerprints of the inputs and of the order-fixing settings
//! ([`CheckpointBase`]), and how a pipeline goes on from one checkpoint or
//! from the merged checkpoints of every rank of a job ([`ResumeFrom`]).
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
//!   one (`ResumeFrom::rebalance`, from every file's record count), so
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
//! [`Loader::checkpoint`](crate::Loader::checkpoint) and
//! [`LoaderBuilder::resume`](crate::LoaderBuilder::resume) use these; an
//! actix embedder with its own [`TrainStep`](crate::TrainStep)s keeps a
//! [`Progress`] (`take` in `step`, `pass_ended` in `end_of_pass`, one
//! consumer per device) and sets `PipelineConfig::resume`, as
//! `feedline run --checkpoint/--resume` does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use feedline::checkpoint::{
    Checkpoint, CheckpointError, DrawSnapshot, InputFingerprint, PassProgress, RecordRanges,
    SettingsFingerprint, SourceTable, CHECKPOINT_VERSION,
};
use feedline::plan::Equalize;
use feedline::{Chunk, SourceId};

use crate::error::PipelineError;
use crate::messages::Delivered;

fn merge_error(what: String) -> PipelineError {
    PipelineError::Checkpoint(Arc::new(CheckpointError::Merge(what)))
}

/// A set of integers under construction: disjoint, non-adjacent ranges
/// `start → end` (half-open), each insert O(log n).
#[derive(Clone, Debug, Default)]
struct RangeSet(BTreeMap<u64, u64>);

impl RangeSet {
    fn of(r: &RecordRanges) -> Self {
        RangeSet(r.ranges().iter().map(|&[s, e]| (s, e)).collect())
    }

    fn insert(&mut self, x: u64) {
        let below = self.0.range(..=x).next_back().map(|(&s, &e)| (s, e));
        if below.is_some_and(|(_, e)| x < e) {
            return;
        }
        let start = match below {
            Some((s, e)) if e == x => s,
            _ => x,
        };
        let end = self.0.remove(&(x + 1)).unwrap_or(x + 1);
        self.0.insert(start, end);
    }

    fn ranges(&self) -> RecordRanges {
        RecordRanges::from_ranges(self.0.iter().map(|(&s, &e)| [s, e]))
    }
}

/// The records taken of one source: the ranges below `base`, and a bitset
/// from `base` on whose lowest words move into the ranges as they fill —
/// O(1) per record, and the bitset spans only the records read but not all
/// taken (the shuffle pool's window), unless records are never taken (a
/// bad record skipped, another rank's stride).
#[derive(Clone, Debug, Default)]
struct RecordSet {
    low: Vec<[u64; 2]>,
    base: u64,
    bits: VecDeque<u64>,
}

impl RecordSet {
    fn of(r: &RecordRanges) -> Self {
        let mut set = RecordSet::default();
        for x in r.records() {
            set.insert(x);
        }
        set
    }

    fn push_low(&mut self, s: u64, e: u64) {
        match self.low.last_mut() {
            Some(last) if last[1] == s => last[1] = e,
            _ => self.low.push([s, e]),
        }
    }

    fn insert(&mut self, r: u64) {
        let Some(off) = r.checked_sub(self.base) else {
            return; // below `base`: taken already
        };
        let w = (off / 64) as usize;
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << (off % 64);
        while self.bits.front() == Some(&u64::MAX) {
            self.bits.pop_front();
            self.push_low(self.base, self.base + 64);
            self.base += 64;
        }
    }

    fn ranges(&self) -> RecordRanges {
        let mut out = self.low.clone();
        let mut push = |s: u64, e: u64| match out.last_mut() {
            Some(last) if last[1] == s => last[1] = e,
            _ => out.push([s, e]),
        };
        for (w, &word) in self.bits.iter().enumerate() {
            let at = self.base + 64 * w as u64;
            let mut rest = word;
            while rest != 0 {
                let start = rest.trailing_zeros() as u64;
                let ones = (rest >> start).trailing_ones() as u64;
                push(at + start, at + start + ones);
                rest = if start + ones >= 64 {
                    0
                } else {
                    rest & !(((1u64 << ones) - 1) << start)
                };
            }
        }
        RecordRanges::from_ranges(out)
    }
}

/// What was taken of one pass.
#[derive(Clone, Debug, Default)]
struct PassTaken {
    complete: bool,
    batches: u64,
    by_seq: bool,
    seqs: RangeSet,
    records: HashMap<SourceId, RecordSet>,
    /// The snapshot of the draw this pass was resumed from, if any.
    snapshot: Option<Arc<DrawSnapshot>>,
}

impl RangeSet {
    /// The smallest number not in the set.
    fn first_gap(&self) -> u64 {
        match self.0.first_key_value() {
            Some((&0, &e)) => e,
            _ => 0,
        }
    }
}

/// How many of the latest snapshots of the draw are kept for checkpoints.
const SNAPSHOTS_KEPT: usize = 16;

/// Where the shuffle stage leaves snapshots of its draw (deterministic
/// mode, every [`SNAPSHOT_EVERY`](crate::SNAPSHOT_EVERY) batches) for the
/// checkpoints of the pipeline's consumers: a [`Progress`] given this
/// handle ([`Progress::with_snapshots`]) puts into its checkpoint the
/// latest snapshot before its first batch not taken, and a resume from it
/// starts drawing there instead of at the pass's start. One handle per
/// pipeline ([`PipelineConfig::snapshots`](crate::PipelineConfig)); the
/// latest 16 snapshots are kept.
#[derive(Clone, Debug, Default)]
pub struct DrawSnapshots(Arc<parking_lot::Mutex<VecDeque<Arc<DrawSnapshot>>>>);

impl DrawSnapshots {
    /// A new, empty handle.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn push(&self, s: DrawSnapshot) {
        let mut q = self.0.lock();
        if q.len() >= SNAPSHOTS_KEPT {
            q.pop_front();
        }
        q.push_back(Arc::new(s));
    }

    /// The latest snapshot of `pass` before batch `seq` (at most `seq`).
    fn best(&self, pass: u64, seq: u64) -> Option<Arc<DrawSnapshot>> {
        let q = self.0.lock();
        (q.iter().rev())
            .find(|s| s.pass == pass && s.seq <= seq)
            .cloned()
    }

    /// Snapshots held (tests).
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the consumers took, pass by pass: updated with every batch taken
/// ([`take`](Self::take)) and every end of pass seen by all consumers
/// ([`pass_ended`](Self::pass_ended)); a [`Checkpoint`] is made of it at
/// any moment. It keeps the passes not complete and the last complete one.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Batches taken in this run.
    batches: u64,
    passes: BTreeMap<u64, PassTaken>,
    /// Every pass below is complete.
    next_pass: u64,
    /// Consumers that each see every end of pass.
    consumers: usize,
    ends: BTreeMap<u64, usize>,
    snapshots: Option<DrawSnapshots>,
}

impl Progress {
    /// Nothing taken yet, from pass 0, for `consumers` consumers that each
    /// see every end-of-pass marker.
    pub fn new(consumers: usize) -> Self {
        Progress {
            batches: 0,
            passes: BTreeMap::new(),
            next_pass: 0,
            consumers: consumers.max(1),
            ends: BTreeMap::new(),
            snapshots: None,
        }
    }

    /// Put into each checkpoint the latest fitting snapshot of the draw
    /// the pipeline left in `snapshots` (its
    /// [`PipelineConfig::snapshots`](crate::PipelineConfig)): a
    /// deterministic resume then starts there, not at the pass's start.
    pub fn with_snapshots(mut self, snapshots: DrawSnapshots) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    /// What a resumed run starts from: what its checkpoints say was taken
    /// (none of it counted as this run's batches).
    pub fn resumed(from: &ResumeFrom, consumers: usize) -> Self {
        Progress {
            passes: from.taken.clone(),
            next_pass: from.done_before,
            ..Progress::new(consumers)
        }
    }

    /// Batch `d` was taken.
    pub fn take(&mut self, d: &Delivered) {
        self.batches += 1;
        let p = self.passes.entry(d.pass).or_insert_with(|| PassTaken {
            by_seq: true,
            ..PassTaken::default()
        });
        p.batches += 1;
        p.seqs.insert(d.seq);
        let mut last: Option<(SourceId, &mut RecordSet)> = None;
        for o in d.batch.origins() {
            match &mut last {
                Some((s, set)) if *s == o.source => set.insert(o.record),
                _ => {
                    let set = p.records.entry(o.source).or_default();
                    set.insert(o.record);
                    last = Some((o.source, set));
                }
            }
        }
    }

    /// One consumer saw the end of `pass`; when all have, the pass is complete.
    pub fn pass_ended(&mut self, pass: u64) {
        let seen = self.ends.entry(pass).or_default();
        *seen += 1;
        if *seen < self.consumers {
            return;
        }
        self.ends.remove(&pass);
        self.passes.entry(pass).or_default().complete = true;
        self.next_pass = self.next_pass.max(pass + 1);
        // Keep the last complete pass (ranks one pass apart still merge).
        self.passes.retain(|&p, t| p >= pass || !t.complete);
    }

    /// Every batch of `pass` was taken (one consumer took them all).
    pub fn pass_complete(&mut self, pass: u64) {
        for _ in 0..self.consumers {
            self.pass_ended(pass);
        }
    }

    /// Batches taken in this run.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The checkpoint of what was taken, with `base`'s identity.
    pub fn checkpoint(&mut self, base: &CheckpointBase) -> Checkpoint {
        let mut table = SourceTable::default();
        let pass = (self.passes.iter())
            .find(|(_, t)| !t.complete)
            .map_or(self.next_pass, |(&p, _)| p.min(self.next_pass));
        let passes = (self.passes.iter())
            .map(|(&p, t)| {
                let mut records: Vec<(SourceId, RecordRanges)> =
                    t.records.iter().map(|(&s, r)| (s, r.ranges())).collect();
                records.sort_by_key(|(s, _)| s.name());
                let snapshot = (t.by_seq && !t.complete)
                    .then(|| {
                        let gap = t.seqs.first_gap();
                        let fresh = (self.snapshots.as_ref()).and_then(|s| s.best(p, gap));
                        let old = t.snapshot.clone().filter(|s| s.seq <= gap);
                        match (fresh, old) {
                            (Some(a), Some(b)) => Some(if a.seq >= b.seq { a } else { b }),
                            (a, b) => a.or(b),
                        }
                    })
                    .flatten()
                    .filter(|s| s.seq > 0)
                    .map(|s| (*s).clone());
                PassProgress {
                    snapshot,
                    pass: p,
                    complete: t.complete,
                    batches: t.batches,
                    by_seq: t.by_seq,
                    seqs: if t.by_seq {
                        t.seqs.ranges()
                    } else {
                        RecordRanges::default()
                    },
                    records: records
                        .into_iter()
                        .map(|(s, r)| (table.index(s), r))
                        .collect(),
                }
            })
            .collect();
        Checkpoint {
            version: CHECKPOINT_VERSION,
            batches: self.batches,
            pass,
            rank: base.rank,
            world_size: base.world_size,
            deterministic: base.deterministic,
            sources: table.into_names(),
            inputs: base.inputs.clone(),
            settings: base.settings.clone(),
            passes,
        }
    }
}

/// A [`Progress`] shared by a pipeline's consumers.
pub(crate) type SharedProgress = Arc<parking_lot::Mutex<Progress>>;

/// What identifies a pipeline's position beyond what was taken: its
/// inputs, its order-fixing settings, its rank.
#[derive(Clone, Debug)]
pub struct CheckpointBase {
    /// The inputs' fingerprint.
    pub inputs: InputFingerprint,
    /// The settings that fix the order.
    pub settings: SettingsFingerprint,
    /// The rank.
    pub rank: u32,
    /// The world size.
    pub world_size: u32,
    /// Deterministic mode.
    pub deterministic: bool,
}

/// A pass of an elastic resume split record by record between the new
/// ranks ([`ResumeFrom::rebalance`]).
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
/// doc. Made by [`LoaderBuilder::resume`](crate::LoaderBuilder::resume)
/// (or `resume_merged`) and held in the settings.
#[derive(Clone, Debug)]
pub struct ResumeFrom {
    first_pass: u64,
    rules: BTreeMap<u64, Rule>,
    /// The progress the resumed run starts from.
    taken: BTreeMap<u64, PassTaken>,
    done_before: u64,
    by_record: bool,
    /// True when the checkpoints are of another shard (several merged, or
    /// another rank or world size): an elastic resume.
    elastic: bool,
    /// Per pass rebalanced by [`ResumeFrom::rebalance`]: the files this
    /// rank reads (whole, by index in the plan) and every new rank's share.
    spread: BTreeMap<u64, Spread>,
    /// Where the draw of the first pass starts (by batch number only).
    snapshot: Option<Arc<DrawSnapshot>>,
}

impl ResumeFrom {
    /// How a pipeline identified by `now`, of `pass_count` passes, goes on
    /// from `checkpoints` ([`ResumeFrom::new`] with the settings' parts).
    pub(crate) fn plan(
        checkpoints: &[Checkpoint],
        now: &CheckpointBase,
        pass_count: u64,
        equalize: Equalize,
    ) -> Result<Self, PipelineError> {
        let cp_err = |e: CheckpointError| PipelineError::Checkpoint(Arc::new(e));
        let Some(first) = checkpoints.first() else {
            return Err(merge_error("no checkpoint given".into()));
        };
        for cp in checkpoints {
            cp.inputs.check_unchanged(&now.inputs).map_err(cp_err)?;
            cp.settings
                .check_compatible(&now.settings, &[])
                .map_err(cp_err)?;
        }
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
            let records: HashMap<SourceId, RecordRanges> = records
                .into_iter()
                .map(|(s, rs)| (s, RecordRanges::union(rs)))
                .collect();
            let seqs = RecordRanges::union(parts.iter().map(|(_, p)| &p.seqs));
            // A snapshot of the draw counts if every batch before it was
            // consumed (by batch number, one checkpoint).
            let snapshot = (by_seq && parts.len() == 1)
                .then(|| parts[0].1.snapshot.clone())
                .flatten()
                .filter(|s| {
                    let fits = s.pass == pass && RangeSet::of(&seqs).first_gap() >= s.seq;
                    if !fits {
                        log::warn!(
                            "the checkpoint's snapshot of the draw (pass {}, batch {}) does not fit its pass {pass}: the pass is drawn again from its start",
                            s.pass,
                            s.seq
                        );
                    }
                    fits
                })
                .map(Arc::new);
            let t = PassTaken {
                snapshot,
                complete: !by_record && parts.iter().all(|(_, p)| p.complete),
                batches: parts.iter().map(|(_, p)| p.batches).sum(),
                by_seq,
                seqs: if by_seq {
                    RangeSet::of(&seqs)
                } else {
                    RangeSet::default()
                },
                records: records
                    .iter()
                    .map(|(&s, r)| (s, RecordSet::of(r)))
                    .collect(),
            };
            taken.insert(pass, t);
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
        Ok(ResumeFrom {
            first_pass,
            rules,
            taken,
            done_before,
            by_record,
            elastic: !same_shard,
            spread: BTreeMap::new(),
            snapshot,
        })
    }

    /// The pass the resumed pipeline starts with.
    pub fn first_pass(&self) -> u64 {
        self.first_pass
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
                    let r = t.map_or(&[][..], |r| r.ranges());
                    Some((fi, complement(r, *total)))
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
    /// when the pass was rebalanced ([`ResumeFrom::rebalance`]).
    pub(crate) fn spread_files(&self, pass: u64) -> Option<&[usize]> {
        self.spread.get(&pass).map(|s| &s.files[..])
    }

    /// Every new rank's records in `pass` when it was rebalanced.
    pub(crate) fn spread_sizes(&self, pass: u64) -> Option<&[u64]> {
        self.spread.get(&pass).map(|s| &s.sizes[..])
    }

    /// Batches of `pass` consumed before the resume (all checkpoints'),
    /// when `pass` goes on by record; `None` otherwise.
    pub(crate) fn batches_taken(&self, pass: u64) -> Option<u64> {
        match self.rules.get(&pass) {
            Some(Rule::Records(_)) => self.taken.get(&pass).map(|t| t.batches),
            _ => None,
        }
    }

    /// How many of the records of `source` that `stride` keeps from `start`
    /// to `total` were consumed before the resume in `pass` (0 unless the
    /// pass goes on by record).
    pub(crate) fn taken_of(
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
        ResumeFrom {
            snapshot: None,
            ..self.clone()
        }
    }

    /// True when batch `seq` of `pass` was consumed before: left out.
    pub(crate) fn skips_batch(&self, pass: u64, seq: u64) -> bool {
        matches!(self.rules.get(&pass), Some(Rule::Batches(s)) if s.contains(seq))
    }

    /// The first batch number of `pass` from `seq` on not left out.
    pub(crate) fn next_seq(&self, pass: u64, mut seq: u64) -> u64 {
        while self.skips_batch(pass, seq) {
            seq += 1;
        }
        seq
    }

    /// True when `pass` reads nothing.
    pub(crate) fn reads_nothing(&self, pass: u64) -> bool {
        matches!(self.rules.get(&pass), Some(Rule::Nothing))
    }

    /// Where a reader of `source` in `pass` starts, asked to start at
    /// `start`: past the consumed records that follow `start` without a gap.
    pub(crate) fn start_record(&self, pass: u64, source: &str, start: u64) -> u64 {
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
    pub(crate) fn filter(&self, pass: u64, chunk: Chunk) -> Chunk {
        match self.rules.get(&pass) {
            Some(Rule::Records(taken)) => chunk
                .retain_origins(|o| !taken.get(&o.source).is_some_and(|r| r.contains(o.record))),
            _ => chunk,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_set_inserts_merge_neighbours() {
        let mut s = RangeSet::default();
        for x in [5, 3, 4, 9, 7, 8, 4, 0, 6] {
            s.insert(x);
        }
        assert_eq!(s.ranges().ranges(), &[[0, 1], [3, 10]]);
        assert_eq!(s.0.len(), 2);
        s.insert(1);
        s.insert(2);
        assert_eq!(s.ranges().ranges(), &[[0, 10]]);
    }

    #[test]
    fn readers_start_past_a_consumed_prefix_and_batches_are_left_out() {
        let src = SourceId::intern("/resume/unit/f0");
        let by_record = ResumeFrom {
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
        let by_seq = ResumeFrom {
            rules: BTreeMap::from([(1, Rule::Batches(RecordRanges::from_records([0, 1, 2, 5])))]),
            by_record: false,
            ..by_record
        };
        assert!(by_seq.skips_batch(1, 2) && !by_seq.skips_batch(1, 3) && !by_seq.skips_batch(2, 0));
        assert_eq!(by_seq.next_seq(1, 0), 3);
        assert_eq!(by_seq.next_seq(1, 5), 6);
        assert_eq!(by_seq.next_seq(2, 0), 0);
    }

    #[test]
    fn record_sets_fold_full_words_and_give_exact_ranges() {
        let mut rng = 12345u64;
        for _ in 0..50 {
            let mut set = RecordSet::default();
            let mut want = std::collections::BTreeSet::new();
            for _ in 0..400 {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (rng >> 33) % 300;
                set.insert(r);
                want.insert(r);
            }
            for r in 0..130 {
                set.insert(r);
                want.insert(r);
            }
            assert!(set.base >= 128, "full words fold: base {}", set.base);
            assert_eq!(
                set.ranges(),
                RecordRanges::from_records(want.iter().copied())
            );
            let again = RecordSet::of(&set.ranges());
            assert_eq!(again.ranges(), set.ranges());
        }
    }

    #[test]
    fn progress_keeps_the_last_complete_pass_and_counts_consumers() {
        let mut p = Progress::new(2);
        p.pass_ended(0);
        assert_eq!(p.next_pass, 0, "one of two consumers");
        p.pass_ended(0);
        assert_eq!(p.next_pass, 1);
        p.pass_ended(1);
        p.pass_ended(1);
        assert_eq!(p.passes.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert!(p.passes[&1].complete);
    }
}
