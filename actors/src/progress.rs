//! Taking progress, for checkpoints: what the consumers took ([`Progress`]:
//! per pass, the numbers of the batches and the records in them, kept as
//! range sets), the snapshots of the deterministic draw that the shuffle
//! stage leaves for them ([`DrawSnapshots`]), and what identifies the
//! pipeline a checkpoint is of — its inputs stamped and its order-fixing
//! settings ([`CheckpointBase`]) — and the local files it reads, which a
//! checkpoint is never saved over ([`input_files`]). A [`Checkpoint`] is
//! made of these at any moment; going on from one is `resume_plan`'s.
//!
//! The [`Loader`](crate::Loader)'s iterators, the [`Pipeline`](crate::Pipeline)'s
//! `Pop` consumers and trainers keep a [`Progress`]; an actix embedder with
//! its own [`TrainStep`](crate::TrainStep)s may keep one too (`take` in
//! `step`, `pass_ended` in `end_of_pass`, one consumer per device), as
//! `feedline run --checkpoint` does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use crate::checkpoint::{
    Checkpoint, DocPieces, DrawSnapshot, FileStamp, InputFiles, InputFingerprint, PassProgress,
    RecordRanges, SettingsFingerprint, SourceTable, CHECKPOINT_VERSION,
};
use feedline::batch_policy::BatchPolicy;
use feedline::plan::{expand_inputs, Equalize, ShardBy};
use feedline::{Origin, SourceId};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::messages::Delivered;

/// `set` as ranges alone, for a checkpoint (its window of insertions, if
/// any, turned into ranges).
fn settled(set: &RecordRanges) -> RecordRanges {
    RecordRanges::from_ranges(set.ranges().iter().copied())
}

/// What was taken of one pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct PassTaken {
    pub complete: bool,
    pub batches: u64,
    pub by_seq: bool,
    pub seqs: RecordRanges,
    pub records: HashMap<SourceId, RecordRanges>,
    /// The snapshot of the draw this pass was resumed from, if any.
    pub snapshot: Option<Arc<DrawSnapshot>>,
    /// Packing: the documents partly delivered — their tokens as packed
    /// and the token ranges delivered; a document moves to `records`
    /// once its ranges cover it.
    pub pieces: BTreeMap<Origin, (u64, RecordRanges)>,
}

/// How many of the latest snapshots of the draw are kept for checkpoints.
const SNAPSHOTS_KEPT: usize = 16;

