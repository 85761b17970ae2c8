//! The `PrefetchReader` actor: takes file tasks from the shared queue, reads
//! and decodes records into chunks, and sends them to the shuffle-batch
//! stage, with at most a fixed number unacknowledged.
//!
//! Each reader runs on its own `Arbiter` (one OS thread), so blocking file
//! I/O stalls only that reader. It drives itself with a `Next` message: read
//! a chunk, `send` it, read the next while acknowledgements are below the
//! limit. Decoding runs under `catch_unwind`: a panic becomes a `FileFailed`
//! with the record the reader had delivered up to, and the supervisor starts
//! a fresh reader that resumes the file there.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use feedline::format::RecordReader;
use feedline::Chunk;

use crate::bad_records::BadRecords;
use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{
    ChunkAck, ChunkMsg, FileDone, FileFailed, Next, ReadTask, ReaderIdle, Shutdown, Wake,
};
use crate::panic::panic_text;
use crate::recorder::{ReaderRecorder, Recorders};
use crate::resume_plan::ReaderResume;
use crate::settings::ReaderSettings;
use crate::stats::SkippedRecord;
use crate::task_queue::TaskQueues;
use crate::watch::ReaderWatch;

/// Where a reader sends what it read and what happened.
#[derive(Clone)]
pub(crate) struct ReaderLinks {
    /// Chunks, to the shuffle stage.
    pub chunks: Recipient<ChunkMsg>,
    /// "No task": to the file queue, which wakes it when there is one.
    pub idle: Recipient<ReaderIdle>,
    /// A file was read: to the file queue.
    pub done: Recipient<FileDone>,
    /// Reading a file failed: to the supervisor.
    pub failed: Recipient<FileFailed>,
}

struct Current {
    task: ReadTask,
    reader: Box<dyn RecordReader>,
    /// Index of the first record not yet sent (all before it were sent).
    delivered: u64,
    records_sent: u64,
    done_reading: bool,
}

/// A prefetching file reader.
pub(crate) struct PrefetchReader {
    id: usize,
    settings: Arc<ReaderSettings>,
    /// A resume's part: the consumed records left out.
    resume: Option<ReaderResume>,
    queues: Arc<TaskQueues>,
    links: ReaderLinks,
    recorder: ReaderRecorder,
    bad: BadRecords,
    watch: Arc<ReaderWatch>,
    current: Option<Current>,
    in_flight: usize,
    idle_since: Option<Instant>,
    stopped: bool,
    guard: StageGuard,
}

/// What one reader incarnation is made with: its id, the readers' settings
/// and resume part, the task queues it steals from, its links, recorder,
/// bad-record policy, watch and guard.
pub(crate) struct ReaderContext {
    /// The reader's id (its place among the readers).
    pub id: usize,
    /// The readers' settings.
    pub settings: Arc<ReaderSettings>,
    /// A resume's part: the consumed records left out.
    pub resume: Option<ReaderResume>,
    /// Its file set's task queues, where it steals tasks.
    pub queues: Arc<TaskQueues>,
    /// Where it sends what it read and what happened.
    pub links: ReaderLinks,
    /// Its statistics.
    pub recorder: ReaderRecorder,
    /// The bad-record policy.
    pub bad: BadRecords,
    /// Where it stands, for the supervisor's watchdog.
    pub watch: Arc<ReaderWatch>,
    /// Where a failure goes.
    pub guard: StageGuard,
}

/// What every reader incarnation is made from (the wiring site's reader
/// factory holds it): the readers' settings, resume part, bad-record
/// policy and links, each file set's task queues, each reader's file set,
/// the recorders and the guard. [`reader`](Self::reader) makes one
/// incarnation's [`ReaderContext`].
pub(crate) struct ReadersContext {
    /// The readers' settings.
    pub settings: Arc<ReaderSettings>,
    /// A resume's part: the consumed records left out.
    pub resume: Option<ReaderResume>,
    /// The bad-record policy.
    pub bad: BadRecords,
    /// Each file set's task queues.
    pub queues: Vec<Arc<TaskQueues>>,
    /// Each reader's file set (by reader id).
    pub reader_set: Vec<usize>,
    /// Where the readers send what they read and what happened.
    pub links: ReaderLinks,
    /// The statistics' write side (each reader's recorder and watch).
    pub recorders: Recorders,
    /// The guard each reader's is named from.
    pub guard: StageGuard,
}

