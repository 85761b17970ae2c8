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
    ChunkAck, ChunkMsg, CloseQueue, Delivered, EndOfPass, PassFlushed, PassQuota, QueueItem,
    Shutdown,
};
use crate::stats::{ns, Stats};
use crate::supervisor::Supervisor;

struct Held {
    chunk: Arc<Chunk>,
    last: bool,
    /// Set while the acknowledgement is withheld (outside the reorder window).
    ack: Option<Recipient<ChunkAck>>,
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
    // Deterministic mode: the next (file, chunk) to take, and those held.
    next_file: usize,
    next_chunk: u64,
    held: BTreeMap<(usize, u64), Held>,
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
            next_file: 0,
            next_chunk: 0,
            held: BTreeMap::new(),
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
        match collate_rows(&self.schema, &rows) {
            Ok(batch) => {
                let lane = (self.seq % self.lanes as u64) as usize;
                self.out.push_back((
                    lane,
                    QueueItem::Batch(Delivered {
                        pass: self.pass,
                        seq: self.seq,
                        batch: Arc::new(batch),
                    }),
                ));
                self.seq += 1;
                self.stats.note_batch();
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
        if self.out.is_empty() && !close {
            return;
        }
        let pushed = match self.stats.feed_lanes() {
            Some(lanes) => lanes.push(&mut self.out).map(|p| (p, lanes)),
            None => Err(PipelineError::Stopped),
        };
        match pushed {
            Ok((Pushed::All, _)) => {
                if close {
                    // Every item is in: the queue's actor closes the lanes.
                    self.feed.do_send(CloseQueue);
                }
            }
            Ok((Pushed::Full(room), _)) => {
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
    }

    /// Deterministic mode: take every held chunk that is next in order.
    fn take_in_order(&mut self) {
        while let Some(h) = self.held.remove(&(self.next_file, self.next_chunk)) {
            self.held_bytes -= h.chunk.memory_bytes();
            if let Some(ack) = h.ack {
                ack.do_send(ChunkAck);
            }
            self.advance(h.last);
            self.accept(h.chunk);
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

    fn advance(&mut self, last: bool) {
        if last {
            self.next_file += 1;
            self.next_chunk = 0;
        } else {
            self.next_chunk += 1;
        }
    }

    fn end_pass(&mut self, pass: u64) {
        if self.config.deterministic {
            self.take_in_order();
            if !self.held.is_empty() {
                log::error!(
                    "pass {pass}: {} chunks out of order at the end of the pass (next expected file {} chunk {}); taking them as they are",
                    self.held.len(),
                    self.next_file,
                    self.next_chunk
                );
                let held = std::mem::take(&mut self.held);
                for (_, h) in held {
                    if let Some(ack) = h.ack {
                        ack.do_send(ChunkAck);
                    }
                    self.accept(h.chunk);
                }
            }
            self.held_bytes = 0;
            self.next_file = 0;
            self.next_chunk = 0;
        }
        self.buffer.set_draining(true);
        self.draw();
        self.buffer.set_draining(false);
        self.pad();
        self.drawn = 0;
        if let Some(rows) = self.batcher.flush() {
            self.emit(rows);
        }
        for lane in 0..self.lanes {
            self.out.push_back((lane, QueueItem::EndOfPass(pass)));
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
            msg.ack.do_send(ChunkAck);
            self.accept(msg.chunk);
        } else if msg.pass == self.pass
            && (msg.file_seq, msg.chunk_seq) == (self.next_file, self.next_chunk)
        {
            msg.ack.do_send(ChunkAck);
            self.advance(msg.last);
            self.accept(msg.chunk);
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
                (msg.file_seq, msg.chunk_seq),
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