/// Where the shuffle stage leaves snapshots of its draw (deterministic
/// mode, every [`SNAPSHOT_EVERY`](crate::SNAPSHOT_EVERY) batches) for the
/// checkpoints of the pipeline's consumers: a [`Progress`] given this
/// handle ([`Progress::with_snapshots`]) puts into its checkpoint the
/// latest snapshot before its first batch not taken, and a resume from it
/// starts drawing there instead of at the pass's start. One handle per
/// pipeline ([`StartOptions::snapshots`](crate::StartOptions)); the
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
    /// [`StartOptions::snapshots`](crate::StartOptions)): a
    /// deterministic resume then starts there, not at the pass's start.
    pub fn with_snapshots(mut self, snapshots: DrawSnapshots) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    /// What a resumed run starts from: what its checkpoints say was taken
    /// (`taken`, pass by pass; every pass below `done_before` complete),
    /// none of it counted as this run's batches.
    pub(crate) fn resumed(
        taken: BTreeMap<u64, PassTaken>,
        done_before: u64,
        consumers: usize,
    ) -> Self {
        Progress {
            passes: taken,
            next_pass: done_before,
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
        if let Some(segments) = d.batch.segments() {
            for s in segments {
                let range = [s.start, s.start + u64::from(s.len)];
                let whole = match p.pieces.remove(&s.origin) {
                    None if range == [0, s.doc_tokens] => true,
                    None => {
                        let r = RecordRanges::from_ranges([range]);
                        p.pieces.insert(s.origin, (s.doc_tokens, r));
                        false
                    }
                    Some((tokens, had)) => {
                        let r =
                            RecordRanges::from_ranges(had.ranges().iter().copied().chain([range]));
                        if *r.ranges() == [[0, tokens]] {
                            true
                        } else {
                            p.pieces.insert(s.origin, (tokens, r));
                            false
                        }
                    }
                };
                if whole {
                    p.records
                        .entry(s.origin.source)
                        .or_default()
                        .insert(s.origin.record);
                }
            }
            return;
        }
        let mut last: Option<(SourceId, &mut RecordRanges)> = None;
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
                    t.records.iter().map(|(&s, r)| (s, settled(r))).collect();
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
                let mut pieces: BTreeMap<u32, Vec<DocPieces>> = BTreeMap::new();
                for (o, (tokens, delivered)) in &t.pieces {
                    pieces
                        .entry(table.index(o.source))
                        .or_default()
                        .push(DocPieces {
                            record: o.record,
                            tokens: *tokens,
                            delivered: delivered.clone(),
                        });
                }
                PassProgress {
                    pieces,
                    snapshot,
                    pass: p,
                    complete: t.complete,
                    batches: t.batches,
                    by_seq: t.by_seq,
                    seqs: if t.by_seq {
                        settled(&t.seqs)
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
    /// The settings that fix the order, as typed values (what a checkpoint
    /// records and a version-2 checkpoint is compared with).
    pub settings: SettingsFingerprint,
    /// The same settings as a version-1 checkpoint recorded them (as
    /// text): what a version-1 checkpoint is compared with.
    pub legacy_settings: SettingsFingerprint,
    /// The rank.
    pub rank: u32,
    /// The world size.
    pub world_size: u32,
    /// Deterministic mode.
    pub deterministic: bool,
}

impl CheckpointBase {
    /// The identity of a pipeline of these settings: every input file
    /// stamped (path, size, modification time, a fingerprint of its first
    /// and last 64 KiB; a source that is no file, such as `gen:NAME`, by its
    /// name alone) and the settings that fix the order of the batches
    /// ([`order_settings`]).
    pub fn of(config: &PipelineConfig) -> Result<Self, PipelineError> {
        let mut files = Vec::new();
        for (spec, bare) in data_files(config)? {
            let stamp = match FileStamp::of(&bare.to_string_lossy()) {
                Ok(s) => FileStamp { path: spec, ..s },
                Err(_) => FileStamp {
                    path: spec,
                    size: 0,
                    mtime_ns: None,
                    content: None,
                },
            };
            files.push(stamp);
        }
        Ok(CheckpointBase {
            inputs: InputFingerprint { files },
            settings: order_settings(config),
            legacy_settings: legacy_order_settings(config),
            rank: config.inputs.shard.rank as u32,
            world_size: config.inputs.shard.world_size as u32,
            deterministic: config.deterministic(),
        })
    }
}

/// Every data file of `config` (its file sets' too), inputs expanded: the
/// spec as given and the path its format reads (a `FORMAT:` prefix taken
/// off as the registry takes it off).
fn data_files(config: &PipelineConfig) -> Result<Vec<(String, PathBuf)>, PipelineError> {
    let mut out = Vec::new();
    let lists =
        std::iter::once(&config.inputs.files).chain(config.inputs.sets.iter().map(|s| &s.files));
    for list in lists.filter(|l| !l.is_empty()) {
        for spec in expand_inputs(list)? {
            let bare = match config
                .inputs
                .registry
                .resolve(&spec, config.inputs.format.as_deref())
            {
                Ok((_, bare, _)) => bare,
                Err(_) => PathBuf::from(&spec),
            };
            out.push((spec, bare));
        }
    }
    Ok(out)
}

/// The local files a pipeline of `config` reads, which a checkpoint is
/// never saved over ([`feedline::checkpoint::check_save_path`]): every data
/// file (of its file sets too) and every list file given (`@train.list`,
/// `train.list`), each `stat`ed once here. Remote objects and generators
/// are no local files. The command adds its `--schema` file.
pub fn input_files(config: &PipelineConfig) -> Result<InputFiles, PipelineError> {
    let mut files = InputFiles::of(data_files(config)?.into_iter().map(|(_, bare)| bare));
    let given =
        (config.inputs.files.iter()).chain(config.inputs.sets.iter().flat_map(|s| &s.files));
    for spec in given.map(|s| s.trim()) {
        match spec.strip_prefix('@') {
            Some(list) => files.add(list),
            None if spec.ends_with(".list") => files.add(spec),
            None => {}
        }
    }
    Ok(files)
}

/// The settings that fix the order and the values of the batches, as typed
/// values compared field by field: seed, pool sizes, batch policy, flags,
/// chunking, sharding, equalize, format, file sets (name, files, weight)
/// and the transforms — the record stage (filter and/or map), the instance
/// map's identity (its [`name`](feedline::transform::InstanceMap::name),
/// for the built-in image transforms their canonical spec, and its
/// [`version`](feedline::transform::InstanceMap::version)), the declared
/// output schema, whether a batch map is set, and the version the user
/// declared for their transform code
/// ([`LoaderBuilder::transform_version`](crate::LoaderBuilder::transform_version)).
pub(crate) fn order_settings(config: &PipelineConfig) -> SettingsFingerprint {
    use serde_json::json;
    let batch = match &config.batching.batch {
        BatchPolicy::Fixed(n) => json!(n),
        BatchPolicy::Budget { max_cost, .. } => json!({ "max_cost": max_cost }),
    };
    let shard_by = match config.inputs.shard_by {
        ShardBy::Auto => "auto",
        ShardBy::File => "file",
        ShardBy::Record => "record",
    };
    let equalize = match config.batching.equalize {
        Equalize::Off => "off",
        Equalize::Drop => "drop",
        Equalize::Pad => "pad",
    };
    let sets: Vec<serde_json::Value> = (config.inputs.sets.iter())
        .map(|s| json!({ "name": s.name, "files": s.files, "weight": s.weight }))
        .collect();
    let t = &config.transforms;
    let transforms = json!({
        "version": t.version,
        "records": t.records.as_ref().map(|r| r.describe()),
        "instance": t.instance.as_ref().map(|m| json!({ "name": m.name(), "version": m.version() })),
        "output_schema": t.output_schema,
        "batch": t.batch.is_some(),
    });
    let fingerprint = SettingsFingerprint::new()
        .with("seed", config.order.seed)
        .with("shuffle", config.order.shuffle)
        .with("min_pool", config.order.min_pool)
        .with("shuffle_bytes", config.order.shuffle_bytes)
        .with("batch", batch)
        .with("drop_last", config.batching.drop_last)
        .with("shuffle_files", config.order.shuffle_files)
        .with("deterministic", config.deterministic())
        .with("chunk_records", config.reading.chunk_records)
        .with("chunk_bytes", config.reading.chunk_bytes)
        .with("shard_by", shard_by)
        .with("equalize", equalize)
        .with("format", &config.inputs.format)
        .with("sets", sets)
        .with("transforms", transforms);
    // The global order changes the batches; only recorded when on, so
    // checkpoints taken before it existed still compare equal.
    let fingerprint = match config.order.shuffle_mode {
        crate::config::ShuffleMode::Buffer => fingerprint,
        mode => fingerprint.with("shuffle_mode", mode.name()),
    };
    // Packing changes the batches; only recorded when on, so checkpoints
    // taken before it existed still compare equal.
    match &config.batching.pack {
        Some(p) => fingerprint.with("pack", p),
        None => fingerprint,
    }
}

/// The settings as a version-1 checkpoint recorded them: the same names,
/// values as text (what it is compared with; transforms by presence only,
/// as that version knew them).
fn legacy_order_settings(config: &PipelineConfig) -> SettingsFingerprint {
    let t = &config.transforms;
    let sets: Vec<String> = (config.inputs.sets.iter())
        .map(|s| format!("{}={:?}*{}", s.name, s.files, s.weight))
        .collect();
    SettingsFingerprint::new()
        .with("seed", config.order.seed.to_string())
        .with("shuffle", config.order.shuffle.to_string())
        .with("min_pool", format!("{:?}", config.order.min_pool))
        .with("shuffle_bytes", config.order.shuffle_bytes.to_string())
        .with("batch", format!("{:?}", config.batching.batch))
        .with("drop_last", config.batching.drop_last.to_string())
        .with("shuffle_files", config.order.shuffle_files.to_string())
        .with("deterministic", config.deterministic().to_string())
        .with("chunk_records", config.reading.chunk_records.to_string())
        .with("chunk_bytes", config.reading.chunk_bytes.to_string())
        .with("shard_by", format!("{:?}", config.inputs.shard_by))
        .with("equalize", format!("{:?}", config.batching.equalize))
        .with("format", format!("{:?}", config.inputs.format))
        .with("sets", format!("[{}]", sets.join(", ")))
        .with(
            "transforms",
            format!(
                "records: {}, instance: {}, batch: {}",
                t.records.is_some(),
                t.instance.is_some(),
                t.batch.is_some()
            ),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_sets_merge_neighbours() {
        let mut s = RecordRanges::default();
        for x in [5, 3, 4, 9, 7, 8, 4, 0, 6] {
            s.insert(x);
        }
        assert_eq!(settled(&s).ranges(), &[[0, 1], [3, 10]][..]);
        s.insert(1);
        s.insert(2);
        assert_eq!(settled(&s).ranges(), &[[0, 10]][..]);
        assert_eq!(s.first_gap(), 10);
    }

    #[test]
    fn taken_records_give_exact_ranges() {
        let mut rng = 12345u64;
        for _ in 0..50 {
            let mut set = RecordRanges::default();
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
            assert_eq!(
                settled(&set),
                RecordRanges::from_records(want.iter().copied())
            );
            let mut again = settled(&set);
            again.insert(1000);
            assert_eq!(settled(&again).count(), set.count() + 1);
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