impl ReadersContext {
    /// How many readers there are.
    pub(crate) fn readers(&self) -> usize {
        self.reader_set.len()
    }

    /// Reader `id`'s next incarnation, watched through `watch` (which the
    /// recorders see first).
    pub(crate) fn reader(&self, id: usize, watch: Arc<ReaderWatch>) -> ReaderContext {
        self.recorders.watch_reader(id, watch.clone());
        ReaderContext {
            id,
            settings: self.settings.clone(),
            resume: self.resume.clone(),
            bad: self.bad.clone(),
            links: self.links.clone(),
            guard: self.guard.named(format!("reader {id}")),
            queues: self.queues[self.reader_set[id]].clone(),
            recorder: self.recorders.reader(),
            watch,
        }
    }
}

impl PrefetchReader {
    /// A reader made with `cx`: stealing from its queues, watched through
    /// its watch.
    pub(crate) fn new(cx: ReaderContext) -> Self {
        let ReaderContext {
            id,
            settings,
            resume,
            queues,
            links,
            recorder,
            bad,
            watch,
            guard,
        } = cx;
        PrefetchReader {
            id,
            settings,
            resume,
            queues,
            links,
            recorder,
            bad,
            watch,
            current: None,
            in_flight: 0,
            idle_since: Some(Instant::now()),
            stopped: false,
            guard,
        }
    }

    fn open(&self, task: &ReadTask) -> Result<Box<dyn RecordReader>, feedline::Error> {
        self.settings.open_file(
            &task.task.file,
            task.start_record,
            task.task.pass,
            task.task.stride,
        )
    }

    fn mark_busy(&mut self) {
        if let Some(t) = self.idle_since.take() {
            self.recorder.idle(t.elapsed());
        }
    }

    /// The watchdog gave this reader's file to another: stop without a word.
    fn abandon(&mut self, ctx: &mut Context<Self>) {
        log::warn!("reader {}: abandoned as stuck, stopping", self.id);
        self.stopped = true;
        self.current = None;
        ctx.stop();
    }

