//! Checking checkpoints against what they must agree with before anything
//! starts: beyond what a checkpoint says of itself
//! ([`Checkpoint::validate`]), the settings (the pool's sizes bound the
//! snapshot's tables, the batch size bounds the records a batch holds, the
//! random stream's position is bounded by the draws made), the other
//! ranks' checkpoints (no record consumed twice) and the files (every
//! consumed record is in its file; a snapshot's files and records are in
//! its pass). A field that does not fit is refused, named.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::checkpoint::{Checkpoint, CheckpointError, DrawSnapshot};
use feedline::batch_policy::BatchPolicy;
use feedline::plan::{expand_inputs, Equalize, PassPlan};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::stall::within_stall_timeout;
use feedline::format::RecordReader;

fn invalid(field: String, what: String) -> PipelineError {
    PipelineError::Checkpoint(Arc::new(CheckpointError::Invalid { field, what }))
}

/// The name of checkpoint `k` of `n` in messages: `resume[k].` when several.
fn which(k: usize, n: usize) -> String {
    if n > 1 {
        format!("resume[{k}].")
    } else {
        String::new()
    }
}

/// Words of the random stream one draw takes (a `u64`), and the most
/// rejected samples a run may have drawn beyond them (each has a chance
/// below `pool_size / 2^64`).
const WORDS_PER_DRAW: u64 = 2;
const REJECTIONS_ALLOWED: u64 = 64;

/// Bytes of one row's place in the shuffle pool (`feedline::shuffle`).
const POOL_ROW_BYTES: u64 = std::mem::size_of::<(usize, usize)>() as u64;

