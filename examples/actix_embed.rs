//! feedline inside an existing actix application.
//!
//! The application has its own actors: two `ModelWorker`s that act as
//! trainers — they pull batches by sending [`Pop`] to the pipeline's feed
//! queue, each with its own consumer index — and a `Watcher` that prints the
//! pipeline's statistics every 200 ms. The pipeline is started inside the
//! application's `System` with [`Pipeline::start`], which hands back the
//! addresses to wire up.
//!
//! ```text
//! cargo run --release --example actix_embed
//! cargo run --release --example actix_embed -- --files 'data/*.tfrecord' --passes 3
//! ```

use feedline_actors::{Feeding, Inputs, Order};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use actix::prelude::*;
use clap::Parser;
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline_actors::{Pipeline, PipelineConfig, PipelineError, Pop, Popped, Stats};

/// Run feedline inside an actix application: two model-worker actors pull
/// batches from the pipeline's feed queue while a watcher actor prints its
/// statistics every 200 ms (a small dataset is generated without --files).
#[derive(Parser)]
#[command(name = "actix_embed")]
struct Args {
    /// Input files (default: a small generated dataset in a temporary directory).
    #[arg(long, num_args = 1..)]
    files: Vec<String>,
    /// Passes.
    #[arg(long, default_value_t = 2)]
    passes: u64,
    /// Simulated step time per batch, milliseconds.
    #[arg(long, default_value_t = 1.0)]
    step_ms: f64,
}

/// Sent by a worker when it has seen the end of data (or an error).
#[derive(Message)]
#[rtype(result = "()")]
struct WorkerDone {
    worker: usize,
    batches: u64,
    records: u64,
    error: Option<PipelineError>,
}

/// An application actor that trains on batches it pulls from the pipeline.
struct ModelWorker {
    id: usize,
    feed: Recipient<Pop>,
    coordinator: Recipient<WorkerDone>,
    step: Duration,
    batches: u64,
    records: u64,
}

impl ModelWorker {
    fn pull(&self, ctx: &mut Context<Self>) {
        // The reply comes when a batch is there: the request is the backpressure.
        self.feed
            .send(Pop { consumer: self.id })
            .into_actor(self)
            .then(|res, act, ctx| {
                match res.unwrap_or(Err(PipelineError::Stopped)) {
                    Ok(Popped::Batch(d)) => {
                        act.batches += 1;
                        act.records += d.batch.len() as u64;
                        std::thread::sleep(act.step); // the "GPU step"
                        act.pull(ctx);
                    }
                    Ok(Popped::EndOfPass(p)) => {
                        println!(
                            "worker {}: end of pass {p} after {} batches",
                            act.id, act.batches
                        );
                        act.pull(ctx);
                    }
                    Ok(Popped::EndOfData) => act.done(ctx, None),
                    Err(e) => act.done(ctx, Some(e)),
                }
                fut::ready(())
            })
            .wait(ctx);
    }

    fn done(&self, ctx: &mut Context<Self>, error: Option<PipelineError>) {
        self.coordinator.do_send(WorkerDone {
            worker: self.id,
            batches: self.batches,
            records: self.records,
            error,
        });
        ctx.stop();
    }
}

impl Actor for ModelWorker {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Self::Context) {
        self.pull(ctx);
    }
}

/// An application actor that watches the pipeline's statistics.
struct Watcher {
    stats: Stats,
}

impl Actor for Watcher {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(Duration::from_millis(200), |act, _| {
            println!("watcher: {}", act.stats.snapshot().summary_line());
        });
    }
}

/// The application's coordinator: stops the System when both workers are done.
struct Coordinator {
    left: usize,
    failed: bool,
}

impl Actor for Coordinator {
    type Context = Context<Self>;
}

impl Handler<WorkerDone> for Coordinator {
    type Result = ();
    fn handle(&mut self, msg: WorkerDone, _: &mut Context<Self>) {
        match &msg.error {
            None => println!(
                "worker {}: done, {} batches, {} records",
                msg.worker, msg.batches, msg.records
            ),
            Some(e) => {
                eprintln!("worker {}: {e}", msg.worker);
                self.failed = true;
            }
        }
        self.left -= 1;
        if self.left == 0 {
            System::current().stop_with_code(i32::from(self.failed));
        }
    }
}

fn dataset(
    args: &Args,
) -> Result<(Vec<String>, Option<tempfile::TempDir>), Box<dyn std::error::Error>> {
    if !args.files.is_empty() {
        return Ok((args.files.clone(), None));
    }
    let dir = tempfile::tempdir()?;
    let mut opts = GenOptions::new(Preset::Small, dir.path());
    opts.files = Some(4);
    opts.records = Some(8192);
    let files = generate(&opts)?
        .into_iter()
        .map(|p: PathBuf| p.to_string_lossy().into_owned())
        .collect();
    Ok((files, Some(dir)))
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let (files, _dir) = match dataset(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("actix_embed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let step = Duration::from_secs_f64(args.step_ms.max(0.0) / 1000.0);
    let config = PipelineConfig {
        inputs: Inputs {
            files,
            ..Default::default()
        },
        order: Order {
            passes: args.passes,
            ..Default::default()
        },
        feeding: Feeding {
            devices: 2,
            ..Default::default()
        },
        ..PipelineConfig::default()
    };

    // The application's System, with the application's own actors.
    let sys = System::new();
    let pipeline = sys.block_on(async move {
        let pipeline = Pipeline::start(config)?;
        let coordinator = Coordinator {
            left: 2,
            failed: false,
        }
        .start();
        for id in 0..2 {
            // Each worker on its own thread, as a GPU worker would be.
            let feed = pipeline.feed();
            let recipient = coordinator.clone().recipient();
            let arbiter = Arbiter::new();
            ModelWorker::start_in_arbiter(&arbiter.handle(), move |_| ModelWorker {
                id,
                feed,
                coordinator: recipient,
                step,
                batches: 0,
                records: 0,
            });
        }
        Watcher {
            stats: pipeline.stats().clone(),
        }
        .start();
        Ok::<_, PipelineError>(pipeline)
    });
    let pipeline = match pipeline {
        Ok(p) => p,
        Err(e) => {
            eprintln!("actix_embed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = sys.run_with_code().unwrap_or(1);
    let snap = pipeline.stats().snapshot();
    pipeline.join();
    println!("final: {}", snap.summary_line());
    if code == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
