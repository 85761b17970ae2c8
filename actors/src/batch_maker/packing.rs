//! The batch maker's packing step: the documents of each made batch (in
//! batch-number order, so in draw order) into the packer; the packed
//! batches out, numbered per pass and laned; at a pass's end the open rows
//! made and the last batch filled with padding rows. On a resume it leaves
//! out the packed batches consumed before (by batch number) or the token
//! ranges of documents partly delivered (by record): it owns that part of
//! a checkpoint, as the consumers' progress records it from each packed
//! batch's segments.
//!
//! **Lazily, as the consumers take them.** A made batch's documents are
//! [`take`](PackStage::take)n (checked: the token field's layout, and every
//! document's ids within `i32` — a document whose ids are not is a bad
//! record, handed back to be judged), and held; the packed batches are made
//! one at a time by [`next`](PackStage::next) when the batch maker has room
//! for one, each placing only the pieces that batch needs. A document of
//! `n` tokens thus takes `O(n)` in all and holds, besides the made batch it
//! is in, at most a batch of rows and the window's open rows, however long
//! it is; the input batches held are counted in the statistics
//! (`packing.inputs_held_peak`, `packing.tokens_held_peak`).

use std::collections::VecDeque;
use std::sync::Arc;

use feedline::feed_queue::Lanes;
use feedline::pack::{Delivered as DeliveredPieces, Pack, Packer};
use feedline::{Batch, Origin};

use crate::equalize::PackedRanks;
use crate::error::PipelineError;
use crate::messages::Delivered;
use crate::recorder::PackRecorder;
use crate::resume_plan::MakerResume;
use crate::token_field::{doc_tokens, token_field};

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
    /// Taken and not yet all packed, in order.
    work: VecDeque<Work>,
    /// The input batches in `work`, and their documents' tokens.
    inputs: usize,
    tokens: u64,
}

/// What the packing step holds to pack.
enum Work {
    /// A made batch's documents: those of `docs` but the bad ones (`bad`,
    /// ascending), from document `next` on (the one before it being placed
    /// while the packer is placing).
    Docs {
        pass: u64,
        batch: Arc<Batch>,
        docs: usize,
        bad: Vec<usize>,
        next: usize,
        tokens: u64,
    },
    /// The end of a pass: its open rows made (once `ended`), then its last
    /// batches.
    PassEnd { pass: u64, ended: bool },
}

/// What the packing step gives out next.
pub(crate) enum Packed {
    /// A packed batch, for its lane.
    Batch(usize, Delivered),
    /// Every packed batch of the pass is out.
    PassEnd(u64),
}

