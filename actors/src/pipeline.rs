//! [`Pipeline`]: a pipeline started inside an actix `System` — the
//! caller's own, for applications that embed feedline among their actors —
//! and its handle to stop it. The wiring itself is [`builder`]'s; settling
//! the settings before anything starts is [`prepare`]'s.

mod builder;
mod prepare;

use actix::prelude::*;
use feedline::Schema;

use crate::checkpoint::Checkpoint;
use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::guard::FaultPlan;
use crate::messages::{Pop, Shutdown};
use crate::progress::{CheckpointBase, DrawSnapshots};
use crate::push::FeedHandle;
use crate::resume_plan::ResumePlan;
use crate::stats::Stats;
use crate::trainer::{SimulatedDevice, TrainStep};
pub(crate) use builder::Running;

/// A running pipeline's handle.
///
/// Consumers send [`Pop`] to [`feed`](Self::feed); each device uses its own
/// consumer index. Or start it with trainers ([`Pipeline::start_with_trainers`]):
/// then the devices are driven for you. Outside actix, the
/// [`Loader`](crate::Loader) does all this for you.
///
/// Inside your own actix `System` (here one consumer; see the
/// `actix_embed` example for several actors on their own threads):
///
/// ```
/// use feedline_actors::actix::System;
/// use feedline_actors::{BatchPolicy, Pipeline, PipelineConfig, Pop, Popped};
/// # let dir = tempfile::tempdir()?;
/// # let mut opts = feedline_actors::feedline::synthetic::GenOptions::new(
/// #     feedline_actors::feedline::synthetic::Preset::Small, dir.path());
/// # (opts.files, opts.records) = (Some(2), Some(100));
/// # let files: Vec<String> = feedline_actors::feedline::synthetic::generate(&opts)?
/// #     .iter().map(|p| p.display().to_string()).collect();
///
/// let mut config = PipelineConfig::default();
/// config.inputs.files = files;                 // 2 files of 100 records
/// config.batching.batch = BatchPolicy::Fixed(32);
/// config.order.passes = 2;
/// config.feeding.devices = 1;                  // one consumer: index 0
/// let sys = System::new();
/// let (pipeline, rows) = sys.block_on(async move {
///     let pipeline = Pipeline::start(config)?;          // from inside the System
///     let feed = pipeline.feed();
///     let mut rows = [0; 2];
///     loop {
///         // Answered when there is a batch: the request is the backpressure.
///         match feed.send(Pop { consumer: 0 }).await.map_err(|e| e.to_string())?? {
///             Popped::Batch(d) => rows[d.pass as usize] += d.batch.len(),
///             Popped::EndOfPass(_) => {}
///             Popped::EndOfData => break,
///         }
///     }
///     Ok::<_, Box<dyn std::error::Error>>((pipeline, rows))
/// })?;
/// assert_eq!(rows, [200, 200]);
/// pipeline.join();                                      // every thread stopped
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pipeline {
    running: Running,
    stats: Stats,
    /// The inputs stamped, at the first checkpoint.
    base: std::sync::OnceLock<Result<CheckpointBase, PipelineError>>,
}

impl Pipeline {
    /// Start a pipeline in the current actix `System` (call from inside it).
    /// Consumers pop batches themselves.
    pub fn start(config: PipelineConfig) -> Result<Pipeline, PipelineError> {
        Self::start_with::<SimulatedDevice>(config, StartOptions::default(), Vec::new())
    }

    /// Start a pipeline whose devices are driven by these steps, one
    /// trainer actor (and OS thread) per step; `config.devices` is set to
    /// their number.
    pub fn start_with_trainers<S: TrainStep>(
        config: PipelineConfig,
        steps: Vec<S>,
    ) -> Result<Pipeline, PipelineError> {
        Self::start_with(config, StartOptions::default(), steps)
    }

    /// Start a pipeline with `options` — going on from a checkpoint, its
    /// snapshots shared with a [`Progress`](crate::Progress) of your own —,
    /// its devices driven by `steps` (none: consumers pop with [`Pop`]).
    pub fn start_with<S: TrainStep>(
        config: PipelineConfig,
        options: StartOptions,
        steps: Vec<S>,
    ) -> Result<Pipeline, PipelineError> {
        // Without trainers the consumers pop with `Pop`: the feed queue's
        // actor runs their clocks.
        let account = steps.is_empty();
        Ok(Self::of(builder::build(config, options, steps, account)?))
    }

    /// For [`Loader`](crate::Loader), whose iterators run the devices' clocks themselves.
    pub(crate) fn start_for_loader(
        config: PipelineConfig,
        options: StartOptions,
    ) -> Result<Running, PipelineError> {
        builder::build::<SimulatedDevice>(config, options, Vec::new(), false)
    }

    fn of(running: Running) -> Pipeline {
        Pipeline {
            stats: running.recorders.stats(),
            running,
            base: std::sync::OnceLock::new(),
        }
    }

