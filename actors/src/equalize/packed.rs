//! Equal packed rows per rank (equalize with packing), the arithmetic in
//! one place: every document's tokens counted once at start-up
//! ([`count_tokens`]: each file read and transformed as a pass makes it,
//! the packed field's length per record), each rank's tokens in a pass
//! (its file tasks, by the pass plan), and the rows every rank delivers
//! ([`Pack::equalized_rows`]). The batch maker's packing step keeps this
//! rank's [`RowQuota`] of each pass ([`PackedRanks::quota`]). The row
//! count depends only on the tokens, not on the order documents arrive
//! in, so it holds in shuffled mode as in deterministic mode; a pass
//! resumed by record (shuffled, same shard) gets the rows left after the
//! batches consumed before, for the tokens not delivered before.

use std::sync::Arc;

use feedline::pack::{Pack, RowQuota};
use feedline::plan::{Equalize, FileTask, PassPlan};
use feedline::transform::BatchTransformer;
use feedline::{Batch, Chunk, Origin, RowRef, Schema, SourceId};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::resume_plan::PackedBefore;
use crate::stall::within_stall_timeout;
use crate::token_field::{doc_tokens, token_field};

/// Rows read and transformed at a time while counting.
const COUNT_CHUNK_ROWS: usize = 256;
/// Payload bytes read at a time while counting.
const COUNT_CHUNK_BYTES: usize = 4 << 20;

/// Every rank's packed rows: the tokens of every record, and how to
/// equalize.
pub(crate) struct PackedRanks {
    /// Per file (`FileTask::file_index`), the tokens each record puts into
    /// rows (0: no document — empty, left out, or failed).
    tokens: Vec<Vec<u32>>,
    /// Per file, the sum of `tokens`.
    totals: Vec<u64>,
    /// Per file, its records' source as they name it (`None`: no document).
    sources: Vec<Option<SourceId>>,
    plan: PassPlan,
    pack: Pack,
    how: Equalize,
}

impl PackedRanks {
    /// This rank's quota of `pass`: the rows every rank delivers, and the
    /// tokens its own documents hold — on a pass resumed by record, what
    /// is left of both after what was delivered `before` (batches of
    /// `rows_per_batch` rows).
    pub fn quota(
        &self,
        pass: u64,
        rows_per_batch: usize,
        before: Option<&PackedBefore>,
    ) -> RowQuota {
        let shard = self.plan.get_shard();
        let (per_rank, rows) = self.rows_in_pass(pass);
        log::info!(
            "pass {pass}: the ranks' documents hold {per_rank:?} tokens; every rank delivers {rows} packed rows of {} (equalize {:?})",
            self.pack.length,
            self.how
        );
        let mine = per_rank.get(shard.rank).copied().unwrap_or(0);
        let Some(before) = before else {
            return RowQuota {
                rows,
                tokens: mine,
                how: self.how,
            };
        };
        let tokens: u64 = self
            .plan
            .tasks(pass)
            .iter()
            .map(|t| self.task_tokens_left(t, before))
            .sum();
        let rows_before = before.batches * rows_per_batch as u64;
        log::info!(
            "pass {pass} resumed: {} packed rows delivered before, {} of {rows} left for {tokens} tokens of {mine}",
            rows_before,
            rows.saturating_sub(rows_before)
        );
        RowQuota {
            rows: rows.saturating_sub(rows_before),
            tokens,
            how: self.how,
        }
    }

    /// Every rank's tokens in `pass`, and the packed rows every rank
    /// delivers in it.
    fn rows_in_pass(&self, pass: u64) -> (Vec<u64>, u64) {
        let per_rank: Vec<u64> = (0..self.plan.get_shard().world_size)
            .map(|r| {
                self.plan.for_rank(r).map_or(0, |p| {
                    p.tasks(pass).iter().map(|t| self.task_tokens(t)).sum()
                })
            })
            .collect();
        let rows = self.pack.equalized_rows(&per_rank, self.how).unwrap_or(0);
        (per_rank, rows)
    }

    /// The packed batches of `rows_per_batch` rows every rank delivers in
    /// the whole of `pass`: its rows, the last batch filled up with padding
    /// rows (as the packer makes it at a pass's end).
    pub fn batches_in_pass(&self, pass: u64, rows_per_batch: usize) -> u64 {
        self.rows_in_pass(pass)
            .1
            .div_ceil(rows_per_batch.max(1) as u64)
    }

    /// The tokens of task `t`'s documents not delivered `before`.
    fn task_tokens_left(&self, t: &FileTask, before: &PackedBefore) -> u64 {
        let (Some(lens), Some(Some(source))) = (
            self.tokens.get(t.file_index),
            self.sources.get(t.file_index),
        ) else {
            return 0;
        };
        let whole = before.records.get(source);
        let partly = before.delivered.as_deref();
        lens.iter()
            .enumerate()
            .skip(t.start_record as usize)
            .filter(|(i, _)| t.stride.keeps(*i as u64))
            .filter(|(i, _)| !whole.is_some_and(|w| w.contains(*i as u64)))
            .map(|(i, &n)| {
                let done: u64 = partly
                    .and_then(|d| d.get(&Origin::new(*source, i as u64)))
                    .map_or(0, |r| r.ranges().iter().map(|[s, e]| e - s).sum());
                u64::from(n).saturating_sub(done)
            })
            .sum()
    }

