//! The one place that wires a pipeline (as vector's `topology/builder.rs`):
//! it creates the feed queue, the task queues and the recorders, starts
//! every actor, and hands each the `Recipient`s of the messages it sends —
//! no stage knows another stage's type. Reader restarts go through a factory
//! built here, so the supervisor replaces a reader without knowing how one
//! is made.
//!
//! ```text
//!                 ┌─────────── Requeue ───────────┐
//!                 ▼                               │
//!  FileQueue ─(TaskQueues)─▶ PrefetchReader×N ─ChunkMsg─▶ ShuffleBatch ─(OrderQueue)─▶ BatchMaker ─(BatchQueue)─▶ Trainer×D / Loader / Pop
//!      │   ◀─ReaderIdle, FileDone─┘  │ FileFailed              │ PassFlushed                        │ StreamQueued         │ TrainerDone
//!      └──────PassEvent──────────────┼────────────────────────▶│                                    │                      │
//!                                    └──────────────▶ Supervisor ◀──────────────────────────────────┴──────────────────────┘
//! ```

use std::sync::Arc;

use actix::prelude::*;
use futures_channel::oneshot;

use super::prepare::{prepare, Prepared};
use super::StartOptions;
use crate::arbiters::Arbiters;
use crate::bad_records::BadRecords;
use crate::batch_maker::{BatchMaker, MakerLinks, PackStage};
use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::feed_queue_actor::FeedQueueActor;
use crate::file_queue::{FileQueue, SetQueue};
use crate::guard::StageGuard;
use crate::messages::{BatchQueue, OrderQueue, StartPasses};
use crate::prefetch_reader::{PrefetchReader, ReaderLinks};
use crate::progress::{DrawSnapshots, Progress, SharedProgress};
use crate::push::{FeedHandle, PushLinks};
use crate::recorder::Recorders;
use crate::resume_plan::{ConsumerResume, ReaderResume};
use crate::settings::{ReaderSettings, StageSettings};
use crate::shuffle_batch::{RestoredDraw, ShuffleBatch, ShuffleLinks};
use crate::supervisor::{ReaderFactory, ReaderHandle, ReaderThread, Supervisor, SupervisorLinks};
use crate::task_queue::TaskQueues;
use crate::trainer::{TrainStep, Trainer};
use crate::watch::ReaderWatch;
use feedline::feed_queue::FeedMode;
use feedline::transform::BatchTransformer;
use feedline::Schema;

/// A started pipeline: what its handles ([`Pipeline`](crate::Pipeline),
/// [`Loader`](crate::Loader)) hold.
pub(crate) struct Running {
    /// The feed queue's actor (it lives while this is held).
    pub feed: Recipient<crate::messages::Pop>,
    /// Stops the pipeline (the supervisor).
    pub stop: Recipient<crate::messages::Shutdown>,
    /// The feed queue.
    pub queue: BatchQueue,
    /// The statistics' write side (device clocks for the loader's iterators).
    pub recorders: Recorders,
    /// The settings, inputs expanded.
    pub config: Arc<PipelineConfig>,
    /// The schema of the batches.
    pub schema: Schema,
    /// Every thread the pipeline started.
    pub arbiters: Arbiters,
    /// Resolves with how the pipeline ended.
    pub done: Option<oneshot::Receiver<Result<(), PipelineError>>>,
    /// Push mode: the handle that feeds it.
    pub push: Option<FeedHandle>,
    /// What the consumers took (`Pop` consumers or trainers; `None` for
    /// the loader, whose iterators keep their own, and when
    /// `track_progress` is off).
    pub progress: Option<SharedProgress>,
    /// A resume's part for consumers of their own (the loader's iterators).
    pub resume: Option<ConsumerResume>,
    /// Where the draw's snapshots go (for a progress of the caller's own).
    pub snapshots: DrawSnapshots,
    /// Equalized ranks in packed rows: every rank's rows per pass, counted
    /// at start-up.
    pub packed_ranks: Option<Arc<crate::equalize::PackedRanks>>,
}

