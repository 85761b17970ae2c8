//! The one place that wires a pipeline (as vector's `topology/builder.rs`):
//! it creates the feed queue, the order queue, the task queues and the
//! recorders, starts every actor, and hands each the `Recipient`s of the
//! messages it sends — no stage knows another stage's type. It decides
//! nothing: what the stages start from (settings, the batches' schema, the
//! resume's parts, a restored draw) is settled by [`prepare`] before any
//! actor starts, and each stage is made from one context value of its own
//! (`MakerContext`, `ShuffleContext`, …). [`build`] reads as its steps, one
//! small function each, in the order the stages start. Reader restarts go
//! through a factory built here, so the supervisor replaces a reader
//! without knowing how one is made.
//!
//! The pipeline it wires: the diagram of
//! `docs/architecture.md` (its section "The pipeline").

use std::sync::Arc;

use actix::prelude::*;
use futures_channel::oneshot;

use super::prepare::{prepare, Prepared, TuningStart};
use super::StartOptions;
use crate::arbiters::Arbiters;
use crate::autotune::{Knobs, Runner, TunedSetting};
use crate::bad_records::BadRecords;
use crate::batch_maker::{BatchMaker, MakerContext, MakerLinks, PackStage};
use crate::config::PipelineConfig;
use crate::equalize::{EqualizeRanks, PackedRanks};
use crate::error::PipelineError;
use crate::feed_queue_actor::FeedQueueActor;
use crate::file_queue::{FileQueue, FileQueueContext, SetQueue};
use crate::guard::{FaultPlan, StageGuard};
use crate::messages::{BatchQueue, OrderQueue, StartPasses};
use crate::prefetch_reader::{PrefetchReader, ReaderLinks, ReadersContext};
use crate::progress::{DrawSnapshots, Progress, SharedProgress};
use crate::push::{FeedHandle, PushLinks};
use crate::recorder::Recorders;
use crate::resume_plan::{ConsumerResume, ResumeParts};
use crate::settings::{
    BatchMakerSettings, PushSettings, ReaderSettings, ShuffleSettings, StageSettings,
    SupervisorSettings,
};
use crate::shuffle_batch::{RestoredDraw, ShuffleBatch, ShuffleContext, ShuffleLinks};
use crate::supervisor::{
    ReaderFactory, ReaderHandle, ReaderThread, Supervisor, SupervisorContext, SupervisorLinks,
};
use crate::task_queue::TaskQueues;
use crate::trainer::{TrainStep, Trainer};
use crate::watch::ReaderWatch;
use feedline::batch_policy::Batcher;
use feedline::feed_queue::{FeedMode, Lanes};
use feedline::plan::PassPlan;
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
    /// The Prometheus metrics' server serving this pipeline (its port is
    /// freed when the last holder drops it).
    pub metrics: Option<crate::metrics::MetricsServer>,
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
        config.feeding.devices = steps.len();
    }
    let StartOptions {
        resume,
        snapshots,
        track_progress,
        faults,
        metrics,
    } = options;
    let first_pass = resume
        .as_ref()
        .map_or(config.resume.first_pass, |r| r.first_pass());
    let Prepared {
        config,
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
    } = prepare(config, resume)?;
    // Before any stage starts: an address in use stops nothing.
    let metrics = match (metrics, &config.monitoring.metrics_addr) {
        (Some(server), _) => Some(server),
        (None, Some(addr)) => Some(crate::metrics::MetricsServer::bind(addr)?),
        (None, None) => None,
    };
    let (site, supervisor_ctx) = Site::new(config, lanes, parts, snapshots, faults)?;
    let consumers = account_in_queue || !steps.is_empty();
    let progress = site.consumer_progress(consumers && track_progress);
    let feed = start_feed_queue(&site, account_in_queue, &progress);
    // Drawn batches wait for the batch maker here: as many as it holds.
    let orders = OrderQueue::new(FeedMode::Shared.lanes(1), settings.maker.orders_waiting)?;
    let autotune = tuning.map(|t| autotune_runner(&site, t, &settings));
    let maker = start_batch_maker(&site, settings.maker, &orders, transformer, &packed_ranks)?;
    let shuffle = start_shuffle(&site, settings.shuffle, restored, batcher, orders);
    let (file_queue, tasks) = start_file_queue(&site, plans, equalize, &shuffle);
    let start_reader = readers(&site, settings.reader, tasks, &shuffle, &file_queue);
    let links = SupervisorLinks {
        requeue: file_queue.clone().recipient(),
        producers: vec![
            file_queue.clone().recipient(),
            shuffle.clone().recipient(),
            maker.recipient(),
        ],
        queue: site.queue.clone(),
        feed: feed.clone().recipient(),
    };
    let done = start_supervisor(
        &site,
        supervisor_ctx,
        settings.supervisor,
        links,
        start_reader,
        steps.len(),
        autotune,
    );
    start_trainers(&site, steps, &progress);
    let push = start_input(&site, &settings.push, &schema, &shuffle, &file_queue);
    let Site {
        config,
        queue,
        recorders,
        arbiters,
        supervisor,
        parts,
        snapshots,
        ..
    } = site;
    if let Some(server) = &metrics {
        server.attach(crate::metrics::Source {
            stats: recorders.stats(),
            first_pass,
            config: config.clone(),
        });
    }
    Ok(Running {
        feed: feed.recipient(),
        stop: supervisor.recipient(),
        queue,
        recorders,
        config,
        schema: batch_schema,
        arbiters,
        done: Some(done),
        push,
        progress,
        resume: parts.map(|p| p.consumers),
        snapshots,
        packed_ranks,
        metrics,
    })
}

