//! Settling a pipeline before any stage starts: every setting checked
//! ([`PipelineConfig::check`]), the inputs expanded (globs, list files,
//! file sets), the schema given or inferred, one pass plan per file set,
//! and — to equalize ranks or rebalance an elastic resume — the records of
//! every file counted. Then what the stages start from: the transforms and
//! the batches' schema (a packed token field checked), the stages'
//! settings, the snapshot policy (which resumes keep the checkpoint's
//! snapshot of the draw), the draw restored from that snapshot, and each
//! stage's part of the resume. The wiring ([`builder`](super::builder))
//! decides nothing of this: it only starts the stages.

use std::sync::Arc;

use feedline::batch_policy::{BatchPolicy, Batcher};
use feedline::feed_queue::Lanes;
use feedline::pack::Pack;
use feedline::plan::{expand_inputs, Equalize, PassPlan};
use feedline::transform::{BatchTransformer, WorkerGate};
use feedline::Schema;

use crate::autotune::{self, TunedSetting, TunedValues};
use crate::config::{PipelineConfig, SCHEMA_SAMPLE_RECORDS};
use crate::equalize::{count_records, count_tokens, EqualizeRanks, PackedRanks};
use crate::error::PipelineError;
use crate::resume_plan::{ResumeParts, ResumePlan};
use crate::settings::StageSettings;
use crate::shuffle_batch::RestoredDraw;
use crate::stall::within_stall_timeout;

/// What a pipeline starts from: everything settled before any stage starts.
pub(crate) struct Prepared {
    /// The settings, inputs expanded.
    pub config: Arc<PipelineConfig>,
    /// The schema of the instances (what the readers read).
    pub schema: Schema,
    /// The schema of the batches: the packed rows', or the transforms'
    /// output when it is known now, or the instances'.
    pub batch_schema: Schema,
    /// The transforms of the settings, if any.
    pub transformer: Option<BatchTransformer>,
    /// One pass plan per file set (one, of `files`, without sets).
    pub plans: Vec<PassPlan>,
    /// The batcher of the settings.
    pub batcher: Batcher,
    /// Equalizing ranks: every file's records.
    pub equalize: Option<EqualizeRanks>,
    /// Equalizing ranks in packed rows: every document's tokens.
    pub packed_ranks: Option<Arc<PackedRanks>>,
    /// The feed queue's lanes.
    pub lanes: Lanes,
    /// Each stage's settings.
    pub settings: StageSettings,
    /// A deterministic resume's draw, made again from its snapshot.
    pub restored: Option<RestoredDraw>,
    /// Each stage's part of the resume (rebalanced between the new ranks
    /// when elastic; without its snapshot when that is not used).
    pub parts: Option<ResumeParts>,
    /// Autotuning: what it starts from.
    pub tuning: Option<TuningStart>,
}

/// What a tuned pipeline starts from: the settings it may change, their
/// values at the start (in `config` already), the most transform workers
/// (the pool's threads, of which the gate lets the tuned number work).
pub(crate) struct TuningStart {
    /// The settings the tuner may change.
    pub tunable: Vec<TunedSetting>,
    /// The values it starts from.
    pub start: TunedValues,
    /// The pool's threads: the most workers the CPU budget lets run
    /// (`cpus`: the tuner adds workers while the CPUs have room).
    pub workers_cap: usize,
    /// The gate of the transform workers, when they are tuned.
    pub gate: Option<Arc<WorkerGate>>,
    /// The shuffle pool's byte bound, when sized from the memory budget.
    pub shuffle_bytes: Option<usize>,
}

