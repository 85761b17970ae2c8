//! Settling a pipeline's settings before anything starts: every setting
//! checked, the inputs expanded (globs, list files, file sets), the schema
//! given or inferred, one pass plan per file set, and — to equalize ranks —
//! the records of every file counted.

use std::sync::Arc;

use feedline::batcher::{BatchPolicy, Batcher};
use feedline::plan::{expand_inputs, Equalize, PassPlan};
use feedline::Schema;

use crate::config::{PipelineConfig, SCHEMA_SAMPLE_RECORDS};
use crate::error::PipelineError;
use crate::file_queue::EqualizeRanks;

/// What a pipeline starts from.
pub(crate) struct Prepared {
    /// The settings, inputs expanded.
    pub config: PipelineConfig,
    /// The schema of the batches.
    pub schema: Schema,
    /// One pass plan per file set (one, of `files`, without sets).
    pub plans: Vec<PassPlan>,
    /// The batcher of the settings.
    pub batcher: Batcher,
    /// Equalizing ranks: every file's records.
    pub equalize: Option<EqualizeRanks>,
}

/// Check and settle `config`; count records if ranks are equalized.
pub(crate) fn prepare(config: PipelineConfig) -> Result<Prepared, PipelineError> {
    let (mut config, schema, plans) = settle(config)?;
    // Equalize's own setting first: the counts below read every file.
    let fixed_batch = match (&config.batch, config.equalize) {
        (BatchPolicy::Fixed(n), _) => Some(*n),
        (_, Equalize::Off) => None,
        _ => {
            return Err(PipelineError::Config(
                "equalizing ranks needs a fixed batch size".into(),
            ))
        }
    };
    // An elastic resume (one file set) splits what is left record by
    // record; it needs every file's record count, as equalize does.
    let elastic = (config.resume.as_ref())
        .filter(|r| r.elastic() && r.by_record() && plans.len() == 1)
        .cloned();
    let counted = if elastic.is_some() || config.equalize != Equalize::Off {
        let t0 = std::time::Instant::now();
        match count_records(&config) {
            Ok(c) => {
                log::info!(
                    "counted the records of {} files in {:?} (equalize or elastic resume)",
                    c.0.len(),
                    t0.elapsed()
                );
                Some(c)
            }
            // Without equalize the counts only rebalance: go on without.
            Err(e) if config.equalize == Equalize::Off => {
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
        config.resume = Some(Arc::new(r.rebalance(
            &plans[0],
            &files,
            shard.rank,
            shard.world_size,
        )));
    }
    let equalize = match (config.equalize, fixed_batch) {
        (Equalize::Off, _) | (_, None) => None,
        (how, Some(batch)) => {
            let (counts, sources) = counted.unwrap_or_default();
            Some(EqualizeRanks {
                counts,
                sources,
                batch,
                drop_last: config.drop_last,
                how,
            })
        }
    };
    let batcher = Batcher::new(config.batch.clone(), config.drop_last)?;
    Ok(Prepared {
        config,
        schema,
        plans,
        batcher,
        equalize,
    })
}

/// Check the settings, expand the inputs and settle the schema. One pass
/// plan per file set (one set, of `files`, when no sets are given).
fn settle(
    mut config: PipelineConfig,
) -> Result<(PipelineConfig, Schema, Vec<PassPlan>), PipelineError> {
    let bad = |m: &str| Err(PipelineError::Config(m.to_string()));
    config.check()?;
    if config.push.is_some() {
        if !config.sets.is_empty() {
            return bad("push mode reads no file sets");
        }
        let (config, schema, plan) = prepare_push(config)?;
        return Ok((config, schema, vec![plan]));
    }
    if !config.sets.is_empty() {
        expand_sets(&mut config)?;
    } else {
        if config.files.is_empty() {
            return bad("no input files");
        }
        config.files = expand_inputs(&config.files)?;
        if config.files.is_empty() {
            return bad("the inputs name no files");
        }
    }
    let schema = match &config.schema {
        Some(s) => s.clone(),
        None => infer_schema(&config)?,
    };
    let plan = |files: Vec<String>, seed: u64| {
        PassPlan::new(files)
            .seed(seed)
            .shuffle_files(config.shuffle_files)
            .shard(config.shard)
            .shard_by(config.shard_by)
    };
    let plans: Vec<PassPlan> = if config.sets.is_empty() {
        vec![plan(config.files.clone(), config.seed)]
    } else {
        // Set 0 uses the seed itself; the others get seeds of their own.
        (config.sets.iter().enumerate())
            .map(|(i, s)| plan(s.files.clone(), set_seed(config.seed, i)))
            .collect()
    };
    if config.passes > 0 && plans.iter().all(|p| p.tasks(0).is_empty()) {
        return Err(PipelineError::Config(format!(
            "a pass has no files: {} files for rank {} of {}",
            config.files.len(),
            config.shard.rank,
            config.shard.world_size
        )));
    }
    Ok((config, schema, plans))
}

/// The plan seed of file set `i` (set 0: the seed itself).
fn set_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Check and expand the file sets; `files` and `readers` become all of them.
fn expand_sets(config: &mut PipelineConfig) -> Result<(), PipelineError> {
    let bad = |m: String| Err(PipelineError::Config(m));
    if !config.files.is_empty() {
        return bad(format!(
            "give files or file sets, not both ({} files and {} sets)",
            config.files.len(),
            config.sets.len()
        ));
    }
    if config.equalize != Equalize::Off {
        return bad("equalizing ranks is not supported with file sets".into());
    }
    let mut names = std::collections::HashSet::new();
    for set in &mut config.sets {
        if !names.insert(set.name.clone()) {
            return bad(format!("two file sets are named {:?}", set.name));
        }
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
    for set in &config.sets {
        for f in &set.files {
            if let Some(first) = owner.insert(f.as_str(), set.name.as_str()) {
                return bad(format!(
                    "{f} is in file sets {first:?} and {:?}: it would be read twice a pass",
                    set.name
                ));
            }
        }
    }
    config.files = config.sets.iter().flat_map(|s| s.files.clone()).collect();
    config.readers = config.sets.iter().map(|s| s.readers).sum();
    Ok(())
}

/// Run `work` on `file` before the readers (and their watchdog) exist, with
/// the stall timeout all the same: a file that makes no progress for that
/// long is an error naming it and `what` was done, not a start-up that
/// hangs forever (the thread blocked in I/O is left to end by itself).
/// The outer error is the stall (or a panic); the inner, `work`'s own.
fn within_stall_timeout<T: Send + 'static>(
    config: &PipelineConfig,
    file: &str,
    what: &str,
    work: impl FnOnce() -> Result<T, feedline::Error> + Send + 'static,
) -> Result<Result<T, feedline::Error>, PipelineError> {
    let Some(timeout) = config.stall_timeout else {
        return Ok(work());
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("feedline-prepare".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| PipelineError::Config(format!("cannot start a thread: {e}")))?;
    rx.recv_timeout(timeout).map_err(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => PipelineError::ReaderStuck {
            file: format!("{file} ({what}, before reading started)"),
            record: 0,
            stuck: timeout,
        },
        std::sync::mpsc::RecvTimeoutError::Disconnected => PipelineError::Panicked {
            stage: "pipeline start-up".into(),
            handling: format!("{what} of {file}").into(),
            message: "(see the log)".into(),
        },
    })
}

/// Records per file (in `config.files` order), for equalizing ranks: the
/// format's own count where it has one, else a read through the file —
/// each within the stall timeout. With each, the file's source name as its
/// records (and so a checkpoint) name it — read from its first record when
/// the pipeline is resumed (a resumed pass counts what is left of a file),
/// else (or when the file has none or it cannot be read) the resolved path.
fn count_records(config: &PipelineConfig) -> Result<(Vec<u64>, Vec<String>), PipelineError> {
    let mut counts = Vec::with_capacity(config.files.len());
    let mut sources = Vec::with_capacity(config.files.len());
    let resumed = config.resume.is_some();
    // Equalize counts the records a read yields; an elastic resume alone
    // only needs where each file's records end.
    let counts_bad = config.equalize != Equalize::Off;
    for f in &config.files {
        let (registry, format, open, file) = (
            config.registry.clone(),
            config.format.clone(),
            config.open.clone(),
            f.clone(),
        );
        let (n, source) = within_stall_timeout(config, f, "counting its records", move || {
            let resolved = match registry.resolve(&file, format.as_deref()) {
                Ok((_, path, _)) => path.to_string_lossy().into_owned(),
                Err(_) => file.clone(),
            };
            let mut r = registry.open(&file, format.as_deref(), &open)?;
            let first = |r: &mut Box<dyn feedline::format::RecordReader>| match r.next_record() {
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
        })??;
        counts.push(n);
        sources.push(source);
    }
    Ok((counts, sources))
}

/// Infer the schema from the first file that has a readable record (files
/// that are empty or bad from their first record are passed over).
fn infer_schema(config: &PipelineConfig) -> Result<Schema, PipelineError> {
    let mut first_error = None;
    for file in &config.files {
        let (registry, format, f) = (config.registry.clone(), config.format.clone(), file.clone());
        let inferred = within_stall_timeout(config, file, "inferring the schema", move || {
            registry.infer_schema(&f, format.as_deref(), SCHEMA_SAMPLE_RECORDS)
        })?;
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
        .unwrap_or_else(|| PipelineError::Config("no input files".into())))
}

/// Settle a push-mode configuration: a schema is needed (there is nothing to
/// infer it from), there are no files and no readers, and the stream is one
/// pass.
fn prepare_push(
    mut config: PipelineConfig,
) -> Result<(PipelineConfig, Schema, PassPlan), PipelineError> {
    if !config.files.is_empty() {
        return Err(PipelineError::Config(format!(
            "push mode reads no files ({} given); to mix user code with files use generator sources",
            config.files.len()
        )));
    }
    let Some(schema) = config.schema.clone() else {
        return Err(PipelineError::Config(
            "push mode needs a schema (there are no files to infer it from)".into(),
        ));
    };
    if config.passes != 1 {
        log::debug!("push mode: the pushed stream is one pass");
    }
    config.passes = 1;
    config.readers = 0;
    Ok((config, schema, PassPlan::new(Vec::new())))
}
