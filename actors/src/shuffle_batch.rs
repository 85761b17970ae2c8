//! The `ShuffleBatch` actor: takes chunks from the readers into the shuffle
//! buffer, draws instances, fills batches, collates them, and pushes them to
//! the feed queue.
//!
//! Backpressure: while batches wait for room in the feed queue, the actor
//! processes no further message (`ctx.wait`), so chunks wait in the readers'
//! unacknowledged window. In deterministic mode chunks are taken in a fixed
//! order — the plan's file order, each file's chunks in sequence — whatever
//! reader delivered them when; out-of-order chunks are held in a reorder
//! window of bounded bytes, beyond which their acknowledgement is withheld.
//!
//! With several file sets the stage mixes them by weight: it takes a chunk
//! of a set only while that set is among the least served (instances taken
//! divided by weight) of the sets still being read; chunks of a set that is
//! ahead wait unacknowledged, so its readers pause. In deterministic mode the
//! same rule picks, from each set's plan order, which set's next chunk comes
//! next — a mix that depends on the data only, not on timing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use feedline::batcher::Batcher;
use feedline::shuffle::{ShuffleBuffer, ShuffleConfig};
use feedline::{collate_rows, Chunk, RowRef, Schema};

use crate::config::{FeedMode, PipelineConfig};
use crate::error::PipelineError;
use crate::feed_queue::{FeedQueue, Pushed};
use crate::messages::{
    ChunkAck, ChunkMsg, CloseQueue, Delivered, EndOfPass, PassFlushed, PassQuota, PassSets,
    QueueItem, SetDrained, Shutdown,
};
use crate::stats::{ns, Stats};
use crate::supervisor::Supervisor;

struct Held {
    chunk: Arc<Chunk>,
    last: bool,
    /// Set while the acknowledgement is withheld (outside the reorder window).
    ack: Option<Recipient<ChunkAck>>,
}

/// Several file sets: what each got this pass, and the chunks that wait.
struct Mix {
    names: Vec<String>,
    weights: Vec<f64>,
    /// Instances taken this pass, per set.
    taken: Vec<u64>,
    /// The set's part of the pass is read (not deterministic mode).
    drained: Vec<bool>,
    /// Files per set this pass (deterministic mode).
    files: Vec<usize>,
    /// Chunks of sets ahead of their share, acknowledgements withheld (not
    /// deterministic mode).
    waiting: Vec<VecDeque<(Arc<Chunk>, Recipient<ChunkAck>)>>,
}

impl Mix {
    fn new(sets: &[crate::config::FileSet]) -> Self {
        let n = sets.len();
        Mix {
            names: sets.iter().map(|s| s.name.clone()).collect(),
            weights: sets.iter().map(|s| s.weight).collect(),
            taken: vec![0; n],
            drained: vec![false; n],
            files: vec![0; n],
            waiting: (0..n).map(|_| VecDeque::new()).collect(),
        }
    }

    fn served(&self, set: usize) -> f64 {
        self.taken[set] as f64 / self.weights[set]
    }