    /// Push mode ([`Inputs::push`](crate::Inputs::push)): the handle that feeds the
    /// pipeline, taken once (dropping it, and every clone, ends the stream).
    pub fn take_feed_handle(&mut self) -> Option<FeedHandle> {
        self.running.push.take()
    }

    /// The feed queue: send it [`Pop`] to take batches.
    pub fn feed(&self) -> Recipient<Pop> {
        self.running.feed.clone()
    }

    /// Live statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &Schema {
        &self.running.schema
    }

    /// The settings in force (inputs expanded).
    pub fn config(&self) -> &PipelineConfig {
        &self.running.config
    }

    /// Resolves when the trainers have consumed all data (or, without
    /// trainers, when every batch of the last pass is in the feed queue:
    /// a [`stop`](Self::stop) after that leaves the consumers the rest and
    /// the end of data), or with the error that stopped the pipeline. Can
    /// be taken once.
    pub fn finished(&mut self) -> impl std::future::Future<Output = Result<(), PipelineError>> {
        let rx = self.running.done.take();
        async move {
            match rx {
                Some(rx) => rx.await.unwrap_or(Err(PipelineError::Stopped)),
                None => Err(PipelineError::config("finished() was already taken")),
            }
        }
    }

    /// The checkpoint of the batches the consumers took so far — popped
    /// with [`Pop`] (a batch counts once its reply is handed over) or
    /// stepped by the trainers (once its step succeeded) —, as
    /// [`Loader::checkpoint`](crate::Loader::checkpoint) gives it: set
    /// [`StartOptions::resume`] from it (via [`ResumePlan::new`]) to go on
    /// from exactly there. Take it between batches (with
    /// trainers: from a step, or once they are done). An error when the
    /// pipeline keeps no progress (push mode, `track_progress` off) or
    /// the inputs cannot be stamped.
    ///
    /// ```no_run
    /// use feedline_actors::{Pipeline, PipelineConfig, Pop, Popped};
    /// # async fn demo() -> Result<(), feedline_actors::PipelineError> {
    /// let mut config = PipelineConfig::default();
    /// config.inputs.files = vec!["data/*.jsonl".into()];
    /// let pipeline = Pipeline::start(config)?;
    /// let feed = pipeline.feed();
    /// for _ in 0..10 {
    ///     if let Ok(Ok(Popped::Batch(_))) = feed.send(Pop { consumer: 0 }).await {}
    /// }
    /// let cp = pipeline.checkpoint()?;
    /// assert!(cp.batches <= 10);
    /// # Ok(()) }
    /// ```
    pub fn checkpoint(&self) -> Result<Checkpoint, PipelineError> {
        let Some(progress) = &self.running.progress else {
            return Err(PipelineError::config(
                "this pipeline keeps no progress (push mode, or track_progress off)",
            ));
        };
        let base = self
            .base
            .get_or_init(|| CheckpointBase::of(&self.running.config));
        let base = base.as_ref().map_err(Clone::clone)?;
        Ok(progress.lock().checkpoint(base))
    }

    /// Ask every actor to stop. Consumers get [`PipelineError::Stopped`] —
    /// unless every batch is already in the feed queue (`finished()`
    /// resolved): then they get the rest and the end of data.
    pub fn stop(&self) {
        self.running.stop.do_send(Shutdown);
    }

    /// Stop, then stop and join the pipeline's threads (readers, shuffle,
    /// trainers). Call it from outside those threads.
    pub fn join(self) {
        self.stop();
        self.running.arbiters.stop_and_join();
    }
}

/// What a pipeline starts with besides its settings: the objects of a
/// run, not settings — where it goes on from, where its draw's snapshots
/// go — handed to the wiring site ([`Pipeline::start_with`]).
#[derive(Clone)]
pub struct StartOptions {
    /// Go on from a checkpoint (see [`ResumePlan::new`]): start at its
    /// first pass not complete, leaving out what was consumed.
    pub resume: Option<std::sync::Arc<ResumePlan>>,
    /// Where the shuffle stage leaves snapshots of its draw for checkpoints
    /// (deterministic mode; see [`DrawSnapshots`]): give the same handle to
    /// the [`Progress`](crate::Progress) of your own that makes them.
    pub snapshots: DrawSnapshots,
    /// Keep what the consumers take ([`Pop`] consumers and trainers) for
    /// [`Pipeline::checkpoint`] (default true; off for callers that keep
    /// a [`Progress`](crate::Progress) of their own).
    pub track_progress: bool,
    /// Panics to inject into the stages' handlers (tests of the failure
    /// paths; empty by default).
    #[doc(hidden)]
    pub faults: FaultPlan,
    /// Serve the Prometheus metrics on this server (one of a pipeline
    /// before, say) instead of binding
    /// [`Monitoring::metrics_addr`](crate::Monitoring::metrics_addr): the
    /// counters go on from the totals it served (default: none).
    pub metrics: Option<crate::metrics::MetricsServer>,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            resume: None,
            snapshots: DrawSnapshots::new(),
            track_progress: true,
            faults: FaultPlan::default(),
            metrics: None,
        }
    }
}