/// What every stage is wired with, made before the first starts: the
/// settings, the feed queue, the recorders, the threads, the supervisor's
/// address (every stage reports to it), the guard each stage's is named
/// from, the resume's parts and where the draw's snapshots go.
struct Site {
    /// The settings, inputs expanded.
    config: Arc<PipelineConfig>,
    /// The feed queue.
    queue: BatchQueue,
    /// The statistics' write side.
    recorders: Recorders,
    /// Every thread the pipeline starts.
    arbiters: Arbiters,
    /// The supervisor's address (it runs once the other stages are started).
    supervisor: Addr<Supervisor>,
    /// Every stage's guard fails the lanes and tells the supervisor.
    guard: StageGuard,
    /// The faults injected (tests), for the supervisor's own guard.
    faults: FaultPlan,
    /// Each stage's part of the resume.
    parts: Option<ResumeParts>,
    /// Where the draw's snapshots go.
    snapshots: DrawSnapshots,
}

impl Site {
    /// The site, and the supervisor's context: its address first, as every
    /// stage reports to it.
    fn new(
        config: Arc<PipelineConfig>,
        lanes: Lanes,
        parts: Option<ResumeParts>,
        snapshots: DrawSnapshots,
        faults: FaultPlan,
    ) -> Result<(Site, Context<Supervisor>), PipelineError> {
        let arbiters = Arbiters::default();
        let queue = BatchQueue::new(lanes, config.feeding.capacity)?;
        let recorders = Recorders::new(
            config.feeding.devices,
            config.reading.readers,
            queue.gauge(),
        );
        let supervisor_ctx = Context::<Supervisor>::new();
        let supervisor = supervisor_ctx.address();
        let guard = StageGuard::new(
            "supervisor",
            queue.clone(),
            Some(supervisor.clone().recipient()),
            faults.clone(),
        );
        let site = Site {
            config,
            queue,
            recorders,
            arbiters,
            supervisor,
            guard,
            faults,
            parts,
            snapshots,
        };
        Ok((site, supervisor_ctx))
    }

    /// The bad-record policy of the settings, with its recorder.
    fn bad_records(&self) -> BadRecords {
        let config = &self.config;
        BadRecords::new(
            config.faults.error_policy.clone(),
            self.recorders.bad_records(),
        )
        .per_pass(config.order.passes == crate::config::ENDLESS)
    }

    /// What the consumers take, when tracked (`wanted`: `Pop` consumers or
    /// trainers, and `track_progress`; never in push mode): from the
    /// resume's consumers' part, its snapshots going where the draw's go.
    fn consumer_progress(&self, wanted: bool) -> Option<SharedProgress> {
        let devices = self.config.feeding.devices;
        (wanted && self.config.inputs.push.is_none()).then(|| {
            let p = match &self.parts {
                Some(p) => p.consumers.progress(devices),
                None => Progress::new(devices),
            };
            Arc::new(parking_lot::Mutex::new(
                p.with_snapshots(self.snapshots.clone()),
            ))
        })
    }
}

/// The feed queue's actor: it runs the devices' clocks and keeps the `Pop`
/// consumers' progress when `account_in_queue`.
fn start_feed_queue(
    site: &Site,
    account_in_queue: bool,
    progress: &Option<SharedProgress>,
) -> Addr<FeedQueueActor> {
    let recorders = &site.recorders;
    let clocks = account_in_queue.then(|| {
        (0..site.config.feeding.devices)
            .map(|d| recorders.device(d))
            .collect()
    });
    let pop_progress = progress.clone().filter(|_| account_in_queue);
    FeedQueueActor::start(
        site.queue.clone(),
        clocks,
        pop_progress,
        site.guard.named("feed queue"),
    )
}