    fn mark_idle(&mut self) {
        if self.idle_since.is_none() {
            self.idle_since = Some(Instant::now());
        }
    }

    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.stopped || self.in_flight >= self.settings.chunks_in_flight.get() {
            self.mark_idle();
            return;
        }
        if self.current.as_ref().is_some_and(|c| c.done_reading) {
            // Waiting for the last acknowledgements of this file.
            self.mark_idle();
            return;
        }
        if self.current.is_none() {
            // Stealing checks the fence, atomically with the watchdog's fencing.
            let queues = self.queues.clone();
            let stolen = match self.watch.take_task(|| queues.steal()) {
                Ok(t) => t,
                Err(_) => return self.abandon(ctx),
            };
            let Some(mut task) = stolen else {
                self.mark_idle();
                self.links.idle.do_send(ReaderIdle {
                    reader: self.id,
                    wake: ctx.address().recipient(),
                });
                return;
            };
            self.mark_busy();
            if let Some(r) = &self.resume {
                // Resumed: the file's consumed first records are not read again.
                let source = self.settings.source_name(&task.task.file);
                task.start_record = r.start_record(task.task.pass, &source, task.start_record);
            }
            let t0 = Instant::now();
            self.watch.enter(self.recorder.now_ns());
            let opened = catch_unwind(AssertUnwindSafe(|| {
                self.recorder
                    .remote(self.settings.remote_cache.as_ref(), || self.open(&task))
            }));
            self.watch.leave();
            if self.watch.lock().fenced {
                return self.abandon(ctx);
            }
            self.recorder.busy(t0.elapsed());
            match opened {
                Ok(Ok(reader)) => {
                    self.current = Some(Current {
                        delivered: task.start_record,
                        task,
                        reader,
                        records_sent: 0,
                        done_reading: false,
                    })
                }
                Ok(Err(e)) => {
                    // The file cannot be opened at all: the rest of the file is bad.
                    let loc = e.location().cloned();
                    let start = task.start_record;
                    self.current = None;
                    let lost = Lost {
                        rest_of_file: true,
                        records: 1,
                        known: false,
                    };
                    if self.bad_record(&task, loc.as_ref(), start, lost, e) {
                        // Skipped: the file contributes nothing more; close it properly.
                        self.send_last_empty(ctx, task);
                    }
                    return;
                }
                Err(panic) => {
                    self.panicked(ctx, task, panic_text(panic));
                    return;
                }
            }
        }
        self.mark_busy();
        self.read_one(ctx);
    }

    /// Read one chunk of the current file and send it.
    fn read_one(&mut self, ctx: &mut Context<Self>) {
        let cfg = self.settings.clone();
        let cur = self.current.as_mut().expect("a current file");
        // Room for what the file can still hold: a one-record file does not
        // get a chunk made for `chunk_records`.
        let rows = (cur.reader.max_records_left())
            .map_or(cfg.chunk_records, |left| {
                left.min(cfg.chunk_records as u64) as usize
            })
            .max(1);
        let mut chunk = Chunk::with_budget(&cfg.schema, rows, cfg.chunk_bytes);
        let t0 = Instant::now();
        self.watch.enter(self.recorder.now_ns());
        let recorder = &self.recorder;
        let result = catch_unwind(AssertUnwindSafe(|| {
            recorder.remote(cfg.remote_cache.as_ref(), || {
                cur.reader
                    .read_chunk(&mut chunk, cfg.chunk_records, cfg.chunk_bytes)
            })
        }));
        self.watch.leave();
        self.recorder.busy(t0.elapsed());
        match result {
            Err(panic) => {
                // `task.start_record` is kept at the first record not sent.
                let task = self.current.take().expect("current").task;
                self.panicked(ctx, task, panic_text(panic));
            }
            Ok(Ok(n)) => {
                // Only an empty read ends a file (a block or row-group reader
                // returns short chunks), or a reader that knows none is left.
                let end = n == 0 || cur.reader.max_records_left() == Some(0);
                self.send_chunk(ctx, chunk, end);
            }
            Ok(Err(e)) => {
                // Send what was decoded before the bad record, then apply the policy.
                let can_continue = cur.reader.can_continue();
                let next = cur.reader.next_index();
                // The records lost: one, a run the format could not read
                // apart (reading goes on at `next`, past them), or the
                // rest of the file from `next` — as many as the format
                // knows it held (else one, and unknown) — of those this
                // reader's stride keeps.
                let (first, lost, known) = if can_continue {
                    let n = cur.reader.records_skipped().max(1);
                    (next.saturating_sub(n), n, true)
                } else {
                    match cur.reader.records_lost() {
                        Some(n) => (next, n.max(1), true),
                        None => (next, 1, false),
                    }
                };
                let stride = cur.task.task.stride;
                let lost = stride.count_from(first, first.saturating_add(lost)).max(1);
                let task = cur.task.clone();
                if !chunk.is_empty() {
                    self.send_chunk(ctx, chunk, false);
                }
                let e = e.explain_inferred(&self.settings.schema);
                let loc = e.location().cloned();
                let lost = Lost {
                    rest_of_file: !can_continue,
                    records: lost,
                    known,
                };
                if self.bad_record(&task, loc.as_ref(), next, lost, e) {
                    if !can_continue {
                        self.finish_file(ctx);
                    } else if self.skip_past(next) {
                        ctx.notify(Next);
                    } else {
                        self.abandon(ctx);
                    }
                } else {
                    self.current = None;
                }
            }
        }
    }

    /// A bad record was skipped and reading goes on at `next`: a retry of
    /// the file (after a panic or a stall) starts there too, so the record
    /// is not read — and counted — twice. False if the watchdog fenced
    /// this reader.
    fn skip_past(&mut self, next: u64) -> bool {
        let mut st = self.watch.lock();
        if st.fenced {
            return false;
        }
        if let Some(cur) = self.current.as_mut() {
            cur.delivered = next;
            cur.task.start_record = next;
            st.task = Some(cur.task.clone());
        }
        true
    }

    /// The bad-record policy on a bad record (`lost`: the records it
    /// costs). True: skipped, go on; false: the file failed (the
    /// supervisor hears why).
    fn bad_record(
        &mut self,
        task: &ReadTask,
        loc: Option<&feedline::Location>,
        record: u64,
        lost: Lost,
        e: feedline::Error,
    ) -> bool {
        let error = e.to_string();
        let mut skipped = SkippedRecord::new(
            loc,
            &task.task.file,
            record,
            lost.rest_of_file,
            lost.records,
            error,
        );
        skipped.records_known = lost.known;
        match self.bad.judge(skipped, task.task.pass, e) {
            Ok(()) => true,
            Err(error) => {
                self.links.failed.do_send(FileFailed {
                    task: task.clone(),
                    reader: self.id,
                    error,
                    panicked: false,
                });
                false
            }
        }
    }

    fn panicked(&mut self, ctx: &mut Context<Self>, mut task: ReadTask, message: String) {
        {
            let mut st = self.watch.lock();
            if st.fenced {
                drop(st);
                return self.abandon(ctx);
            }
            st.task = None;
        }
        log::error!(
            "reader {} panicked on {} at record {}: {message}",
            self.id,
            task.task.file,
            task.start_record
        );
        task.attempts += 1;
        self.links.failed.do_send(FileFailed {
            task: task.clone(),
            reader: self.id,
            error: PipelineError::ReaderPanic {
                file: task.task.file.clone(),
                record: task.start_record,
                attempts: task.attempts,
                message,
            },
            panicked: true,
        });
        self.stopped = true;
        self.current = None;
        ctx.stop();
    }

    fn send_last_empty(&mut self, ctx: &mut Context<Self>, task: ReadTask) {
        let chunk = Chunk::new(&self.settings.schema);
        self.current = Some(Current {
            delivered: task.start_record,
            task,
            reader: Box::new(EmptyReader),
            records_sent: 0,
            done_reading: false,
        });
        self.send_chunk(ctx, chunk, true);
    }

    fn finish_file(&mut self, ctx: &mut Context<Self>) {
        let chunk = Chunk::new(&self.settings.schema);
        self.send_chunk(ctx, chunk, true);
    }

    /// Send a chunk of the current file, unless the watchdog fenced this
    /// reader (then it stops and the chunk is dropped: the file's new reader
    /// starts at the first record this one had not sent).
    fn send_chunk(&mut self, ctx: &mut Context<Self>, chunk: Chunk, last: bool) {
        let watch = self.watch.clone();
        let mut st = watch.lock();
        if st.fenced {
            drop(st);
            return self.abandon(ctx);
        }
        let cur = self.current.as_mut().expect("a current file");
        let chunk = cur.task.task.stride.filter(chunk);
        // Resumed: the records the checkpoint says were consumed are left out.
        let chunk = match &self.resume {
            Some(r) => r.filter(cur.task.task.pass, chunk),
            None => chunk,
        };
        // The record filter / map, on this reader's own records only.
        let (chunk, failed) = match &self.settings.records {
            None => (chunk, Vec::new()),
            Some(stage) => match stage.apply(chunk) {
                Ok(staged) => (staged.chunk, staged.failed),
                Err(e) => (Chunk::new(&self.settings.schema), vec![e]),
            },
        };
        let n = chunk.len() as u64;
        let start_record = cur.task.start_record;
        cur.delivered = cur.reader.next_index();
        cur.records_sent += n;
        cur.task.start_record = cur.delivered;
        let msg = ChunkMsg {
            ack: ctx.address().recipient(),
            pass: cur.task.task.pass,
            set: cur.task.set,
            file_seq: cur.task.task.seq,
            chunk_seq: cur.task.next_chunk,
            last,
            start_record,
            end_record: cur.delivered,
            chunk: Arc::new(chunk),
        };
        cur.task.next_chunk += 1;
        if last {
            cur.done_reading = true;
        }
        st.task = Some(cur.task.clone());
        self.recorder
            .chunk_sent(n, msg.chunk.payload_bytes() as u64);
        self.in_flight += 1;
        self.links.chunks.do_send(msg);
        drop(st);
        if !failed.is_empty() {
            let task = cur.task.clone();
            for e in failed {
                let loc = e.location().cloned();
                let record = loc.as_ref().map_or(task.start_record, |l| l.record);
                if !self.bad_record(&task, loc.as_ref(), record, Lost::ONE, e) {
                    // The pipeline fails: read no further.
                    return;
                }
            }
        }
        if !last {
            ctx.notify(Next);
        }
    }

    fn after_ack(&mut self, ctx: &mut Context<Self>) {
        let done = self
            .current
            .as_ref()
            .is_some_and(|c| c.done_reading && self.in_flight == 0);
        if done {
            let mut st = self.watch.lock();
            if st.fenced {
                drop(st);
                return self.abandon(ctx);
            }
            st.task = None;
            drop(st);
            let cur = self.current.take().expect("current");
            self.links.done.do_send(FileDone {
                records: cur.records_sent,
                task: cur.task,
            });
            ctx.notify(Next);
        } else if self.current.as_ref().is_some_and(|c| !c.done_reading) || self.current.is_none() {
            ctx.notify(Next);
        }
    }
}