/// Autotuning's start, decided here once: the shuffle pool's byte bound
/// when it is the tuner's ([`autotune::pool_bytes`]), the settings it may change
/// (judged before the start values go into the settings), the values it
/// starts from — within the CPU budget — put into `config`, and with tuned
/// workers a pool made at the most the budget lets run, gated.
fn tuning_start(mut config: PipelineConfig) -> (PipelineConfig, Option<TuningStart>) {
    let Some(tune) = config.tuning.autotune else {
        return (config, None);
    };
    let cpus = tune.resolved_cpus();
    let memory = tune.resolved_memory_budget();
    let shuffle_bytes = autotune::pool_bytes(&config, memory);
    if let Some(bytes) = shuffle_bytes {
        log::info!(
            "autotune: the shuffle pool's byte bound {} → {bytes} bytes ({} of the memory budget of {memory} bytes)",
            config.order.shuffle_bytes,
            autotune::POOL_SHARE_OF_BUDGET
        );
        config.order.shuffle_bytes = bytes;
    }
    let tunable = autotune::tunable(&config);
    let start = autotune::start_values(&config, cpus);
    // Each pool at most the CPU budget's threads (autotune::Budgets).
    let workers_cap = cpus.max(start.workers);
    let gate = (tunable.contains(&TunedSetting::Workers)).then(|| WorkerGate::new(start.workers));
    config = start.applied(&config);
    let tuning = TuningStart {
        tunable,
        start,
        workers_cap,
        gate,
        shuffle_bytes,
    };
    (config, Some(tuning))
}

/// Check and settle `config`, going on from `resume` if given (or from
/// `config.first_pass`); count records if ranks are equalized or an
/// elastic resume is rebalanced; settle the batches, the stages' settings
/// and the resume's parts, the draw restored from its snapshot.
pub(crate) fn prepare(
    config: PipelineConfig,
    resume: Option<Arc<ResumePlan>>,
) -> Result<Prepared, PipelineError> {
    let resume = from_first_pass(resume, config.resume.first_pass)?;
    let (config, schema, plans) = settle(config)?;
    let (config, tuning) = tuning_start(config);
    check_resume(&config, &plans, resume.as_deref())?;
    let packed_ranks = count_packed_ranks(&config, &schema, &plans, resume.as_deref())?;
    let (equalize, resume) = count_records_and_rebalance(&config, &plans, resume)?;
    let batcher = Batcher::new(config.batching.batch.clone(), config.batching.drop_last)?;
    let (transformer, batch_schema) = settle_batches(&config, &schema, tuning.as_ref())?;
    let packing = config.batching.pack.is_some();
    let resume = snapshot_policy(resume, packing);
    let lanes = config.feeding.feed.lanes(config.feeding.devices);
    let first_pass = resume.as_ref().map_or(0, |r| r.first_pass());
    let settings = StageSettings::derive(&config, &schema, lanes, first_pass);
    let (restored, resume) = restore_draw(&settings, &plans[0], resume, packing);
    let parts = resume.as_ref().map(|r| r.parts(packing));
    Ok(Prepared {
        config: Arc::new(config),
        schema,
        batch_schema,
        transformer,
        plans,
        batcher,
        equalize,
        packed_ranks,
        lanes,
        settings,
        restored,
        parts,
        tuning,
    })
}

/// A run from a later pass (`first_pass`): the stages start there as a
/// resume at that pass's start makes them (checked: below `passes`).
fn from_first_pass(
    resume: Option<Arc<ResumePlan>>,
    first_pass: u64,
) -> Result<Option<Arc<ResumePlan>>, PipelineError> {
    match (resume, first_pass) {
        (resume, 0) => Ok(resume),
        (Some(_), n) => Err(PipelineError::config(format!(
            "first_pass {n} and a resume: the checkpoint says where the run goes on (give one or the other)"
        ))),
        (None, n) => Ok(Some(Arc::new(ResumePlan::at_pass(n)))),
    }
}

/// A resume fits the settled settings: not in push mode, and its snapshot
/// of the draw (if any) against the plan.
fn check_resume(
    config: &PipelineConfig,
    plans: &[PassPlan],
    resume: Option<&ResumePlan>,
) -> Result<(), PipelineError> {
    if resume.is_some() && config.inputs.push.is_some() {
        return Err(PipelineError::config(
            "push mode cannot resume from a checkpoint: its data is what is pushed",
        ));
    }
    // The snapshot a deterministic resume draws from, against the plan.
    if let (Some(r), [plan]) = (resume, plans) {
        r.check_snapshot(plan, config)?;
    }
    Ok(())
}