/// Each checkpoint alone ([`Checkpoint::validate`]) and its passes within
/// the passes of these settings: before the checkpoints' settings are
/// compared with these (a field that does not fit is named first).
pub(super) fn alone(
    checkpoints: &[Checkpoint],
    config: &PipelineConfig,
) -> Result<(), PipelineError> {
    let n = checkpoints.len();
    for (k, cp) in checkpoints.iter().enumerate() {
        cp.validate().map_err(|e| match e {
            CheckpointError::Invalid { field, what } => {
                invalid(format!("{}{field}", which(k, n)), what)
            }
            e => PipelineError::Checkpoint(Arc::new(e)),
        })?;
        // All passes done is `pass` = `passes`; past that, no pass was run.
        if cp.pass > config.order.passes {
            return Err(invalid(
                format!("{}pass", which(k, n)),
                format!(
                    "is {}, beyond the {} passes of these settings: a pass beyond the passes run",
                    cp.pass, config.order.passes
                ),
            ));
        }
        for (i, p) in cp.passes.iter().enumerate() {
            if p.pass >= config.order.passes {
                return Err(invalid(
                    format!("{}passes[{i}].pass", which(k, n)),
                    format!(
                        "is {}, beyond the {} passes of these settings (passes 0 to {})",
                        p.pass,
                        config.order.passes,
                        config.order.passes as i128 - 1
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Everything that needs the settings but not the files, once the
/// checkpoints' settings are known to be these: each checkpoint against
/// the batch policy and the pool's settings.
pub(super) fn against_settings(
    checkpoints: &[Checkpoint],
    config: &PipelineConfig,
) -> Result<(), PipelineError> {
    let n = checkpoints.len();
    for (k, cp) in checkpoints.iter().enumerate() {
        for (i, p) in cp.passes.iter().enumerate() {
            let field = |f: &str| format!("{}passes[{i}].{f}", which(k, n));
            let records: u128 = p.records.values().map(|r| r.count() as u128).sum();
            // A packed batch of b rows holds up to b × L documents (of a
            // token each), and may hold pieces of documents only.
            let per_batch = |b: usize| match &config.batching.pack {
                Some(pack) => b as u128 * pack.length as u128,
                None => b as u128,
            };
            if let BatchPolicy::Fixed(b) = config.batching.batch {
                if records > p.batches as u128 * per_batch(b) {
                    return Err(invalid(
                        field("batches"),
                        format!(
                            "is {}, too few for the pass's {records} consumed records in batches of {}",
                            p.batches,
                            per_batch(b)
                        ),
                    ));
                }
            }
            // Every batch holds a record of its own, unless user code may
            // drop rows or padding repeats them.
            if config.transforms.is_empty()
                && config.batching.pack.is_none()
                && config.batching.equalize == Equalize::Off
                && (p.batches as u128) > records
            {
                return Err(invalid(
                    field("batches"),
                    format!(
                        "is {}, more than the pass's {records} consumed records",
                        p.batches
                    ),
                ));
            }
            if let Some(s) = &p.snapshot {
                snapshot_against_settings(s, config, &|f: &str| field(&format!("snapshot.{f}")))?;
            }
        }
    }
    Ok(())
}

/// The snapshot's tables within what the pool of these settings can hold,
/// its batches of the batch size, its random stream within its draws.
fn snapshot_against_settings(
    s: &DrawSnapshot,
    config: &PipelineConfig,
    field: &dyn Fn(&str) -> String,
) -> Result<(), PipelineError> {
    // Rows held at most: the pool's size (or what its byte bound lets it
    // hold) and one chunk over; each table grows to at most twice that.
    let pool =
        (config.order.shuffle as u64).min(config.order.shuffle_bytes as u64 / POOL_ROW_BYTES);
    let rows = pool.saturating_add(config.reading.chunk_records as u64);
    let most = rows.saturating_mul(2).saturating_add(8);
    for (k, &cap) in s.capacities.iter().enumerate() {
        if cap > most {
            return Err(invalid(
                field(&format!("capacities[{k}]")),
                format!(
                    "is {cap}, beyond the {most} a pool of {} rows ({} bytes) in chunks of {} records can grow to",
                    config.order.shuffle, config.order.shuffle_bytes, config.reading.chunk_records
                ),
            ));
        }
    }
    if s.chunks.len() as u64 > most {
        return Err(invalid(
            field("chunks"),
            format!(
                "has {} slots, beyond the {most} such a pool can have",
                s.chunks.len()
            ),
        ));
    }
    let [into, out] = s.batcher_rows;
    if let BatchPolicy::Fixed(b) = config.batching.batch {
        if out as u128 != s.seq as u128 * b as u128 {
            return Err(invalid(
                field("batcher_rows"),
                format!(
                    "{out} rows left the batcher before batch {}: batches of {b} make {}",
                    s.seq,
                    s.seq as u128 * b as u128
                ),
            ));
        }
    }
    let draws = into;
    let words = if config.order.shuffle == 0 {
        0
    } else {
        draws
            .saturating_mul(WORDS_PER_DRAW)
            .saturating_add(WORDS_PER_DRAW * REJECTIONS_ALLOWED)
    };
    if s.word_pos > words {
        return Err(invalid(
            field("word_pos"),
            format!(
                "is {}, beyond the {words} words of the random stream that {draws} draws can take",
                s.word_pos
            ),
        ));
    }
    Ok(())
}

/// A consumed range, the checkpoint (its index) and the field that holds it.
type Consumed = ([u64; 2], usize, String);

/// In an elastic resume no record was consumed by two old ranks in a pass.
pub(super) fn consumed_once(checkpoints: &[Checkpoint]) -> Result<(), PipelineError> {
    let n = checkpoints.len();
    // (pass, source name) → every range, with its checkpoint and field.
    let mut all: BTreeMap<(u64, &str), Vec<Consumed>> = BTreeMap::new();
    for (k, cp) in checkpoints.iter().enumerate() {
        for (i, p) in cp.passes.iter().enumerate() {
            for (&s, r) in &p.records {
                let name = cp.sources[s as usize].as_str();
                let field = format!("{}passes[{i}].records.{s}", which(k, n));
                let v = all.entry((p.pass, name)).or_default();
                v.extend(r.ranges().iter().map(|&x| (x, k, field.clone())));
            }
        }
    }
    for ((pass, name), mut ranges) in all {
        ranges.sort_by_key(|(r, k, _)| (*r, *k));
        // The furthest end so far of each checkpoint's ranges.
        let mut ends: BTreeMap<usize, u64> = BTreeMap::new();
        for ([s, e], k, f) in &ranges {
            if let Some((&other, _)) = ends.iter().find(|(&o, &end)| o != *k && end > *s) {
                let (field, by) = if *k > other {
                    (f.clone(), other)
                } else {
                    let first = ranges.iter().find(|(r, o, _)| *o == other && r[1] > *s);
                    (first.map_or_else(|| f.clone(), |x| x.2.clone()), *k)
                };
                return Err(invalid(
                    field,
                    format!(
                        "{name}: record {s} of pass {pass} was consumed by the rank of resume[{by}] too"
                    ),
                ));
            }
            let end = ends.entry(*k).or_insert(0);
            *end = (*end).max(*e);
        }
    }
    Ok(())
}

/// The record-source name of each input file: its resolved path, as the
/// readers name it (the name its first record carries when they differ).
fn input_names(config: &PipelineConfig) -> Result<Vec<(String, String)>, PipelineError> {
    let mut out = Vec::new();
    let lists =
        std::iter::once(&config.inputs.files).chain(config.inputs.sets.iter().map(|s| &s.files));
    for list in lists.filter(|l| !l.is_empty()) {
        for spec in expand_inputs(list)? {
            let name = match config
                .inputs
                .registry
                .resolve(&spec, config.inputs.format.as_deref())
            {
                Ok((_, path, _)) => path.to_string_lossy().into_owned(),
                Err(_) => spec.clone(),
            };
            out.push((spec, name));
        }
    }
    Ok(out)
}

/// `work` on `spec` within the settings' stall timeout, given a way to
/// open it at a record (the settings' registry, format and options): the
/// one place the checks read the inputs.
fn on_file<T: Send + 'static>(
    config: &PipelineConfig,
    spec: &str,
    what: &str,
    work: impl FnOnce(&dyn Fn(u64) -> feedline::Result<Box<dyn RecordReader>>) -> feedline::Result<T>
        + Send
        + 'static,
) -> Result<feedline::Result<T>, PipelineError> {
    let (registry, format, options, file) = (
        config.inputs.registry.clone(),
        config.inputs.format.clone(),
        config.reading.open.clone(),
        spec.to_string(),
    );
    within_stall_timeout(config.faults.stall_timeout, spec, what, move || {
        work(&|start| {
            let mut open = options.clone();
            open.start_record = start;
            registry.open(&file, format.as_deref(), &open)
        })
    })
}

/// How far `spec` goes: `Ok(None)` when it has at least `need` records,
/// else `Some(n)`, the records it has — its length if its format knows it,
/// else by opening it at record `need - 1` (the readers' own skip).
fn short_of(config: &PipelineConfig, spec: &str, need: u64) -> Result<Option<u64>, PipelineError> {
    if need == 0 {
        return Ok(None);
    }
    let counted = on_file(
        config,
        spec,
        "checking the checkpoint's records against it",
        move |open| {
            let r = open(0)?;
            if let Some(n) = r.len_hint() {
                return Ok((n < need).then_some(n));
            }
            drop(r);
            let mut r = open(need - 1)?;
            match r.next_record() {
                Ok(Some(_)) => Ok(None),
                // A bad record there is a record there.
                Err(_) if r.next_index() >= need - 1 => Ok(None),
                Err(e) => Err(e),
                Ok(None) => Ok(Some(r.next_index().min(need - 1))),
            }
        },
    )?;
    Ok(counted?)
}

/// The first record's source name of `spec` (what its records carry), if
/// it has one.
fn first_record_name(config: &PipelineConfig, spec: &str) -> Result<Option<String>, PipelineError> {
    let name = on_file(config, spec, "naming its records", move |open| {
        let mut r = open(0)?;
        Ok(match r.next_record() {
            Ok(Some(rec)) => Some(rec.location.source.name().to_string()),
            // A bad first record names its file too.
            Err(e) => e.location().map(|l| l.source.name().to_string()),
            Ok(None) => None,
        })
    })?;
    Ok(name.unwrap_or(None))
}

/// Every source the checkpoints name is an input, and every consumed
/// record is in its file (each file opened once, at the last record the
/// checkpoints say was consumed of it).
pub(super) fn against_files(
    checkpoints: &[Checkpoint],
    config: &PipelineConfig,
) -> Result<(), PipelineError> {
    let n = checkpoints.len();
    // Source name → (records needed, the field that needs them).
    let mut need: HashMap<&str, (u64, String, [u64; 2])> = HashMap::new();
    for (k, cp) in checkpoints.iter().enumerate() {
        for (i, p) in cp.passes.iter().enumerate() {
            for (&s, r) in &p.records {
                let name = cp.sources[s as usize].as_str();
                let Some(&last) = r.ranges().last() else {
                    continue;
                };
                let e = need.entry(name).or_insert((0, String::new(), [0, 0]));
                if last[1] > e.0 {
                    *e = (
                        last[1],
                        format!("{}passes[{i}].records.{s}", which(k, n)),
                        last,
                    );
                }
            }
        }
    }
    if need.is_empty() {
        return Ok(());
    }
    let inputs = input_names(config)?;
    let mut spec_of: HashMap<String, String> = inputs
        .iter()
        .map(|(spec, name)| (name.clone(), spec.clone()))
        .collect();
    if need.keys().any(|name| !spec_of.contains_key(*name)) {
        // Formats whose records carry another name than the path.
        for (spec, _) in &inputs {
            if let Some(name) = first_record_name(config, spec)? {
                spec_of.entry(name).or_insert_with(|| spec.clone());
            }
        }
    }
    let mut need: Vec<_> = need.into_iter().collect();
    need.sort();
    for (name, (end, field, [s, e])) in need {
        let Some(spec) = spec_of.get(name) else {
            let (k, cp) = checkpoints
                .iter()
                .enumerate()
                .find(|(_, cp)| cp.sources.iter().any(|x| x == name))
                .expect("a named source");
            let i = cp.sources.iter().position(|x| x == name).unwrap_or(0);
            return Err(invalid(
                format!("{}sources[{i}]", which(k, n)),
                format!("{name} is not one of the inputs"),
            ));
        };
        if let Some(has) = short_of(config, spec, end)? {
            return Err(invalid(
                field,
                format!("range [{s}, {e}) of {name} is beyond its {has} records"),
            ));
        }
    }
    Ok(())
}

/// A snapshot against the pass plan: its chunks' files and where reading
/// goes on within the pass's files; its chunks' first records and where
/// reading goes on within their files; the instances taken into the pool
/// no more than the files before where reading goes on hold.
pub(super) fn snapshot_against_plan(
    s: &DrawSnapshot,
    at: &str,
    plan: &PassPlan,
    config: &PipelineConfig,
) -> Result<(), PipelineError> {
    let field = |f: &str| format!("{at}.{f}");
    let tasks = plan.tasks(s.pass);
    let files = tasks.len() as u64;
    for (j, c) in s.chunks.iter().enumerate() {
        let Some(c) = c else { continue };
        if c.file >= files || c.file > s.next_file {
            return Err(invalid(
                field(&format!("chunks[{j}].file")),
                format!(
                    "is {}, but pass {} has {files} files here and reading goes on at file #{}",
                    c.file, s.pass, s.next_file
                ),
            ));
        }
    }
    if s.next_file > files || (s.next_file == files && s.next_record.is_some()) {
        return Err(invalid(
            field("next_file"),
            format!(
                "is {}{}, but pass {} has {files} files here",
                s.next_file,
                s.next_record
                    .map_or(String::new(), |r| format!(" (from record {r})")),
                s.pass
            ),
        ));
    }
    // The files read before where reading goes on, counted.
    let mut before = 0u128;
    let count = |spec: &str| -> Result<u64, PipelineError> {
        let n = on_file(config, spec, "counting its records", move |open| {
            let mut r = open(0)?;
            if let Some(n) = r.len_hint() {
                return Ok(n);
            }
            r.skip_to(u64::MAX)?;
            let _ = r.next_record()?;
            Ok(r.next_index())
        })?;
        Ok(n?)
    };
    let mut counts = HashMap::new();
    for t in tasks.iter().take(s.next_file as usize + 1) {
        let total = count(&t.file)?;
        counts.insert(t.seq as u64, total);
        if (t.seq as u64) < s.next_file {
            before += t.stride.count(total) as u128;
        }
    }
    if let Some(r) = s.next_record {
        let total = counts.get(&s.next_file).copied().unwrap_or(0);
        let t = &tasks[s.next_file as usize];
        if r > total {
            return Err(invalid(
                field("next_record"),
                format!("is {r}, but {} has {total} records", t.file),
            ));
        }
        before += t.stride.count(r) as u128;
    }
    for (j, c) in s.chunks.iter().enumerate() {
        let Some(c) = c else { continue };
        let total = counts.get(&c.file).copied().unwrap_or(u64::MAX);
        if c.start >= total {
            return Err(invalid(
                field(&format!("chunks[{j}].start")),
                format!(
                    "is {}, but {} has {total} records",
                    c.start, tasks[c.file as usize].file
                ),
            ));
        }
    }
    for (k, (&slot, &record)) in s.row_slots.iter().zip(&s.row_records).enumerate() {
        let Some(Some(c)) = s.chunks.get(slot as usize) else {
            continue;
        };
        let total = counts.get(&c.file).copied().unwrap_or(u64::MAX);
        if record >= total {
            return Err(invalid(
                field(&format!("row_records[{k}]")),
                format!(
                    "is {record}, but {} has {total} records",
                    tasks[c.file as usize].file
                ),
            ));
        }
    }
    if s.pass_records as u128 > before {
        return Err(invalid(
            field("pass_records"),
            format!(
                "is {}, more than the {before} records of the pass before where reading goes on (file #{}, record {})",
                s.pass_records,
                s.next_file,
                s.next_record.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}
