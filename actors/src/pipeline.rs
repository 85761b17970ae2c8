//! Starting a pipeline inside an actix `System` — the caller's own, for
//! applications that embed feedline among their actors — and stopping it.

use std::sync::Arc;

use actix::prelude::*;
use feedline::plan::{expand_inputs, PassPlan};
use feedline::Schema;
use futures::channel::oneshot;

use crate::config::{FeedMode, PipelineConfig};
use crate::error::PipelineError;
use crate::feed_queue::FeedQueue;
use crate::file_queue::{FileQueue, SetQueue, StartPasses};
use crate::messages::{Pop, Shutdown};
use crate::prefetch_reader::TaskQueues;
use crate::shuffle_batch::ShuffleBatch;
use crate::stats::Stats;
use crate::supervisor::{Arbiters, Supervisor};
use crate::trainer::{TrainStep, Trainer};

/// A running pipeline's addresses and handles.
///
/// Consumers send [`Pop`] to [`feed`](Self::feed) (or through
/// [`pop_recipient`](Self::pop_recipient)); each device uses its own
/// consumer index. Or start it with trainers ([`Pipeline::start_with_trainers`]):
/// then the devices are driven for you.
pub struct Pipeline {
    feed: Addr<FeedQueue>,
    supervisor: Addr<Supervisor>,
    stats: Stats,
    schema: Schema,
    config: Arc<PipelineConfig>,
    arbiters: Arbiters,
    done: Option<oneshot::Receiver<Result<(), PipelineError>>>,
    push: Option<crate::push::FeedHandle>,
}

/// Check the settings, expand the inputs and settle the schema. One pass
/// plan per file set (one set, of `files`, when no sets are given).
pub(crate) fn prepare(
    mut config: PipelineConfig,
) -> Result<(PipelineConfig, Schema, Vec<PassPlan>), PipelineError> {
    let bad = |m: &str| Err(PipelineError::Config(m.to_string()));
    if config.readers == 0 && config.sets.is_empty() {
        return bad("readers must be at least 1");
    }
    if config.devices == 0 {
        return bad("devices must be at least 1");
    }
    if config.capacity == 0 {
        return bad("capacity must be at least 1");
    }
    if config.chunk_records == 0 || config.chunks_in_flight == 0 {
        return bad("chunk_records and chunks_in_flight must be at least 1");
    }
    if let feedline::batcher::BatchPolicy::Fixed(0) = config.batch {
        return bad("batch size must be at least 1");
    }
    if config.push.is_some() {
        if !config.sets.is_empty() {
            return bad("push mode reads no file sets");
        }
        let (config, schema, plan) = crate::push::prepare(config)?;
        return Ok((config, schema, vec![plan]));
    }
    if !config.sets.is_empty() {
        expand_sets(&mut config)?;
    } else {
        if config.files.is_empty() {
            return bad("no input files");
        }
        config.files = expand_inputs(&config.files)?;
        if config.files.is_empty() {
            return bad("the inputs name no files");
        }
    }
    let schema = match &config.schema {
        Some(s) => s.clone(),
        None => infer_schema(&config)?,
    };
    let plan = |files: Vec<String>, seed: u64| {
        PassPlan::new(files)
            .seed(seed)
            .shuffle_files(config.shuffle_files)
            .shard(config.shard)
            .shard_by(config.shard_by)
    };
    let plans: Vec<PassPlan> = if config.sets.is_empty() {
        vec![plan(config.files.clone(), config.seed)]
    } else {
        // Set 0 uses the seed itself; the others get seeds of their own.
        (config.sets.iter().enumerate())
            .map(|(i, s)| plan(s.files.clone(), set_seed(config.seed, i)))
            .collect()
    };
    if config.passes > 0 && plans.iter().all(|p| p.tasks(0).is_empty()) {
        return Err(PipelineError::Config(format!(
            "a pass has no files: {} files for rank {} of {}",
            config.files.len(),
            config.shard.rank,
            config.shard.world_size
        )));
    }
    Ok((config, schema, plans))
}

/// The plan seed of file set `i` (set 0: the seed itself).
fn set_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Check and expand the file sets; `files` and `readers` become all of them.
fn expand_sets(config: &mut PipelineConfig) -> Result<(), PipelineError> {
    let bad = |m: String| Err(PipelineError::Config(m));
    if !config.files.is_empty() {
        return bad(format!(
            "give files or file sets, not both ({} files and {} sets)",
            config.files.len(),
            config.sets.len()
        ));
    }
    if config.equalize != feedline::plan::Equalize::Off {
        return bad("equalizing ranks is not supported with file sets".into());
    }
    let mut names = std::collections::HashSet::new();
    for set in &mut config.sets {
        if !names.insert(set.name.clone()) {
            return bad(format!("two file sets are named {:?}", set.name));
        }
        if set.readers == 0 {
            return bad(format!(
                "file set {:?}: readers must be at least 1",
                set.name
            ));
        }
        if !(set.weight.is_finite() && set.weight > 0.0) {
            return bad(format!(
                "file set {:?}: weight must be a positive number, not {}",
                set.name, set.weight
            ));
        }
        if !set.files.is_empty() {
            set.files = expand_inputs(&set.files)?;
        }
        if set.files.is_empty() {
            return bad(format!("file set {:?}: the inputs name no files", set.name));
        }
    }
    config.files = config.sets.iter().flat_map(|s| s.files.clone()).collect();
    config.readers = config.sets.iter().map(|s| s.readers).sum();
    Ok(())
}