/// The batch maker, on its own thread: it takes the drawn batches from
/// `orders`, makes them through `transformer` (packing them if asked) and
/// fills the feed queue.
fn start_batch_maker(
    site: &Site,
    settings: BatchMakerSettings,
    orders: &OrderQueue,
    transformer: Option<BatchTransformer>,
    packed_ranks: &Option<Arc<PackedRanks>>,
) -> Result<Addr<BatchMaker>, PipelineError> {
    let recorders = &site.recorders;
    let bad = site.bad_records();
    let links = MakerLinks {
        queued: site.supervisor.clone().recipient(),
    };
    let workers = transformer.as_ref().map_or(0, |t| t.worker_limit());
    let recorder = recorders.maker(workers);
    let guard = site.guard.named("batch maker");
    let packing = match &settings.pack {
        Some((pack, rows)) => Some(PackStage::new(
            pack.clone(),
            *rows,
            site.parts.as_ref().map(|p| p.maker.clone()),
            packed_ranks.clone(),
            recorders.packing(),
        )?),
        None => None,
    };
    let cx = MakerContext {
        settings,
        orders: orders.clone(),
        queue: site.queue.clone(),
        transformer,
        bad,
        packing,
        links,
        recorder,
        guard,
    };
    Ok(BatchMaker::start_in_arbiter(
        &site.arbiters.new_arbiter(),
        move |_| BatchMaker::new(cx),
    ))
}

/// The shuffle stage, on its own thread: it draws batches with `batcher`
/// (going on from `restored` if given) into `orders`.
fn start_shuffle(
    site: &Site,
    settings: ShuffleSettings,
    restored: Option<RestoredDraw>,
    batcher: Batcher,
    orders: OrderQueue,
) -> Addr<ShuffleBatch> {
    let cx = ShuffleContext {
        settings,
        resume: site.parts.as_ref().map(|p| p.shuffle.clone()),
        restored,
        snapshots: site.snapshots.clone(),
        batcher,
        orders,
        links: ShuffleLinks {
            flushed: site.supervisor.clone().recipient(),
        },
        recorder: site.recorders.shuffle(),
        guard: site.guard.named("shuffle stage"),
    };
    ShuffleBatch::start_in_arbiter(&site.arbiters.new_arbiter(), move |_| ShuffleBatch::new(cx))
}

/// Where the readers take their file tasks.
struct FileTasks {
    /// Each file set's task queues.
    queues: Vec<Arc<TaskQueues>>,
    /// Each reader's file set (by reader id).
    reader_set: Vec<usize>,
}

/// The file queue, with one set of task queues per file set (`plans`),
/// telling `shuffle` where each pass stands.
fn start_file_queue(
    site: &Site,
    plans: Vec<PassPlan>,
    equalize: Option<EqualizeRanks>,
    shuffle: &Addr<ShuffleBatch>,
) -> (Addr<FileQueue>, FileTasks) {
    let config = &site.config;
    let queues: Vec<Arc<TaskQueues>> = plans.iter().map(|_| Arc::default()).collect();
    // Each reader's file set: the sets' readers one after the other.
    let reader_set: Vec<usize> = if config.inputs.sets.is_empty() {
        vec![0; config.reading.readers]
    } else {
        (config.inputs.sets.iter().enumerate())
            .flat_map(|(i, s)| std::iter::repeat_n(i, s.readers))
            .collect()
    };
    let sets = (plans.into_iter().zip(&queues))
        .map(|(p, q)| SetQueue::new(p, q.clone()))
        .collect();
    let file_queue = FileQueue::new(FileQueueContext {
        sets,
        reader_set: reader_set.clone(),
        passes: config.order.passes,
        resume: site.parts.as_ref().map(|p| p.file_queue.clone()),
        shuffle: shuffle.clone().recipient(),
        equalize,
        guard: site.guard.named("file queue"),
    })
    .start();
    (file_queue, FileTasks { queues, reader_set })
}

