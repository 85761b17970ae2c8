//! `feedline bench`: one pass (or more) of the loader into a consumer that
//! touches every batch; records/s, payload bytes/s, CPU seconds, peak RSS,
//! first-batch latency and per-stage busy time.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use feedline::Array;
use feedline_actors::Loader;

use crate::files::AnyResult;
use crate::run::PipelineArgs;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// CPU seconds (user + system) of this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass; RUSAGE_SELF is valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return f64::NAN;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Peak resident set size of this process so far (VmHWM), bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Touch a batch as a consumer would: read one value of every instance of
/// every field (an order-independent checksum, so the work cannot be skipped).
fn touch(batch: &feedline::Batch) -> u64 {
    let mut sum = 0u64;
    for f in batch.fields() {
        let n = batch.len().max(1);
        sum = sum.wrapping_add(match &f.data {
            Array::F32(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|x| x.to_bits() as u64)
                    .sum()
            }),
            Array::F64(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|x| x.to_bits())
                    .sum()
            }),
            Array::I64(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|&x| x as u64)
                    .sum()
            }),
            Array::I32(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|&x| x as u64)
                    .sum()
            }),
            Array::U8(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|&x| x as u64)
                    .sum()
            }),
            Array::Bool(a) => a.iter().filter(|&&b| b).count() as u64,
            Array::Bytes(b) => b.data().len() as u64,
        });
    }
    sum
}

pub fn bench(args: BenchArgs) -> AnyResult<ExitCode> {
    let config = args.pipeline.config(1)?;
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let loader = Loader::builder().config(config).build()?;
    let startup = t0.elapsed().as_secs_f64();
    let mut records = 0u64;
    let mut batches = 0u64;
    let mut payload = 0u64;
    let mut check = 0u64;
    let mut first_batch = None;
    let mut it = loader.into_iter();
    for d in &mut it {
        let d = d?;
        if first_batch.is_none() {
            first_batch = Some(t0.elapsed().as_secs_f64());
        }
        records += d.batch.len() as u64;
        payload += d.batch.payload_bytes() as u64;
        batches += 1;
        check = check.wrapping_add(touch(&d.batch));
    }
    let seconds = t0.elapsed().as_secs_f64();
    let snap = it.stats();
    drop(it);
    let cpu = cpu_seconds() - cpu0;
    let rss = peak_rss_bytes();
    let out = serde_json::json!({
        "records": records,
        "batches": batches,
        "seconds": seconds,
        "records_per_s": records as f64 / seconds,
        "payload_bytes": payload,
        "payload_bytes_per_s": payload as f64 / seconds,
        "cpu_seconds": cpu,
        "peak_rss_bytes": rss,
        "startup_s": startup,
        "first_batch_s": first_batch,
        "readers_busy": snap.readers.busy,
        "shuffle_collate_busy": snap.shuffle_batch.busy,
        "shuffle_collate_blocked": snap.shuffle_batch.blocked,
        "bottleneck": snap.bottleneck,
        "checksum": check,
    });
    if args.json {
        println!("{out}");
    } else {
        println!(
            "{records} records, {batches} batches in {seconds:.3} s: {:.0} records/s, {:.1} MB/s payload",
            records as f64 / seconds,
            payload as f64 / seconds / 1e6
        );
        println!(
            "cpu {cpu:.2} s ({:.0}% of one core), peak RSS {:.1} MiB, start-up {:.1} ms, first batch {:.1} ms",
            100.0 * cpu / seconds,
            rss.unwrap_or(0) as f64 / (1 << 20) as f64,
            startup * 1e3,
            first_batch.unwrap_or(f64::NAN) * 1e3
        );
        println!(
            "readers busy {:.0}% each, shuffle/collate busy {:.0}% (blocked on the queue {:.0}%), bottleneck: {}",
            100.0 * snap.readers.busy,
            100.0 * snap.shuffle_batch.busy,
            100.0 * snap.shuffle_batch.blocked,
            snap.bottleneck
        );
    }
    Ok(ExitCode::SUCCESS)
}
