//! `feedline bench`: passes of the loader over the files given into a
//! consumer that touches every batch; per pass records/s, payload MB/s, CPU
//! seconds, peak RSS against the in-flight bound, start-up and first-batch
//! latency, per-stage busy time and the bottleneck — as text or one JSON
//! object per pass. The timing itself is [`measure`](crate::measure)'s.

use clap::Args;
use feedline::Batch;
use feedline_actors::{Delivered, Loader, OrderStats};
use serde_json::{json, Value};

use crate::error::CliResult;
use crate::measure::{touch, Consume, MeasureArgs, PassResult, Plan};
use crate::output::Stdout;
use crate::pipeline_args::PipelineArgs;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    measure: MeasureArgs,
    /// Print one JSON object per pass.
    #[arg(long)]
    json: bool,
    /// Measure the order delivered: each pass's `neighbour_distance` (the
    /// mean distance between consecutive records' original positions over
    /// (n + 1) / 3: about 1 for a uniform permutation, near 0 for a
    /// streaming order) and `files_per_batch` (distinct files in a batch),
    /// as `order` under --json.
    #[arg(long)]
    order_stats: bool,
    /// No progress line on standard error (it is drawn only when standard
    /// error is a terminal).
    #[arg(long, short)]
    quiet: bool,
}

/// Reads one value of every instance of every field; with --order-stats,
/// measures the order too.
#[derive(Default)]
struct Toucher {
    checksum: u64,
    measure_order: bool,
    order: Option<Result<OrderStats, String>>,
}

impl Consume for Toucher {
    fn batch(&mut self, batch: &Batch) {
        self.checksum = self.checksum.wrapping_add(touch(batch));
    }

    fn loader(&mut self, loader: &Loader) {
        if self.measure_order {
            self.order = Some(loader.order_stats().map_err(|e| e.to_string()));
        }
    }

    fn delivered(&mut self, d: &Delivered) {
        if let Some(Ok(stats)) = &mut self.order {
            stats.observe(d.pass, &d.batch);
        }
    }
}

pub fn bench(args: BenchArgs) -> CliResult<()> {
    let mut plan = Plan::resolve(&args.pipeline, &args.measure, None, None)?;
    let progress = crate::progress::ProgressLine::start(args.quiet).map(std::sync::Arc::new);
    if let Some(line) = &progress {
        plan.watch = Some(Box::new(line.clone()));
    }
    let mut out = Stdout::new();
    let ran = plan.run(
        || Toucher {
            measure_order: args.order_stats,
            ..Toucher::default()
        },
        |i, r, c| {
            // Each pass as it ends, for whoever watches: the progress line
            // suspended while it is written.
            match &progress {
                Some(line) => line.suspend(|| report(&plan, args.json, i, r, c, &mut out)),
                None => report(&plan, args.json, i, r, c, &mut out),
            }?;
            out.flush()
        },
    );
    // Cleared before anything else is printed.
    plan.watch = None;
    drop(progress);
    ran?;
    out.finish()
}

fn report(
    plan: &Plan,
    json: bool,
    i: usize,
    r: &PassResult,
    c: &Toucher,
    out: &mut Stdout,
) -> CliResult<()> {
    let checksum = c.checksum;
    let order = c.order.as_ref().map(|o| match o {
        Ok(stats) => json!(stats.measures()),
        Err(e) => json!({ "error": e }),
    });
    let (phase, run) = plan.phase(i);
    let mib = (1u64 << 20) as f64;
    if json {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("phase", json!(phase)),
            ("run", json!(run)),
            ("records", json!(r.records)),
            ("batches", json!(r.batches)),
            ("seconds", json!(r.seconds)),
            ("records_per_s", json!(r.records_per_s())),
            ("payload_bytes", json!(r.payload)),
            ("payload_bytes_per_s", json!(r.payload as f64 / r.seconds)),
            ("cpu_seconds", json!(r.cpu)),
            ("peak_rss_bytes", json!(r.peak_rss)),
            ("process_peak_rss_bytes", json!(r.process_peak)),
            ("first_batch_s", json!(r.first_batch)),
            ("teardown_s", json!(r.teardown)),
            ("checksum", json!(checksum)),
        ] {
            m.insert(k.to_string(), v);
        }
        if let Some(order) = order {
            m.insert("order".into(), order);
        }
        m.extend(plan.details(r));
        return writeln!(out, "{}", Value::Object(m));
    }
    writeln!(
        out,
        "[{phase} {run}] {} records, {} batches in {:.3} s: {:.0} records/s, {:.1} MB/s payload",
        r.records,
        r.batches,
        r.seconds,
        r.records_per_s(),
        r.payload as f64 / r.seconds / 1e6
    )?;
    writeln!(
        out,
        "cpu {:.2} s ({:.0}% of one core), peak RSS {:.1} MiB (in-flight bound {:.1} MiB), start-up {:.1} ms, first batch {:.1} ms",
        r.cpu,
        100.0 * r.cpu / r.seconds,
        r.peak_rss.unwrap_or(0) as f64 / mib,
        plan.in_flight_bound(r) as f64 / mib,
        r.startup.unwrap_or(f64::NAN) * 1e3,
        r.first_batch.unwrap_or(f64::NAN) * 1e3
    )?;
    if let Some(order) = &order {
        writeln!(out, "order: {order}")?;
    }
    if let Some(s) = &r.stats {
        writeln!(
            out,
            "readers busy {:.0}% each, shuffle busy {:.0}%, batch maker busy {:.0}% per worker (blocked on the queue {:.0}%), bottleneck: {}",
            100.0 * s.readers.busy,
            100.0 * s.shuffle_batch.busy,
            100.0 * s.batch_maker.busy,
            100.0 * s.batch_maker.blocked,
            s.bottleneck
        )?;
        if let Some(a) = &s.autotune {
            writeln!(out, "{}", a.summary_line())?;
        }
    }
    Ok(())
}