/// Start a pipeline in the current actix `System`: one [`Trainer`] per step
/// (`config.devices` becomes their number). `account_in_queue`: the feed
/// queue's actor runs the devices' clocks (consumers that pop with `Pop`).
pub(crate) fn build<S: TrainStep>(
    mut config: PipelineConfig,
    options: StartOptions,
    steps: Vec<S>,
    account_in_queue: bool,
) -> Result<Running, PipelineError> {
    if !steps.is_empty() {
        config.devices = steps.len();
    }
    let StartOptions {
        resume,
        snapshots,
        track_progress,
        faults,
    } = options;
    // A run from a later pass (`first_pass`): the stages start there as a
    // resume at that pass's start makes them (checked: below `passes`).
    let resume = match (resume, config.first_pass) {
        (resume, 0) => resume,
        (Some(_), n) => {
            return Err(PipelineError::Config(format!(
                "first_pass {n} and a resume: the checkpoint says where the run goes on (give one or the other)"
            )))
        }
        (None, n) => Some(Arc::new(crate::resume_plan::ResumePlan::at_pass(n))),
    };
    let Prepared {
        config,
        schema,
        plans,
        batcher,
        equalize,
        packed_ranks,
        mut resume,
    } = prepare(config, resume)?;
    let transformer = BatchTransformer::new(&config.transforms, &schema, config.seed)?;
    // The batches' schema: the transforms' output when it is known now
    // (the stages read and pool instances of `schema`, the input's).
    let batch_schema = transformer
        .as_ref()
        .and_then(|t| t.output_schema())
        .unwrap_or_else(|| schema.clone());
    let packing = config.pack.is_some();
    // A packed pass is drawn again from its start (the packer's window is
    // not in a snapshot of the draw).
    if packing {
        resume = resume.map(|r| Arc::new(r.without_snapshot()));
    }
    let batch_schema = match &config.pack {
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
        None => batch_schema,
    };
    let lanes = config.feed.lanes(config.devices);
    let first_pass = resume.as_ref().map_or(0, |r| r.first_pass());
    let settings = StageSettings::derive(&config, &schema, lanes, first_pass);
    // A deterministic resume with a snapshot of the draw: the pool made
    // again now; if it cannot be, the pass is drawn again from its start.
    let restored = {
        let part = resume.as_ref().map(|r| r.parts(packing).shuffle);
        match RestoredDraw::of(
            &settings.shuffle,
            &settings.reader,
            part.as_ref(),
            &plans[0],
        ) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("the checkpoint's snapshot of the draw cannot be used ({e}): the pass is drawn again from its start");
                resume = resume.map(|r| Arc::new(r.without_snapshot()));
                None
            }
        }
    };
    let parts = resume.as_ref().map(|r| r.parts(packing));
    let config = Arc::new(config);
    let arbiters = Arbiters::default();
    let queue = BatchQueue::new(lanes, config.capacity)?;
    let recorders = Recorders::new(config.devices, config.readers, queue.gauge());
    let (done_tx, done_rx) = oneshot::channel();

    // The supervisor's address first: every stage reports to it.
    let supervisor_ctx = Context::<Supervisor>::new();
    let supervisor = supervisor_ctx.address();
    // Every stage's guard fails the lanes and tells the supervisor.
    let guard = StageGuard::new(
        "supervisor",
        queue.clone(),
        Some(supervisor.clone().recipient()),
        faults.clone(),
    );

    let clocks =
        account_in_queue.then(|| (0..config.devices).map(|d| recorders.device(d)).collect());
    let progress: Option<SharedProgress> = ((account_in_queue || !steps.is_empty())
        && track_progress
        && config.push.is_none())
    .then(|| {
        let p = match &parts {
            Some(p) => p.consumers.progress(config.devices),
            None => Progress::new(config.devices),
        };
        Arc::new(parking_lot::Mutex::new(p.with_snapshots(snapshots.clone())))
    });
    let pop_progress = progress.clone().filter(|_| account_in_queue);
    let feed = FeedQueueActor::start(
        queue.clone(),
        clocks,
        pop_progress,
        guard.named("feed queue"),
    );

    // Drawn batches wait for the batch maker here: as many as it holds.
    let orders = OrderQueue::new(FeedMode::Shared.lanes(1), settings.maker.in_flight)?;
    let bad_records = |recorders: &Recorders| {
        BadRecords::new(config.error_policy.clone(), recorders.bad_records())
            .per_pass(config.passes == crate::config::ENDLESS)
    };
    let maker = {
        let settings = settings.maker.clone();
        let (orders, queue) = (orders.clone(), queue.clone());
        let bad = bad_records(&recorders);
        let links = MakerLinks {
            queued: supervisor.clone().recipient(),
        };
        let workers = transformer.as_ref().map_or(0, |t| t.workers());
        let recorder = recorders.maker(workers);
        let guard = guard.named("batch maker");
        let packing = match &settings.pack {
            Some((pack, rows)) => Some(PackStage::new(
                pack.clone(),
                *rows,
                parts.as_ref().map(|p| p.maker.clone()),
                packed_ranks.clone(),
                recorders.packing(),
            )?),
            None => None,
        };
        BatchMaker::start_in_arbiter(&arbiters.new_arbiter(), move |_| {
            BatchMaker::new(
                settings,
                orders,
                queue,
                transformer,
                bad,
                links,
                recorder,
                guard,
            )
            .with_packing(packing)
        })
    };
    let shuffle = {
        let settings = settings.shuffle.clone();
        let part = parts.as_ref().map(|p| p.shuffle.clone());
        let snapshots = snapshots.clone();
        let links = ShuffleLinks {
            flushed: supervisor.clone().recipient(),
        };
        let recorder = recorders.shuffle();
        let guard = guard.named("shuffle stage");
        ShuffleBatch::start_in_arbiter(&arbiters.new_arbiter(), move |_| {
            ShuffleBatch::new(
                settings, part, snapshots, batcher, orders, links, recorder, guard,
            )
            .with_restored(restored)
        })
    };

    let queues: Vec<Arc<TaskQueues>> = plans.iter().map(|_| Arc::default()).collect();
    // Each reader's file set: the sets' readers one after the other.
    let reader_set: Vec<usize> = if config.sets.is_empty() {
        vec![0; config.readers]
    } else {
        (config.sets.iter().enumerate())
            .flat_map(|(i, s)| std::iter::repeat_n(i, s.readers))
            .collect()
    };
    let sets = (plans.into_iter().zip(&queues))
        .map(|(p, q)| SetQueue::new(p, q.clone()))
        .collect();
    let file_queue = FileQueue::new(
        sets,
        reader_set.clone(),
        config.passes,
        parts.as_ref().map(|p| p.file_queue.clone()),
        shuffle.clone().recipient(),
        equalize,
        guard.named("file queue"),
    )
    .start();

    let reader_links = ReaderLinks {
        chunks: shuffle.clone().recipient(),
        idle: file_queue.clone().recipient(),
        done: file_queue.clone().recipient(),
        failed: supervisor.clone().recipient(),
    };
    let start_reader = reader_factory(
        Arc::new(settings.reader),
        parts.as_ref().map(|p| p.readers.clone()),
        bad_records(&recorders),
        queues,
        reader_set,
        reader_links,
        &recorders,
        &arbiters,
        &guard,
    );
    let links = SupervisorLinks {
        requeue: file_queue.clone().recipient(),
        producers: vec![
            file_queue.clone().recipient(),
            shuffle.clone().recipient(),
            maker.recipient(),
        ],
        queue: queue.clone(),
        feed: feed.clone().recipient(),
    };
    supervisor_ctx.run(Supervisor::new(
        settings.supervisor,
        recorders.supervisor(),
        recorders.stats(),
        links,
        config.readers,
        start_reader,
        steps.len(),
        done_tx,
        StageGuard::new("supervisor", queue.clone(), None, faults),
    ));

    for (device, step) in steps.into_iter().enumerate() {
        let (queue, done) = (queue.clone(), supervisor.clone().recipient());
        let clock = recorders.device(device);
        let guard = guard.named(format!("trainer of device {device}"));
        let progress = progress.clone();
        Trainer::start_in_arbiter(&arbiters.new_arbiter(), move |_| {
            Trainer::new(device, step, queue, done, clock, guard).with_progress(progress)
        });
    }

    let push = match &config.push {
        Some(name) => {
            let links = PushLinks {
                chunks: shuffle.clone().recipient(),
                batches: shuffle.clone().recipient(),
                pass: shuffle.clone().recipient(),
            };
            Some(FeedHandle::start(
                name,
                &settings.push,
                &schema,
                links,
                recorders.reader(),
                guard.named(format!("push source {name}")),
            ))
        }
        None => {
            file_queue.do_send(StartPasses);
            None
        }
    };
    Ok(Running {
        feed: feed.recipient(),
        stop: supervisor.recipient(),
        queue,
        recorders,
        config,
        schema: batch_schema,
        arbiters,
        done: Some(done_rx),
        push,
        progress,
        resume: parts.map(|p| p.consumers),
        snapshots,
        packed_ranks,
    })
}