/// With packing, ranks are equalized in packed rows: every document's
/// tokens counted (not the records).
fn count_packed_ranks(
    config: &PipelineConfig,
    schema: &Schema,
    plans: &[PassPlan],
    resume: Option<&ResumePlan>,
) -> Result<Option<Arc<PackedRanks>>, PipelineError> {
    Ok(match (&config.batching.pack, config.batching.equalize) {
        (Some(pack), how) if how != Equalize::Off && plans[0].get_shard().world_size > 1 => {
            if plans.len() > 1 {
                return Err(PipelineError::config(format!(
                    "equalize {how:?} with packing takes one file set, not {}",
                    plans.len()
                )));
            }
            if resume.is_some_and(|r| r.elastic()) {
                return Err(PipelineError::config(format!(
                    "equalize {how:?} with packing resumes only on the same shard (rank and world size): this checkpoint goes on on another shard, whose packed rows left are not counted"
                )));
            }
            Some(Arc::new(count_tokens(config, schema, &plans[0], pack)?))
        }
        _ => None,
    })
}

/// Equalized ranks (in records) and an elastic resume need every file's
/// record count: counted here. Gives the ranks' equalizing and the resume,
/// rebalanced between the new ranks when elastic.
fn count_records_and_rebalance(
    config: &PipelineConfig,
    plans: &[PassPlan],
    mut resume: Option<Arc<ResumePlan>>,
) -> Result<(Option<EqualizeRanks>, Option<Arc<ResumePlan>>), PipelineError> {
    let fixed_batch = match &config.batching.batch {
        BatchPolicy::Fixed(n) => Some(*n),
        _ => None,
    };
    // An elastic resume (one file set) splits what is left record by
    // record; it needs every file's record count, as equalize does.
    let elastic = (resume.as_ref())
        .filter(|r| r.elastic() && r.by_record() && plans.len() == 1)
        .cloned();
    let records_equalized =
        config.batching.equalize != Equalize::Off && config.batching.pack.is_none();
    let counted = if elastic.is_some() || records_equalized {
        let t0 = std::time::Instant::now();
        match count_records(config, resume.is_some()) {
            Ok(c) => {
                log::info!(
                    "counted the records of {} files in {:?} (equalize or elastic resume)",
                    c.0.len(),
                    t0.elapsed()
                );
                Some(c)
            }
            // Without equalize the counts only rebalance: go on without.
            Err(e) if !records_equalized => {
                log::warn!(
                    "elastic resume: counting the files' records failed ({e}); what is left is not rebalanced: each new rank reads what is left of its own files"
                );
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    if let (Some(r), Some((counts, sources))) = (elastic, &counted) {
        let files: Vec<(String, u64)> = sources
            .iter()
            .cloned()
            .zip(counts.iter().copied())
            .collect();
        let shard = plans[0].get_shard();
        resume = Some(Arc::new(r.rebalance(
            &plans[0],
            &files,
            shard.rank,
            shard.world_size,
        )));
    }
    let equalize = match (config.batching.equalize, fixed_batch) {
        (Equalize::Off, _) | (_, None) => None,
        _ if config.batching.pack.is_some() => None,
        (how, Some(batch)) => {
            let (counts, sources) = counted.unwrap_or_default();
            Some(EqualizeRanks {
                counts,
                sources,
                batch,
                drop_last: config.batching.drop_last,
                how,
            })
        }
    };
    Ok((equalize, resume))
}

/// The transforms of the settings and the batches' schema: with packing,
/// the packed rows' (the documents' token field checked when their schema
/// is known now); else the transforms' output when it is known now (the
/// stages read and pool instances of `schema`, the input's), else `schema`.
fn settle_batches(
    config: &PipelineConfig,
    schema: &Schema,
    tuning: Option<&TuningStart>,
) -> Result<(Option<BatchTransformer>, Schema), PipelineError> {
    let (transforms, seed) = (&config.transforms, config.order.seed);
    let transformer = match tuning {
        Some(TuningStart {
            workers_cap,
            gate: Some(gate),
            ..
        }) => BatchTransformer::gated(transforms, schema, seed, *workers_cap, gate.clone())?,
        _ => BatchTransformer::new(transforms, schema, seed)?,
    };
    let batch_schema = match &config.batching.pack {
        Some(p) => {
            // The documents' schema, when it is known before the first batch.
            let docs = match &transformer {
                Some(t) => t.output_schema(),
                None => Some(schema.clone()),
            };
            if let Some(docs) = &docs {
                check_pack_field(p, docs, transformer.is_some())?;
            }
            p.output_schema()
        }
        None => (transformer.as_ref())
            .and_then(|t| t.output_schema())
            .unwrap_or_else(|| schema.clone()),
    };
    Ok((transformer, batch_schema))
}

/// The documents' token field is there, ragged and of integers, for
/// `pack` (when the batches' schema is known before the first batch).
fn check_pack_field(pack: &Pack, docs: &Schema, transformed: bool) -> Result<(), PipelineError> {
    let Ok(f) = docs.field(&pack.field) else {
        return Err(PipelineError::config(format!(
            "packing: no field `{}` to pack in the {} (fields: {}); tokenize a text field first or name the token field",
            pack.field,
            if transformed { "transform's output" } else { "instances" },
            docs.field_names()
        )));
    };
    let ints = matches!(f.dtype, feedline::DType::I32 | feedline::DType::I64);
    if !ints || !f.is_ragged() || f.shape.len() != 1 || f.ragged != feedline::Ragged::Offsets {
        return Err(PipelineError::config(format!(
            "packing: field `{}` is {}, expected a ragged list of token ids (i32 or i64 [?], offsets layout)",
            pack.field,
            f.describe()
        )));
    }
    Ok(())
}

/// The snapshot policy: a packed pass is drawn again from its start (the
/// packer's window is not in a snapshot of the draw), so a packed run's
/// resume leaves its snapshot out.
fn snapshot_policy(resume: Option<Arc<ResumePlan>>, packing: bool) -> Option<Arc<ResumePlan>> {
    match resume {
        Some(r) if packing => Some(Arc::new(r.without_snapshot())),
        resume => resume,
    }
}

/// A deterministic resume with a snapshot of the draw: the pool made again
/// now, before any stage starts; if it cannot be, the pass is drawn again
/// from its start (the resume goes on without its snapshot).
fn restore_draw(
    settings: &StageSettings,
    plan: &PassPlan,
    resume: Option<Arc<ResumePlan>>,
    packing: bool,
) -> (Option<RestoredDraw>, Option<Arc<ResumePlan>>) {
    let part = resume.as_ref().map(|r| r.parts(packing).shuffle);
    match RestoredDraw::of(&settings.shuffle, &settings.reader, part.as_ref(), plan) {
        Ok(restored) => (restored, resume),
        Err(e) => {
            log::warn!("the checkpoint's snapshot of the draw cannot be used ({e}): the pass is drawn again from its start");
            (None, resume.map(|r| Arc::new(r.without_snapshot())))
        }
    }
}

/// Check the settings, expand the inputs and settle the schema. One pass
/// plan per file set (one set, of `files`, when no sets are given).
fn settle(
    mut config: PipelineConfig,
) -> Result<(PipelineConfig, Schema, Vec<PassPlan>), PipelineError> {
    let bad = |m: &str| Err(PipelineError::config(m.to_string()));
    config.check()?;
    if config.inputs.push.is_some() {
        let (config, schema, plan) = prepare_push(config);
        return Ok((config, schema, vec![plan]));
    }
    if !config.inputs.sets.is_empty() {
        expand_sets(&mut config)?;
    } else {
        config.inputs.files = expand_inputs(&config.inputs.files)?;
        if config.inputs.files.is_empty() {
            return bad("the inputs name no files");
        }
    }
    let schema = match &config.inputs.schema {
        Some(s) => s.clone(),
        None => infer_schema(&config)?,
    };
    if config.order.shuffle_mode.reads_by_position() {
        crate::global_shuffle::settle(&mut config)?;
    }
    let plan = |files: Vec<String>, seed: u64| {
        PassPlan::new(files)
            .seed(seed)
            .shuffle_files(config.order.shuffle_files)
            .shard(config.inputs.shard)
            .shard_by(config.inputs.shard_by)
    };
    let plans: Vec<PassPlan> = if config.inputs.sets.is_empty() {
        vec![plan(config.inputs.files.clone(), config.order.seed)]
    } else {
        // Set 0 uses the seed itself; the others get seeds of their own.
        (config.inputs.sets.iter().enumerate())
            .map(|(i, s)| plan(s.files.clone(), set_seed(config.order.seed, i)))
            .collect()
    };
    if config.order.passes > 0 && plans.iter().all(|p| p.tasks(0).is_empty()) {
        return Err(PipelineError::config(format!(
            "a pass has no files: {} files for rank {} of {}",
            config.inputs.files.len(),
            config.inputs.shard.rank,
            config.inputs.shard.world_size
        )));
    }
    Ok((config, schema, plans))
}

/// The plan seed of file set `i` (set 0: the seed itself).
fn set_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Expand the file sets; `files` and `readers` become all of them.
fn expand_sets(config: &mut PipelineConfig) -> Result<(), PipelineError> {
    let bad = |m: String| Err(PipelineError::config(m));
    for set in &mut config.inputs.sets {
        if !set.files.is_empty() {
            set.files = expand_inputs(&set.files)?;
        }
        if set.files.is_empty() {
            return bad(format!("file set {:?}: the inputs name no files", set.name));
        }
    }
    // Each set's inputs are checked for repeats as they expand; a file in
    // two sets would be delivered twice a pass too.
    let mut owner = std::collections::HashMap::new();
    for set in &config.inputs.sets {
        for f in &set.files {
            if let Some(first) = owner.insert(f.as_str(), set.name.as_str()) {
                return bad(format!(
                    "{f} is in file sets {first:?} and {:?}: it would be read twice a pass",
                    set.name
                ));
            }
        }
    }
    config.inputs.files = config
        .inputs
        .sets
        .iter()
        .flat_map(|s| s.files.clone())
        .collect();
    config.reading.readers = config.inputs.sets.iter().map(|s| s.readers).sum();
    Ok(())
}

/// Infer the schema from the first file that has a readable record (files
/// that are empty or bad from their first record are passed over).
fn infer_schema(config: &PipelineConfig) -> Result<Schema, PipelineError> {
    let mut first_error = None;
    for file in &config.inputs.files {
        let (registry, format, f) = (
            config.inputs.registry.clone(),
            config.inputs.format.clone(),
            file.clone(),
        );
        let inferred = within_stall_timeout(
            config.faults.stall_timeout,
            file,
            "inferring the schema",
            move || registry.infer_schema(&f, format.as_deref(), SCHEMA_SAMPLE_RECORDS),
        )?;
        match inferred {
            Ok(s) => {
                log::info!("schema inferred from {file}: {s}");
                return Ok(s);
            }
            Err(e) => {
                log::debug!("no schema from {file}: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error
        .map(PipelineError::from)
        .unwrap_or_else(|| PipelineError::config("no input files")))
}

/// Settle a push-mode configuration (checked: a schema, no files): no
/// readers, and the stream is one pass.
fn prepare_push(mut config: PipelineConfig) -> (PipelineConfig, Schema, PassPlan) {
    let schema = config
        .inputs
        .schema
        .clone()
        .expect("checked: push mode has a schema");
    if config.order.passes != 1 {
        log::debug!("push mode: the pushed stream is one pass");
    }
    config.order.passes = 1;
    config.reading.readers = 0;
    (config, schema, PassPlan::new(Vec::new()))
}