fn config(e: String) -> PipelineError {
    PipelineError::config(e)
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
            work: VecDeque::new(),
            inputs: 0,
            tokens: 0,
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

    /// Input batches held: taken and not yet all packed.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Nothing is held to pack.
    pub fn is_empty(&self) -> bool {
        self.work.is_empty()
    }

    /// Take the documents of `batch` (of `pass`) to pack, checked: the
    /// documents whose token ids do not fit `i32` are left out and given
    /// back — bad records, each with its error naming the file, the
    /// record, the field and the id — to be judged.
    pub fn take(
        &mut self,
        pass: u64,
        batch: Arc<Batch>,
    ) -> Result<Vec<(Origin, feedline::Error)>, PipelineError> {
        let name = &self.pack.field;
        let (field, offsets) = token_field(&batch, name)?;
        // Padding rows (equalize of records) are not documents; with packing
        // ranks are equalized in packed rows, after this.
        let docs = batch.len() - batch.padded_rows();
        let mut bad = Vec::new();
        let mut bad_docs = Vec::new();
        let mut tokens = 0u64;
        for (i, origin) in batch.origins().iter().enumerate().take(docs) {
            let t = doc_tokens(field, offsets, name, i)?;
            match t.check() {
                Ok(()) => tokens += t.len() as u64,
                Err(b) => {
                    bad_docs.push(i);
                    bad.push((
                        *origin,
                        feedline::Error::Field {
                            location: origin.location(),
                            field: name.clone(),
                            expected: "token ids within i32 to pack".into(),
                            actual: b.to_string(),
                        },
                    ));
                }
            }
        }
        self.work.push_back(Work::Docs {
            pass,
            batch,
            docs,
            bad: bad_docs,
            next: 0,
            tokens,
        });
        self.inputs += 1;
        self.tokens += tokens;
        self.recorder.held(self.inputs, self.tokens);
        Ok(bad)
    }

    /// The end of `pass`: its last packed batches come after the ones of
    /// the documents taken before.
    pub fn take_pass_end(&mut self, pass: u64) {
        self.work.push_back(Work::PassEnd { pass, ended: false });
    }

    /// The next packed batch, or the end of a pass once its last batch is
    /// out; `None` until more is taken. Makes one packed batch at most,
    /// placing only the pieces it needs.
    pub fn next(&mut self, lanes: Lanes) -> Result<Option<Packed>, PipelineError> {
        loop {
            let pass = match self.work.front() {
                None => return Ok(None),
                Some(Work::Docs { pass, .. } | Work::PassEnd { pass, .. }) => *pass,
            };
            self.enter(pass);
            let Some(work) = self.work.front_mut() else {
                return Ok(None);
            };
            match work {
                Work::Docs {
                    batch,
                    docs,
                    bad,
                    next,
                    tokens,
                    ..
                } => {
                    let docs = *docs;
                    let name = &self.pack.field;
                    let (field, offsets) = token_field(batch, name)?;
                    if !self.packer.placing() {
                        // The next good document, if any, is started.
                        while *next < docs && bad.binary_search(next).is_ok() {
                            *next += 1;
                        }
                        if *next == docs {
                            let held = *tokens;
                            self.work.pop_front();
                            self.inputs -= 1;
                            self.tokens -= held;
                            continue;
                        }
                        let origin = batch.origins()[*next];
                        let n = doc_tokens(field, offsets, name, *next)?.len();
                        let delivered = self.delivered.as_ref().and_then(|d| d.get(&origin));
                        self.packer
                            .start(origin, n, delivered)
                            .map_err(|e| config(e.to_string()))?;
                        *next += 1;
                    }
                    let i = *next - 1;
                    let t = doc_tokens(field, offsets, name, i)?;
                    let rows = self.packer.next_batch(t).map_err(|e| {
                        PipelineError::Data(Arc::new(feedline::Error::Field {
                            location: batch.origins()[i].location(),
                            field: name.clone(),
                            expected: "token ids within i32 to pack".into(),
                            actual: e.to_string(),
                        }))
                    })?;
                    self.check_quota()?;
                    if let Some(rows) = rows {
                        self.record();
                        if let Some(d) = self.out(pass, rows, lanes)? {
                            return Ok(Some(d));
                        }
                    }
                }
                Work::PassEnd { ended, .. } => {
                    if !*ended {
                        *ended = true;
                        self.packer.end_pass();
                        self.check_quota()?;
                        self.record();
                    }
                    if let Some(rows) = self.packer.pop() {
                        if let Some(d) = self.out(pass, rows, lanes)? {
                            return Ok(Some(d));
                        }
                        continue;
                    }
                    // The next pass starts with a fresh packer (its counts kept).
                    self.work.pop_front();
                    self.before.add(&self.packer.stats());
                    self.packer = Packer::new(self.pack.clone(), self.rows).map_err(config)?;
                    self.pass = None;
                    return Ok(Some(Packed::PassEnd(pass)));
                }
            }
        }
    }

    /// Packed batch `rows` of `pass`, numbered, for its lane — or none
    /// when it was consumed before a resume.
    fn out(
        &mut self,
        pass: u64,
        rows: feedline::pack::PackedRows,
        lanes: Lanes,
    ) -> Result<Option<Packed>, PipelineError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        if (self.resume.as_ref()).is_some_and(|r| r.skips_batch(pass, seq)) {
            return Ok(None);
        }
        let batch = Arc::new(rows.into_batch(self.pack.length)?);
        Ok(Some(Packed::Batch(
            lanes.of_batch(seq),
            Delivered { pass, seq, batch },
        )))
    }

    fn record(&self) {
        let mut s = self.before;
        s.add(&self.packer.stats());
        self.recorder.packed(self.pack.length, s);
    }
}