    fn task_tokens(&self, t: &FileTask) -> u64 {
        let Some(lens) = self.tokens.get(t.file_index) else {
            return 0;
        };
        if t.start_record == 0 && t.stride.is_all() {
            // A whole file (sharding by file): its sum, once.
            return self.totals[t.file_index];
        }
        lens.iter()
            .enumerate()
            .skip(t.start_record as usize)
            .filter(|(i, _)| t.stride.keeps(*i as u64))
            .map(|(_, &n)| u64::from(n))
            .sum()
    }
}

/// Count the tokens of every document of `plan`'s files (in
/// `config.files` order): each file read (within the stall timeout to
/// open it), its records through the record stage and the instance and
/// batch maps as pass 0 makes them, and the packed field's length per
/// record as `pack` puts it into rows. A record that fails is no
/// document (as the pipeline skips it; a failing pass fails either way).
pub(crate) fn count_tokens(
    config: &PipelineConfig,
    schema: &Schema,
    plan: &PassPlan,
    pack: &Pack,
) -> Result<PackedRanks, PipelineError> {
    let t0 = std::time::Instant::now();
    let transformer = BatchTransformer::new(&config.transforms, schema, config.order.seed)?;
    let mut tokens = Vec::with_capacity(plan.files().len());
    let mut sources = Vec::with_capacity(plan.files().len());
    let (mut documents, mut total) = (0u64, 0u64);
    for f in plan.files() {
        let (registry, format, open, file) = (
            config.inputs.registry.clone(),
            config.inputs.format.clone(),
            config.reading.open.clone(),
            f.clone(),
        );
        let mut reader = within_stall_timeout(
            config.faults.stall_timeout,
            f,
            "opening it to count its tokens",
            move || registry.open(&file, format.as_deref(), &open),
        )??;
        let mut lens: Vec<u32> = Vec::new();
        let mut source = None;
        loop {
            let mut chunk = Chunk::with_budget(schema, COUNT_CHUNK_ROWS, COUNT_CHUNK_BYTES);
            let read = reader.read_chunk(&mut chunk, COUNT_CHUNK_ROWS, COUNT_CHUNK_BYTES);
            let chunk = match &config.transforms.records {
                Some(stage) if !chunk.is_empty() => stage.apply(chunk)?.chunk,
                _ => chunk,
            };
            if !chunk.is_empty() {
                let batch = made(chunk, schema, transformer.as_ref())?;
                source = source.or_else(|| batch.origins().first().map(|o| o.source));
                for (origin, n) in batch_tokens(&batch, pack)? {
                    let i = origin as usize;
                    if lens.len() <= i {
                        lens.resize(i + 1, 0);
                    }
                    let n = pack.packed_tokens(n);
                    lens[i] = u32::try_from(n).map_err(|_| {
                        PipelineError::config(format!(
                            "{f}: record {origin}: a document of {n} tokens is more than equalizing packed rows counts"
                        ))
                    })?;
                    documents += 1;
                    total += n as u64;
                }
            }
            match read {
                Ok(0) => break,
                Ok(_) => {}
                // A bad record is no document; the pass judges it.
                Err(_) if reader.can_continue() => {}
                Err(_) => break,
            }
        }
        tokens.push(lens);
        sources.push(source);
    }
    log::info!(
        "equalize with packing: counted {total} tokens in {documents} documents of {} files in {:?}",
        plan.files().len(),
        t0.elapsed()
    );
    Ok(PackedRanks {
        totals: tokens
            .iter()
            .map(|l| l.iter().map(|&n| u64::from(n)).sum())
            .collect(),
        tokens,
        sources,
        plan: plan.clone(),
        pack: pack.clone(),
        how: config.batching.equalize,
    })
}

/// The batch of `chunk`'s rows as the pipeline makes it (its failed rows
/// left out).
fn made(
    chunk: Chunk,
    schema: &Schema,
    transformer: Option<&BatchTransformer>,
) -> Result<Batch, PipelineError> {
    let chunk = Arc::new(chunk);
    let rows: Vec<RowRef> = (0..chunk.len())
        .map(|i| RowRef::new(chunk.clone(), i))
        .collect();
    Ok(match transformer {
        Some(t) => t.run(&rows, 0)?.batch,
        None => feedline::collate_rows(schema, &rows)?,
    })
}

/// Each row's record and its document's tokens (the packed field's
/// length); a document whose ids do not fit `i32` is no document (the
/// pass skips it, or fails on it).
fn batch_tokens(batch: &Batch, pack: &Pack) -> Result<Vec<(u64, usize)>, PipelineError> {
    let (field, offsets) = token_field(batch, &pack.field)?;
    let mut out = Vec::with_capacity(batch.len());
    for (i, o) in batch.origins().iter().enumerate() {
        let t = doc_tokens(field, offsets, &pack.field, i)?;
        if t.check().is_ok() {
            out.push((o.record, t.len()));
        }
    }
    Ok(out)
}
