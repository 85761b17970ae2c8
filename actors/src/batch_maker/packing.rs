//! The batch maker's packing step: the documents of each made batch (in
//! batch-number order, so in draw order) into the packer; the packed
//! batches out, numbered per pass and laned; at a pass's end the open rows
//! made and the last batch filled with padding rows. On a resume it leaves
//! out the packed batches consumed before (by batch number) or the token
//! ranges of documents partly delivered (by record): it owns that part of
//! a checkpoint, as the consumers' progress records it from each packed
//! batch's segments.

use std::sync::Arc;

use feedline::feed_queue::Lanes;
use feedline::pack::{Delivered as DeliveredPieces, Pack, Packer};
use feedline::{Array, Batch};

use crate::equalize::PackedRanks;
use crate::error::PipelineError;
use crate::messages::Delivered;
use crate::recorder::PackRecorder;
use crate::resume_plan::MakerResume;

/// Packing in the batch maker.
pub(crate) struct PackStage {
    pack: Pack,
    rows: usize,
    packer: Packer,
    resume: Option<MakerResume>,
    /// Equalized ranks: the packed rows every rank delivers in a pass.
    ranks: Option<Arc<PackedRanks>>,
    recorder: PackRecorder,
    /// The pass being packed and its next packed batch's number.
    pass: Option<u64>,
    next_seq: u64,
    /// The pass's partly delivered documents (a resume by record).
    delivered: Option<DeliveredPieces>,
    /// Counts of the passes before the one being packed.
    before: feedline::pack::PackStats,
}

fn config(e: String) -> PipelineError {
    PipelineError::Config(e)
}

impl PackStage {
    /// Packing by `pack` into batches of `rows` rows (as many rows per
    /// pass as every other rank, with `ranks`).
    pub fn new(
        pack: Pack,
        rows: usize,
        resume: Option<MakerResume>,
        ranks: Option<Arc<PackedRanks>>,
        recorder: PackRecorder,
    ) -> Result<Self, PipelineError> {
        let packer = Packer::new(pack.clone(), rows).map_err(config)?;
        Ok(PackStage {
            pack,
            rows,
            packer,
            resume,
            ranks,
            recorder,
            pass: None,
            next_seq: 0,
            delivered: None,
            before: Default::default(),
        })
    }

    fn enter(&mut self, pass: u64) {
        if self.pass != Some(pass) {
            self.pass = Some(pass);
            self.next_seq = 0;
            self.delivered = self.resume.as_ref().and_then(|r| r.delivered(pass));
            let before = self.resume.as_ref().and_then(|r| r.packed_before(pass));
            self.packer.set_quota(
                (self.ranks.as_ref()).map(|r| r.quota(pass, self.rows, before.as_ref())),
            );
        }
    }

    fn check_quota(&self) -> Result<(), PipelineError> {
        self.packer
            .check_quota()
            .map_err(|e| config(format!("pass {:?}: {e}", self.pass)))
    }

    /// The documents of `batch` (of `pass`) packed: the packed batches made.
    pub fn documents(
        &mut self,
        pass: u64,
        batch: &Batch,
        lanes: Lanes,
    ) -> Result<Vec<(usize, Delivered)>, PipelineError> {
        self.enter(pass);
        let field = batch.field(&self.pack.field)?;
        let offsets = field.offsets.as_deref().ok_or_else(|| {
            config(format!(
                "packing: field `{}` is not laid out as offsets",
                self.pack.field
            ))
        })?;
        let origins = batch.origins();
        // Padding rows (equalize of records) are not documents; with packing
        // ranks are equalized in packed rows, after this.
        let docs = batch.len() - batch.padded_rows();
        let strided = || {
            config(format!(
                "packing: field `{}` is not a contiguous list of token ids within its offsets (a batch map made it so?)",
                self.pack.field
            ))
        };
        let mut wide: Vec<i32> = Vec::new();
        for (i, origin) in origins.iter().enumerate().take(docs) {
            let (s, e) = (offsets[i], offsets[i + 1]);
            let tokens: &[i32] = match &field.data {
                Array::I32(a) => a
                    .as_slice()
                    .ok_or_else(strided)?
                    .get(s..e)
                    .ok_or_else(strided)?,
                Array::I64(a) => {
                    let v = a
                        .as_slice()
                        .ok_or_else(strided)?
                        .get(s..e)
                        .ok_or_else(strided)?;
                    wide.clear();
                    for &t in v {
                        wide.push(i32::try_from(t).map_err(|_| {
                            PipelineError::Data(Arc::new(feedline::Error::Field {
                                location: origin.location(),
                                field: self.pack.field.clone(),
                                expected: "token ids within i32".into(),
                                actual: format!("{t}"),
                            }))
                        })?);
                    }
                    &wide
                }
                other => {
                    return Err(config(format!(
                        "packing: field `{}` is {}, expected i32 or i64 token ids",
                        self.pack.field,
                        other.dtype()
                    )))
                }
            };
            let delivered = self.delivered.as_ref().and_then(|d| d.get(origin));
            self.packer.push(*origin, tokens, delivered);
        }
        let mut out = Vec::new();
        while let Some(rows) = self.packer.pop() {
            self.out(pass, rows, lanes, &mut out)?;
        }
        self.check_quota()?;
        self.record();
        Ok(out)
    }

    /// The end of `pass`: its last packed batches.
    pub fn pass_end(
        &mut self,
        pass: u64,
        lanes: Lanes,
    ) -> Result<Vec<(usize, Delivered)>, PipelineError> {
        self.enter(pass);
        let mut out = Vec::new();
        for rows in self.packer.finish() {
            self.out(pass, rows, lanes, &mut out)?;
        }
        self.check_quota()?;
        self.record();
        // The next pass starts with a fresh packer (its counts kept).
        self.before.add(&self.packer.stats());
        self.packer = Packer::new(self.pack.clone(), self.rows).map_err(config)?;
        self.pass = None;
        Ok(out)
    }

    fn out(
        &mut self,
        pass: u64,
        rows: feedline::pack::PackedRows,
        lanes: Lanes,
        out: &mut Vec<(usize, Delivered)>,
    ) -> Result<(), PipelineError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        if (self.resume.as_ref()).is_some_and(|r| r.skips_batch(pass, seq)) {
            return Ok(());
        }
        let batch = Arc::new(rows.into_batch(self.pack.length)?);
        out.push((lanes.of_batch(seq), Delivered { pass, seq, batch }));
        Ok(())
    }

    fn record(&self) {
        let mut s = self.before;
        s.add(&self.packer.stats());
        self.recorder.packed(self.pack.length, s);
    }
}