/// Records per file (in `config.files` order), for equalizing ranks: the
/// format's own count where it has one, else a read through the file.
fn count_records(config: &PipelineConfig) -> Result<Vec<u64>, PipelineError> {
    config
        .files
        .iter()
        .map(|f| {
            let mut r = config
                .registry
                .open(f, config.format.as_deref(), &config.open)?;
            if let Some(n) = r.len_hint() {
                return Ok(n);
            }
            let mut n = 0;
            while r.next_record()?.is_some() {
                n += 1;
            }
            Ok(n)
        })
        .collect()
}

/// Infer the schema from the first file that has a readable record (files
/// that are empty or bad from their first record are passed over).
fn infer_schema(config: &PipelineConfig) -> Result<Schema, PipelineError> {
    let mut first_error = None;
    for file in &config.files {
        match config
            .registry
            .infer_schema(file, config.format.as_deref(), 64)
        {
            Ok(s) => {
                log::info!("schema inferred from {file}: {s}");
                return Ok(s);
            }
            Err(e) => {
                log::debug!("no schema from {file}: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error
        .map(PipelineError::from)
        .unwrap_or_else(|| PipelineError::Config("no input files".into())))
}

impl Pipeline {
    /// Start a pipeline in the current actix `System` (call from inside it).
    /// Consumers pop batches themselves.
    pub fn start(config: PipelineConfig) -> Result<Pipeline, PipelineError> {
        Self::start_with_trainers::<crate::trainer::SimulatedDevice>(config, Vec::new())
    }

    /// Start a pipeline whose devices are driven by these steps, one
    /// [`Trainer`] actor (and OS thread) per step; `config.devices` is set
    /// to their number.
    pub fn start_with_trainers<S: TrainStep>(
        config: PipelineConfig,
        steps: Vec<S>,
    ) -> Result<Pipeline, PipelineError> {
        let account = steps.is_empty();
        Self::start_inner(config, steps, account)
    }

    /// For [`Loader`](crate::Loader): its iterators account device time themselves.
    pub(crate) fn start_for_loader(config: PipelineConfig) -> Result<Pipeline, PipelineError> {
        Self::start_inner::<crate::trainer::SimulatedDevice>(config, Vec::new(), false)
    }

    /// `account_in_queue`: the feed queue accounts each consumer's busy and
    /// waiting time (consumers that send `Pop` themselves, one at a time).
    fn start_inner<S: TrainStep>(
        mut config: PipelineConfig,
        steps: Vec<S>,
        account_in_queue: bool,
    ) -> Result<Pipeline, PipelineError> {
        if !steps.is_empty() {
            config.devices = steps.len();
        }
        let (config, schema, plans) = prepare(config)?;
        let equalize = match (config.equalize, &config.batch) {
            (feedline::plan::Equalize::Off, _) => None,
            (how, feedline::batcher::BatchPolicy::Fixed(n)) => {
                let t0 = std::time::Instant::now();
                let counts = count_records(&config)?;
                log::info!(
                    "counted the records of {} files in {:?} to equalize ranks",
                    counts.len(),
                    t0.elapsed()
                );
                Some((Arc::new(counts), *n, config.drop_last, how))
            }
            _ => {
                return Err(PipelineError::Config(
                    "equalizing ranks needs a fixed batch size".into(),
                ))
            }
        };
        let batcher = feedline::batcher::Batcher::new(config.batch.clone(), config.drop_last)?;
        let config = Arc::new(config);
        let arbiters = Arbiters::default();
        let stats = Stats::new(config.devices, config.readers, config.capacity);
        let feed = FeedQueue::start_new(
            config.devices,
            config.capacity,
            config.feed == FeedMode::RoundRobin,
            stats.clone(),
            account_in_queue,
        );
        let (done_tx, done_rx) = oneshot::channel();
        let queues: Vec<Arc<TaskQueues>> = plans.iter().map(|_| Arc::default()).collect();
        // Each reader's file set: the sets' readers one after the other.
        let reader_set: Vec<usize> = if config.sets.is_empty() {
            vec![0; config.readers]
        } else {
            (config.sets.iter().enumerate())
                .flat_map(|(i, s)| std::iter::repeat_n(i, s.readers))
                .collect()
        };
        let mut file_queue_addr = None;
        let mut shuffle_addr = None;
        let supervisor = {
            let (config, schema, stats, feed, arbiters) = (
                config.clone(),
                schema.clone(),
                stats.clone(),
                feed.clone(),
                arbiters.clone(),
            );
            let fq_slot = &mut file_queue_addr;
            let sb_slot = &mut shuffle_addr;
            let trainers = steps.len();
            Supervisor::create(move |ctx| {
                let me = ctx.address();
                let sb_arbiter = arbiters.new_arbiter();
                let shuffle = {
                    let (config, schema, feed, stats, me) = (
                        config.clone(),
                        schema.clone(),
                        feed.clone(),
                        stats.clone(),
                        me.clone(),
                    );
                    ShuffleBatch::start_in_arbiter(&sb_arbiter, move |_| {
                        ShuffleBatch::new(config, schema, batcher, feed, me, stats)
                    })
                };
                let sets = (plans.into_iter().zip(&queues))
                    .map(|(p, q)| SetQueue::new(p, q.clone()))
                    .collect();
                let mut fq =
                    FileQueue::new(sets, reader_set.clone(), config.passes, shuffle.clone());
                fq.equalize = equalize;
                let file_queue = fq.start();
                *fq_slot = Some(file_queue.clone());
                *sb_slot = Some(shuffle.clone());
                let readers = (0..config.readers)
                    .map(|_| (arbiters.new_arbiter(), None))
                    .collect();
                let mut sup = Supervisor {
                    config,
                    schema,
                    stats,
                    queues,
                    reader_set,
                    file_queue: Some(file_queue),
                    shuffle: Some(shuffle),
                    feed: Some(feed),
                    readers,
                    trainers_left: trainers,
                    done: Some(done_tx),
                    failed: false,
                    arbiters: arbiters.clone(),
                };
                for id in 0..sup.readers.len() {
                    sup.start_reader(id, ctx);
                }
                sup
            })
        };
        for (device, step) in steps.into_iter().enumerate() {
            let h = arbiters.new_arbiter();
            let (feed, sup, stats) = (feed.clone(), supervisor.clone(), stats.clone());
            Trainer::start_in_arbiter(&h, move |_| Trainer::new(device, step, feed, sup, stats));
        }
        let file_queue = file_queue_addr.expect("created with the supervisor");
        let push = match (&config.push, shuffle_addr) {
            (Some(name), Some(shuffle)) => Some(crate::push::FeedHandle::start(
                name,
                &config,
                &schema,
                shuffle,
                stats.clone(),
            )),
            _ => {
                file_queue.do_send(StartPasses);
                None
            }
        };
        Ok(Pipeline {
            feed,
            supervisor,
            stats,
            schema,
            config,
            arbiters,
            done: Some(done_rx),
            push,
        })
    }

    /// Push mode ([`PipelineConfig::push`]): the handle that feeds the
    /// pipeline, taken once (dropping it, and every clone, ends the stream).
    pub fn take_feed_handle(&mut self) -> Option<crate::push::FeedHandle> {
        self.push.take()
    }

    /// The feed queue: send it [`Pop`] to take batches.
    pub fn feed(&self) -> Addr<FeedQueue> {
        self.feed.clone()
    }

    /// The feed queue as a recipient of [`Pop`].
    pub fn pop_recipient(&self) -> Recipient<Pop> {
        self.feed.clone().recipient()
    }

    /// Live statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The settings in force (inputs expanded).
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Resolves when the trainers have consumed all data (or, without
    /// trainers, when the last pass is flushed), or with the error that
    /// stopped the pipeline. Can be taken once.
    pub fn finished(&mut self) -> impl std::future::Future<Output = Result<(), PipelineError>> {
        let rx = self.done.take();
        async move {
            match rx {
                Some(rx) => rx.await.unwrap_or(Err(PipelineError::Stopped)),
                None => Err(PipelineError::Config("finished() was already taken".into())),
            }
        }
    }

    /// Ask every actor to stop. Consumers get [`PipelineError::Stopped`].
    pub fn stop(&self) {
        self.supervisor.do_send(Shutdown);
    }

    /// Stop, then stop and join the pipeline's threads (readers, shuffle,
    /// trainers). Call it from outside those threads.
    pub fn join(self) {
        self.stop();
        self.arbiters.stop_and_join();
    }

    pub(crate) fn parts(
        &self,
    ) -> (
        Addr<FeedQueue>,
        Addr<Supervisor>,
        Stats,
        Schema,
        Arbiters,
        Arc<PipelineConfig>,
    ) {
        (
            self.feed.clone(),
            self.supervisor.clone(),
            self.stats.clone(),
            self.schema.clone(),
            self.arbiters.clone(),
            self.config.clone(),
        )
    }
}