    /// Of the sets for which `active` holds, the least served (the first on ties).
    fn least_served(&self, active: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.taken.len())
            .filter(|&s| active(s))
            .min_by(|&a, &b| self.served(a).total_cmp(&self.served(b)))
    }

    /// Not deterministic: a set whose waiting chunk may be taken now — it
    /// has one, and no set still being read is less served.
    fn ready(&self) -> Option<usize> {
        let least = self.least_served(|s| !self.drained[s])?;
        let floor = self.served(least);
        (0..self.taken.len()).find(|&s| !self.waiting[s].is_empty() && self.served(s) <= floor)
    }

    fn summary(&self) -> String {
        let total: u64 = self.taken.iter().sum::<u64>().max(1);
        (self.names.iter().zip(&self.taken))
            .map(|(n, t)| format!("{n} {t} ({:.1}%)", 100.0 * *t as f64 / total as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn start_pass(&mut self) {
        self.taken.iter_mut().for_each(|t| *t = 0);
        self.drained.iter_mut().for_each(|d| *d = false);
    }
}

/// An item of the end-of-pass drain, waiting for room in the feed queue.
enum Deferred {
    /// A batch's rows, its lane and number already given.
    Rows {
        lane: usize,
        pass: u64,
        seq: u64,
        rows: Vec<RowRef>,
    },
    /// An end-of-pass marker.
    Item(usize, QueueItem),
}

/// The shuffle-batch actor.
pub struct ShuffleBatch {
    config: Arc<PipelineConfig>,
    schema: Schema,
    buffer: ShuffleBuffer,
    batcher: Batcher,
    feed: Addr<FeedQueue>,
    supervisor: Addr<Supervisor>,
    stats: Stats,
    lanes: usize,
    pass: u64,
    seq: u64,
    pass_records: u64,
    out: VecDeque<(usize, QueueItem)>,
    /// The end-of-pass drain, numbered but not yet collated: collated only as
    /// the feed queue takes batches, so big batch buffers are recycled and
    /// not all allocated at once. Pushed before anything else.
    deferred: VecDeque<Deferred>,
    /// Set while the end-of-pass drain is drawn.
    deferring: bool,
    // Deterministic mode: per file set the next (file, chunk) to take, and
    // those held (by set, file, chunk).
    next: Vec<(usize, u64)>,
    held: BTreeMap<(usize, usize, u64), Held>,
    /// Several file sets: the weighted mix.
    mix: Option<Mix>,
    held_bytes: usize,
    idle_since: Instant,
    failed: bool,
    /// Equalized ranks: this pass's quota, instances drawn so far, and the
    /// first rows drawn (kept to repeat as padding).
    quota: Option<PassQuota>,
    drawn: u64,
    pad_rows: Vec<RowRef>,
}

impl ShuffleBatch {
    /// The shuffle buffer of these settings (drawing for pass 0).
    pub(crate) fn buffer(config: &PipelineConfig) -> ShuffleBuffer {
        ShuffleBuffer::new(ShuffleConfig {
            pool_size: config.shuffle,
            min_pool_size: config.min_pool,
            max_bytes: config.shuffle_bytes,
            seed: config.seed,
        })
    }

    pub(crate) fn new(
        config: Arc<PipelineConfig>,
        schema: Schema,
        batcher: Batcher,
        feed: Addr<FeedQueue>,
        supervisor: Addr<Supervisor>,
        stats: Stats,
    ) -> Self {
        let buffer = Self::buffer(&config);
        let lanes = match config.feed {
            FeedMode::Shared => 1,
            FeedMode::RoundRobin => config.devices.max(1),
        };
        let sets = config.sets.len();
        let mix = (sets > 1).then(|| Mix::new(&config.sets));
        ShuffleBatch {
            config,
            schema,
            buffer,
            batcher,
            feed,
            supervisor,
            stats,
            lanes,
            pass: 0,
            seq: 0,
            pass_records: 0,
            out: VecDeque::new(),
            deferred: VecDeque::new(),
            deferring: false,
            next: vec![(0, 0); sets.max(1)],
            held: BTreeMap::new(),
            mix,
            held_bytes: 0,
            idle_since: Instant::now(),
            failed: false,
            quota: None,
            drawn: 0,
            pad_rows: Vec::new(),
        }
    }

    /// Take a drawn row toward a batch, unless this rank's quota is met.
    fn take_row(&mut self, row: RowRef) {
        if let Some(q) = self.quota.filter(|q| q.pass == self.pass) {
            if self.drawn >= q.keep {
                self.stats.inner.equalize_dropped.fetch_add(1, Relaxed);
                return;
            }
            if (self.pad_rows.len() as u64) < q.pad {
                self.pad_rows.push(row.clone());
            }
        }
        self.drawn += 1;
        if let Some(rows) = self.batcher.push(row) {
            self.emit(rows);
        }
    }

    /// End of a pass with a quota: repeat the pass's first rows as padding.
    fn pad(&mut self) {
        let Some(q) = self.quota.filter(|q| q.pass == self.pass) else {
            return;
        };
        let rows = std::mem::take(&mut self.pad_rows);
        if q.pad > 0 && rows.is_empty() {
            log::error!(
                "pass {}: {} padding instances asked, none to repeat",
                self.pass,
                q.pad
            );
        }
        for i in 0..q.pad as usize {
            let Some(row) = rows.get(i % rows.len().max(1)) else {
                break;
            };
            self.stats.inner.equalize_padded.fetch_add(1, Relaxed);
            if let Some(batch) = self.batcher.push(row.clone()) {
                self.emit(batch);
            }
        }
    }

    /// Put a chunk's instances into the pool and make every batch that can be made.
    fn accept(&mut self, chunk: Arc<Chunk>) {
        if chunk.is_empty() {
            return;
        }
        self.pass_records += chunk.len() as u64;
        self.stats
            .inner
            .shuffle
            .records
            .fetch_add(chunk.len() as u64, Relaxed);
        self.stats
            .inner
            .shuffle
            .bytes
            .fetch_add(chunk.payload_bytes() as u64, Relaxed);
        self.buffer.push_chunk(chunk);
        self.draw();
    }

    fn draw(&mut self) {
        while self.buffer.can_draw() {
            let Some(row) = self.buffer.draw() else { break };
            self.take_row(row);
        }
    }

    fn emit(&mut self, rows: Vec<RowRef>) {
        let (lane, pass, seq) = ((self.seq % self.lanes as u64) as usize, self.pass, self.seq);
        self.seq += 1;
        self.stats.note_batch();
        if self.deferring {
            self.deferred.push_back(Deferred::Rows {
                lane,
                pass,
                seq,
                rows,
            });
        } else {
            self.collate_out(lane, pass, seq, &rows);
        }
    }

    fn collate_out(&mut self, lane: usize, pass: u64, seq: u64, rows: &[RowRef]) {
        match collate_rows(&self.schema, rows) {
            Ok(batch) => {
                self.out.push_back((
                    lane,
                    QueueItem::Batch(Delivered {
                        pass,
                        seq,
                        batch: Arc::new(batch),
                    }),
                ));
            }
            Err(e) => {
                log::error!("collation failed: {e}");
                self.failed = true;
                self.supervisor
                    .do_send(crate::supervisor::PipelineFailed(e.into()));
            }
        }
    }

    /// Push every pending item into the feed queue's lanes (then have the
    /// queue closed, if `close`). Items that find their lane full stay in
    /// `out`, and the actor holds its mailbox (`ctx.wait`) until there is
    /// room — the backpressure that keeps chunks waiting in the readers'
    /// windows — then pushes the rest. One `ctx.wait` at a time: actix runs
    /// several waiting futures last-in-first-out.
    fn flush_out(&mut self, ctx: &mut Context<Self>, close: bool) {
        self.idle_since = Instant::now();
        if self.out.is_empty() && self.deferred.is_empty() && !close {
            return;
        }
        loop {
            self.undefer();
            let pushed = match self.stats.feed_lanes() {
                Some(lanes) => lanes.push(&mut self.out),
                None => Err(PipelineError::Stopped),
            };
            match pushed {
                // Room for all: collate the next part of the drain.
                Ok(Pushed::All) if !self.deferred.is_empty() && !self.failed => continue,
                Ok(Pushed::All) => {
                    // Every item is in: the queue's actor closes the lanes —
                    // unless a batch of the drain failed to collate: then the
                    // supervisor fails them (closing first would end the pass
                    // cleanly, and the error would never reach a consumer).
                    if close && !self.failed {
                        self.feed.do_send(CloseQueue);
                    }
                }
                Ok(Pushed::Full(room)) => {
                    let t0 = Instant::now();
                    ctx.wait(room.into_actor(self).map(move |_, act, ctx| {
                        act.stats
                            .inner
                            .shuffle
                            .blocked_ns
                            .fetch_add(ns(t0.elapsed()), Relaxed);
                        // Waiting for the queue is not waiting for input; a
                        // cancelled wait (the queue failed) shows in the next push.
                        act.flush_out(ctx, close);
                    }));
                }
                Err(_) => {
                    // The queue failed or stopped: nothing more to do here.
                    self.failed = true;
                    ctx.stop();
                }
            }
            return;
        }
    }

    /// Account the time since the stage last had work as idle.
    fn idle_ends(&mut self) {
        self.stats
            .inner
            .shuffle
            .idle_ns
            .fetch_add(ns(self.idle_since.elapsed()), Relaxed);
        self.idle_since = Instant::now();
    }

    /// Run `work`, accounting its time as busy.
    fn timed(&mut self, work: impl FnOnce(&mut Self)) {
        let t0 = Instant::now();
        work(self);
        self.stats
            .inner
            .shuffle
            .busy_ns
            .fetch_add(ns(t0.elapsed()), Relaxed);
    }

    /// Collate the deferred drain's next batches, as many as the feed queue
    /// could take now (a capacity per lane), with the markers between them.
    fn undefer(&mut self) {
        let room = self.lanes * self.config.capacity.max(1);
        while self.out.len() < room && !self.failed {
            match self.deferred.pop_front() {
                Some(Deferred::Rows {
                    lane,
                    pass,
                    seq,
                    rows,
                }) => self.timed(|me| me.collate_out(lane, pass, seq, &rows)),
                Some(Deferred::Item(lane, item)) => self.out.push_back((lane, item)),
                None => break,
            }
        }
    }

    /// Deterministic mode: the set whose next chunk comes next — the least
    /// served of those with files left this pass (with one set, set 0).
    fn next_set(&self) -> Option<usize> {
        match &self.mix {
            None => Some(0),
            Some(m) => m.least_served(|s| self.next[s].0 < m.files[s]),
        }
    }

    /// Deterministic mode: take a chunk that is next in order.
    fn take_next(&mut self, set: usize, chunk: Arc<Chunk>, last: bool) {
        let next = &mut self.next[set];
        *next = if last {
            (next.0 + 1, 0)
        } else {
            (next.0, next.1 + 1)
        };
        self.note_taken(set, &chunk);
        self.accept(chunk);
    }

    fn note_taken(&mut self, set: usize, chunk: &Chunk) {
        if let Some(m) = &mut self.mix {
            m.taken[set] += chunk.len() as u64;
        }
    }

    /// Deterministic mode: take every held chunk that is next in order.
    fn take_in_order(&mut self) {
        while let Some(set) = self.next_set() {
            let (file, chunk) = self.next[set];
            let Some(h) = self.held.remove(&(set, file, chunk)) else {
                break;
            };
            self.held_bytes -= h.chunk.memory_bytes();
            if let Some(ack) = h.ack {
                ack.do_send(ChunkAck);
            }
            self.take_next(set, h.chunk, h.last);
        }
        // Release withheld acknowledgements that now fit in the window.
        let mut budget = self.config.reorder_window.saturating_sub(self.held_bytes);
        for h in self.held.values_mut() {
            if h.ack.is_some() {
                let b = h.chunk.memory_bytes();
                if b > budget {
                    break;
                }
                budget -= b;
                h.ack.take().expect("checked").do_send(ChunkAck);
            }
        }
    }

    /// Several sets, not deterministic: take waiting chunks while their set
    /// is among the least served.
    fn take_mixed(&mut self) {
        while let Some(set) = self.mix.as_ref().and_then(Mix::ready) {
            let m = self.mix.as_mut().expect("checked");
            let (chunk, ack) = m.waiting[set].pop_front().expect("ready has one");
            ack.do_send(ChunkAck);
            self.note_taken(set, &chunk);
            self.accept(chunk);
        }
    }

    fn end_pass(&mut self, pass: u64) {
        if self.config.deterministic {
            self.take_in_order();
            if !self.held.is_empty() {
                log::error!(
                    "pass {pass}: {} chunks out of order at the end of the pass (next expected (set, file, chunk) {:?}); taking them as they are",
                    self.held.len(),
                    self.next_set().map(|s| (s, self.next[s]))
                );
                let held = std::mem::take(&mut self.held);
                for ((set, _, _), h) in held {
                    if let Some(ack) = h.ack {
                        ack.do_send(ChunkAck);
                    }
                    self.note_taken(set, &h.chunk);
                    self.accept(h.chunk);
                }
            }
            self.held_bytes = 0;
            self.next.iter_mut().for_each(|n| *n = (0, 0));
        }
        if let Some(m) = &mut self.mix {
            let left: Vec<_> = m.waiting.iter_mut().flat_map(|w| w.drain(..)).collect();
            if !left.is_empty() {
                log::error!(
                    "pass {pass}: {} chunks of file sets still waiting at the end of the pass; taking them",
                    left.len()
                );
            }
            for (chunk, ack) in left {
                ack.do_send(ChunkAck);
                self.accept(chunk);
            }
            let m = self.mix.as_mut().expect("checked");
            log::info!("pass {pass}: file sets gave {}", m.summary());
            m.start_pass();
        }
        // The drain is collated as the feed queue takes it (`undefer`).
        self.deferring = true;
        self.buffer.set_draining(true);
        self.draw();
        self.buffer.set_draining(false);
        self.pad();
        self.drawn = 0;
        if let Some(rows) = self.batcher.flush() {
            self.emit(rows);
        }
        self.deferring = false;
        for lane in 0..self.lanes {
            let marker = QueueItem::EndOfPass(pass);
            if self.deferred.is_empty() {
                self.out.push_back((lane, marker));
            } else {
                self.deferred.push_back(Deferred::Item(lane, marker));
            }
        }
        self.supervisor.do_send(PassFlushed {
            pass,
            batches: self.seq,
            records: self.pass_records,
        });
        self.pass = pass + 1;
        self.seq = 0;
        self.pass_records = 0;
        self.buffer.start_pass(pass + 1);
    }
}

impl Actor for ShuffleBatch {
    type Context = Context<Self>;
}

impl Handler<ChunkMsg> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: ChunkMsg, ctx: &mut Context<Self>) {
        self.stats
            .inner
            .shuffle
            .idle_ns
            .fetch_add(ns(self.idle_since.elapsed()), Relaxed);
        let t0 = Instant::now();
        if self.failed {
            return;
        }
        if !self.config.deterministic {
            match &mut self.mix {
                Some(m) if msg.set < m.waiting.len() => {
                    m.waiting[msg.set].push_back((msg.chunk, msg.ack));
                    self.take_mixed();
                }
                _ => {
                    msg.ack.do_send(ChunkAck);
                    self.accept(msg.chunk);
                }
            }
        } else if msg.pass == self.pass
            && self.next_set() == Some(msg.set)
            && (msg.file_seq, msg.chunk_seq) == self.next[msg.set]
        {
            msg.ack.do_send(ChunkAck);
            self.take_next(msg.set, msg.chunk, msg.last);
            self.take_in_order();
        } else {
            let bytes = msg.chunk.memory_bytes();
            let ack = if self.held_bytes + bytes > self.config.reorder_window {
                Some(msg.ack)
            } else {
                msg.ack.do_send(ChunkAck);
                None
            };
            self.held_bytes += bytes;
            self.held.insert(
                (msg.set, msg.file_seq, msg.chunk_seq),
                Held {
                    chunk: msg.chunk,
                    last: msg.last,
                    ack,
                },
            );
        }
        self.stats
            .inner
            .shuffle
            .busy_ns
            .fetch_add(ns(t0.elapsed()), Relaxed);
        self.flush_out(ctx, false);
    }
}