/// The documents' token field is there, ragged and of integers, for
/// `pack` (when the batches' schema is known before the first batch).
fn check_pack_field(
    pack: &feedline::pack::Pack,
    docs: &Schema,
    transformed: bool,
) -> Result<(), PipelineError> {
    let Ok(f) = docs.field(&pack.field) else {
        return Err(PipelineError::Config(format!(
            "packing: no field `{}` to pack in the {} (fields: {}); tokenize a text field first or name the token field",
            pack.field,
            if transformed { "transform's output" } else { "instances" },
            docs.field_names()
        )));
    };
    let ints = matches!(f.dtype, feedline::DType::I32 | feedline::DType::I64);
    if !ints || !f.is_ragged() || f.shape.len() != 1 || f.ragged != feedline::Ragged::Offsets {
        return Err(PipelineError::Config(format!(
            "packing: field `{}` is {}, expected a ragged list of token ids (i32 or i64 [?], offsets layout)",
            pack.field,
            f.describe()
        )));
    }
    Ok(())
}

/// Starts reader `id`'s incarnations: on the reader's own arbiter, or on a
/// fresh one when the last incarnation is stuck in its thread.
#[allow(clippy::too_many_arguments)]
fn reader_factory(
    settings: Arc<ReaderSettings>,
    resume: Option<ReaderResume>,
    bad: BadRecords,
    queues: Vec<Arc<TaskQueues>>,
    reader_set: Vec<usize>,
    links: ReaderLinks,
    recorders: &Recorders,
    arbiters: &Arbiters,
    guard: &StageGuard,
) -> ReaderFactory {
    let guard = guard.clone();
    let (recorders, arbiters) = (recorders.clone(), arbiters.clone());
    let mut threads: Vec<Option<ArbiterHandle>> = vec![None; reader_set.len()];
    Box::new(move |id, thread| {
        let arbiter = match (thread, &threads[id]) {
            (ReaderThread::Same, Some(h)) => h.clone(),
            _ => {
                let h = arbiters.new_arbiter();
                threads[id] = Some(h.clone());
                h
            }
        };
        let watch = Arc::new(ReaderWatch::default());
        recorders.watch_reader(id, watch.clone());
        let (settings, resume, bad, links) =
            (settings.clone(), resume.clone(), bad.clone(), links.clone());
        let guard = guard.named(format!("reader {id}"));
        let (queues, recorder, w) = (
            queues[reader_set[id]].clone(),
            recorders.reader(),
            watch.clone(),
        );
        let reader = PrefetchReader::start_in_arbiter(&arbiter, move |_| {
            PrefetchReader::new(id, settings, resume, queues, links, recorder, bad, w, guard)
        });
        ReaderHandle {
            stop: reader.recipient(),
            watch,
        }
    })
}