/// The readers' factory: the supervisor starts each reader through it when
/// it starts, and again when it replaces one. The readers send chunks to
/// `shuffle` and take their tasks from `tasks`, as `file_queue` puts them.
fn readers(
    site: &Site,
    settings: ReaderSettings,
    tasks: FileTasks,
    shuffle: &Addr<ShuffleBatch>,
    file_queue: &Addr<FileQueue>,
) -> ReaderFactory {
    let links = ReaderLinks {
        chunks: shuffle.clone().recipient(),
        idle: file_queue.clone().recipient(),
        done: file_queue.clone().recipient(),
        failed: site.supervisor.clone().recipient(),
    };
    let readers = ReadersContext {
        settings: Arc::new(settings),
        resume: site.parts.as_ref().map(|p| p.readers.clone()),
        bad: site.bad_records(),
        queues: tasks.queues,
        reader_set: tasks.reader_set,
        links,
        recorders: site.recorders.clone(),
        guard: site.guard.clone(),
    };
    reader_factory(readers, &site.arbiters)
}

/// Starts reader `id`'s incarnations: on the reader's own arbiter, or on a
/// fresh one when the last incarnation is stuck in its thread.
fn reader_factory(readers: ReadersContext, arbiters: &Arbiters) -> ReaderFactory {
    let arbiters = arbiters.clone();
    let mut threads: Vec<Option<ArbiterHandle>> = vec![None; readers.readers()];
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
        let cx = readers.reader(id, watch.clone());
        let reader = PrefetchReader::start_in_arbiter(&arbiter, move |_| PrefetchReader::new(cx));
        ReaderHandle {
            stop: reader.recipient(),
            watch,
        }
    })
}

/// The autotuner of a tuned pipeline: the stages' shared settings it
/// changes (those of `tuning.tunable`), the counters it reads.
fn autotune_runner(site: &Site, tuning: TuningStart, settings: &StageSettings) -> Runner {
    let tuned = |s: TunedSetting| tuning.tunable.contains(&s);
    let knobs = Knobs {
        batches_in_flight: (tuned(TunedSetting::BatchesInFlight))
            .then(|| settings.maker.in_flight.clone()),
        chunks_in_flight: (tuned(TunedSetting::ChunksInFlight))
            .then(|| settings.reader.chunks_in_flight.clone()),
        workers: tuning.gate,
    };
    Runner::new(
        site.config.clone(),
        &tuning.tunable,
        tuning.start,
        tuning.workers_cap,
        tuning.shuffle_bytes,
        knobs,
        site.recorders.stats(),
    )
}

/// The supervisor, in the context made first (it starts the readers
/// through `start_reader` as it starts, and waits for `trainers`
/// trainers); what it gives back resolves with how the pipeline ended.
fn start_supervisor(
    site: &Site,
    ctx: Context<Supervisor>,
    settings: SupervisorSettings,
    links: SupervisorLinks,
    start_reader: ReaderFactory,
    trainers: usize,
    autotune: Option<Runner>,
) -> oneshot::Receiver<Result<(), PipelineError>> {
    let (done_tx, done_rx) = oneshot::channel();
    ctx.run(Supervisor::new(SupervisorContext {
        settings,
        recorder: site.recorders.supervisor(),
        stats: site.recorders.stats(),
        links,
        readers: site.config.reading.readers,
        start_reader,
        trainers,
        autotune,
        done: done_tx,
        guard: StageGuard::new("supervisor", site.queue.clone(), None, site.faults.clone()),
    }));
    done_rx
}

/// One trainer per step, each on its own thread, driving its device.
fn start_trainers<S: TrainStep>(site: &Site, steps: Vec<S>, progress: &Option<SharedProgress>) {
    for (device, step) in steps.into_iter().enumerate() {
        let (queue, done) = (site.queue.clone(), site.supervisor.clone().recipient());
        let clock = site.recorders.device(device);
        let guard = site.guard.named(format!("trainer of device {device}"));
        let progress = progress.clone();
        Trainer::start_in_arbiter(&site.arbiters.new_arbiter(), move |_| {
            Trainer::new(device, step, queue, done, clock, guard).with_progress(progress)
        });
    }
}

/// The input starts: in push mode the push source (its handle given back),
/// feeding `shuffle`; else the file queue's first pass.
fn start_input(
    site: &Site,
    settings: &PushSettings,
    schema: &Schema,
    shuffle: &Addr<ShuffleBatch>,
    file_queue: &Addr<FileQueue>,
) -> Option<FeedHandle> {
    match &site.config.inputs.push {
        Some(name) => {
            let links = PushLinks {
                chunks: shuffle.clone().recipient(),
                batches: shuffle.clone().recipient(),
                pass: shuffle.clone().recipient(),
            };
            Some(FeedHandle::start(
                name,
                settings,
                schema,
                links,
                site.recorders.reader(),
                site.guard.named(format!("push source {name}")),
            ))
        }
        None => {
            file_queue.do_send(StartPasses);
            None
        }
    }
}