impl Handler<PassSets> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: PassSets, ctx: &mut Context<Self>) {
        self.idle_ends();
        if let Some(m) = &mut self.mix {
            if msg.pass == self.pass && msg.files.len() == m.files.len() {
                m.files = msg.files;
            } else {
                log::error!(
                    "file sets of pass {} ({:?}) announced during pass {}",
                    msg.pass,
                    msg.files,
                    self.pass
                );
            }
        }
        if self.config.deterministic {
            // A set with no files this pass no longer holds the others back.
            self.timed(Self::take_in_order);
            self.flush_out(ctx, false);
        }
    }
}

impl Handler<SetDrained> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: SetDrained, ctx: &mut Context<Self>) {
        self.idle_ends();
        let Some(m) = &mut self.mix else { return };
        if msg.pass != self.pass || msg.set >= m.drained.len() {
            return;
        }
        m.drained[msg.set] = true;
        if !self.config.deterministic {
            self.timed(Self::take_mixed);
            self.flush_out(ctx, false);
        }
    }
}

impl Handler<PassQuota> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: PassQuota, _: &mut Context<Self>) {
        self.quota = Some(msg);
        self.pad_rows.clear();
    }
}

impl Handler<EndOfPass> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: EndOfPass, ctx: &mut Context<Self>) {
        let t0 = Instant::now();
        self.end_pass(msg.0);
        self.stats
            .inner
            .shuffle
            .busy_ns
            .fetch_add(ns(t0.elapsed()), Relaxed);
        let last = msg.0 + 1 >= self.config.passes;
        self.flush_out(ctx, last);
    }
}

impl Handler<Shutdown> for ShuffleBatch {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        for (_, h) in std::mem::take(&mut self.held) {
            drop(h.ack);
        }
        ctx.stop();
    }
}

impl ShuffleBatch {
    /// Queue a ready-made (pushed) batch with the stage's own: numbered and
    /// laned like them, not shuffled.
    fn enqueue_ready(&mut self, batch: Arc<feedline::Batch>) {
        let lane = (self.seq % self.lanes as u64) as usize;
        self.pass_records += batch.len() as u64;
        self.out.push_back((
            lane,
            QueueItem::Batch(Delivered {
                pass: self.pass,
                seq: self.seq,
                batch,
            }),
        ));
        self.seq += 1;
        self.stats.note_batch();
    }
}

impl Handler<crate::messages::BatchMsg> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: crate::messages::BatchMsg, ctx: &mut Context<Self>) {
        self.stats
            .inner
            .shuffle
            .idle_ns
            .fetch_add(ns(self.idle_since.elapsed()), Relaxed);
        if self.failed {
            return;
        }
        msg.ack.do_send(ChunkAck);
        self.enqueue_ready(msg.batch);
        self.flush_out(ctx, false);
    }
}