/// What a bad record costs.
#[derive(Clone, Copy)]
struct Lost {
    /// The rest of the file could not be read.
    rest_of_file: bool,
    /// Records lost (at least one).
    records: u64,
    /// Whether `records` is known (else the rest of a file held an unknown
    /// number of records, counted as one).
    known: bool,
}

impl Lost {
    /// One record, the reading going on after it.
    const ONE: Lost = Lost {
        rest_of_file: false,
        records: 1,
        known: true,
    };
}

struct EmptyReader;

impl RecordReader for EmptyReader {
    fn next_record(&mut self) -> feedline::Result<Option<feedline::Record>> {
        Ok(None)
    }
    fn next_index(&self) -> u64 {
        0
    }
}

impl Actor for PrefetchReader {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.notify(Next);
    }
}

impl Supervised for PrefetchReader {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }

    fn panicked(&mut self, ctx: &mut Context<Self>, _: &PipelineError) {
        self.stopped = true;
        self.current = None;
        ctx.stop();
    }
}

impl Handler<Next> for PrefetchReader {
    type Result = ();
    fn handle(&mut self, _: Next, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Next", |me, ctx| me.step(ctx));
    }
}

impl Handler<ChunkAck> for PrefetchReader {
    type Result = ();
    fn handle(&mut self, _: ChunkAck, ctx: &mut Context<Self>) {
        guarded(self, ctx, "ChunkAck", |me, ctx| {
            me.in_flight = me.in_flight.saturating_sub(1);
            me.after_ack(ctx);
        });
    }
}

impl Handler<Wake> for PrefetchReader {
    type Result = ();
    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Wake", |me, ctx| {
            if me.current.is_none() && me.in_flight == 0 {
                me.step(ctx);
            }
        });
    }
}

impl Handler<Shutdown> for PrefetchReader {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Shutdown", |me, ctx| {
            me.stopped = true;
            me.current = None;
            ctx.stop();
        });
    }
}
