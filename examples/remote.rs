//! Training from a remote store, and what its latency costs.
//!
//! The example starts an HTTP object server in this process, on 127.0.0.1
//! (`examples/common/http_store.rs`), with an added latency per request and,
//! if asked, a shaped link; "uploads" a generated TFRecord dataset to it;
//! and trains simulated devices from the `http://127.0.0.1:PORT/…` URLs
//! with 1, 2, 4, 8 and 16 readers. Each reader streams its object by ranged
//! GETs of 8 MiB with two parts requested ahead, so a few readers keep
//! several requests in flight and hide the latency. For each reader count
//! it prints records/s, MB/s (and the share of the link when it is shaped:
//! over the whole run, and "steady" after the first batch),
//! the time to the first batch from a cold start (schema inference
//! included), and the requests per GB read; first the same files read
//! locally, as the reference the latency is measured against. Every record
//! is checked to arrive exactly once.
//!
//! ```text
//! cargo run --release --example remote
//! cargo run --release --example remote -- --latency-ms 50 --link-mbit 1000     # the remote-read benchmark
//! cargo run --release --example remote -- --latency-ms 50 --link-mbit 1000 --min-pool 32   # first batch sooner
//! cargo run --release --example remote -- --preset small --gen-files 8 --gen-records 20000 --readers 1,4
//! ```

#[path = "common/http_store.rs"]
mod http_store;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use feedline::remote::{self, RemoteOptions};
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline_actors::Loader;
use http_store::{HttpStore, Shape};

/// Train simulated devices from an HTTP store with added latency: records/s,
/// share of the link, first batch and requests per GB against the reader
/// count.
#[derive(Parser)]
#[command(name = "remote")]
struct Args {
    /// Latency added to every request, milliseconds (time to first byte).
    #[arg(long, default_value_t = 20.0)]
    latency_ms: f64,
    /// The link's rate in Mbit/s (0: unshaped loopback).
    #[arg(long, default_value_t = 0.0)]
    link_mbit: f64,
    /// Reader counts to try.
    #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
    readers: Vec<usize>,
    /// Generated workload: `large` (150 KB image records) or `small`.
    #[arg(long, default_value = "large")]
    preset: String,
    /// Files ("objects") to generate.
    #[arg(long, default_value_t = 16)]
    gen_files: usize,
    /// Records per file.
    #[arg(long, default_value_t = 128)]
    gen_records: usize,
    /// Simulated devices (one thread each).
    #[arg(long, default_value_t = 2)]
    devices: usize,
    /// Milliseconds per batch on each device.
    #[arg(long, default_value_t = 0.0)]
    step_ms: f64,
    /// Batch size.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Shuffle pool, instances.
    #[arg(long, default_value_t = 256)]
    shuffle: usize,
    /// Instances in the pool before the first draw (default: the pool
    /// size; smaller: an earlier first batch).
    #[arg(long)]
    min_pool: Option<usize>,
    /// Bytes per ranged GET, MiB.
    #[arg(long, default_value_t = 8)]
    part_mib: u64,
    /// Parts requested ahead of the one being read, per reader.
    #[arg(long, default_value_t = 2)]
    read_ahead: usize,
}

/// One run's figures.
struct Row {
    what: String,
    records: u64,
    bytes: u64,
    secs: f64,
    first_batch: f64,
    /// Bytes per second served after the first batch.
    steady: f64,
    requests: u64,
}

/// Read `urls` once with `readers` readers into the devices; checks every
/// (file, record) arrives exactly once.
/// `served` is the server's count of bytes sent.
fn train(
    args: &Args,
    urls: &[String],
    readers: usize,
    expect: u64,
    served: &AtomicU64,
) -> Result<Row, String> {
    let t0 = Instant::now();
    let mut builder = Loader::builder()
        .files(urls.to_vec())
        .readers(readers)
        .batch(args.batch)
        .shuffle(args.shuffle)
        .devices(args.devices)
        .shard_from_env(false);
    if let Some(m) = args.min_pool {
        builder = builder.min_pool(m);
    }
    let loader = builder.build().map_err(|e| e.to_string())?;
    let step = Duration::from_secs_f64(args.step_ms / 1000.0);
    // When the first batch arrived, and the bytes served by then.
    let first = std::sync::Mutex::new(None::<(Duration, u64)>);
    let seen = std::sync::Mutex::new(HashMap::<(String, u64), u32>::new());
    let bytes = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| -> Result<(), String> {
        let handles: Vec<_> = (0..args.devices)
            .map(|d| {
                let it = loader.device_iter(d);
                let (first, seen, bytes) = (&first, &seen, &bytes);
                s.spawn(move || -> Result<(), String> {
                    for b in it {
                        let b = b.map_err(|e| e.to_string())?;
                        first
                            .lock()
                            .unwrap()
                            .get_or_insert_with(|| (t0.elapsed(), served.load(Ordering::Relaxed)));
                        bytes.fetch_add(b.batch.payload_bytes() as u64, Ordering::Relaxed);
                        let mut seen = seen.lock().unwrap();
                        for o in b.batch.origins() {
                            *seen
                                .entry((o.source.name().to_string(), o.record))
                                .or_default() += 1;
                        }
                        drop(seen);
                        if !step.is_zero() {
                            std::thread::sleep(step); // the device's step
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| "a device thread panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    let seen = seen.into_inner().unwrap();
    let twice = seen.values().filter(|&&n| n != 1).count();
    if seen.len() as u64 != expect || twice > 0 {
        return Err(format!(
            "{readers} readers: {} distinct records of {expect}, {twice} more than once",
            seen.len()
        ));
    }
    let first_at = first.into_inner().unwrap();
    Ok(Row {
        what: String::new(),
        records: stats.readers.records,
        bytes: bytes.into_inner(),
        secs,
        first_batch: first_at.map_or(f64::NAN, |(d, _)| d.as_secs_f64()),
        steady: first_at.map_or(f64::NAN, |(d, n)| {
            served.load(Ordering::Relaxed).saturating_sub(n) as f64
                / (secs - d.as_secs_f64()).max(1e-9)
        }),
        requests: stats.remote_requests,
    })
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("remote: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let preset = match args.preset.as_str() {
        "large" => Preset::Large,
        "small" => Preset::Small,
        p => return Err(format!("--preset {p}: expected large or small")),
    };
    if args.readers.is_empty() || args.readers.contains(&0) {
        return Err("--readers: give counts ≥ 1, e.g. 1,2,4".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut gen = GenOptions::new(preset, dir.path());
    gen.files = Some(args.gen_files.max(1));
    gen.records = Some(args.gen_records.max(1));
    let paths = generate(&gen).map_err(|e| e.to_string())?;
    let mut objects = HashMap::new();
    let mut total_bytes = 0u64;
    for p in &paths {
        let data = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        total_bytes += data.len() as u64;
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        objects.insert(format!("/data/{name}"), data);
    }
    let link = (args.link_mbit > 0.0).then_some(args.link_mbit * 1e6 / 8.0);
    let server = HttpStore::start(
        objects,
        Shape {
            latency: Duration::from_secs_f64(args.latency_ms / 1000.0),
            bytes_per_s: link,
        },
    )
    .map_err(|e| format!("starting the HTTP server: {e}"))?;
    let mut urls: Vec<String> = paths
        .iter()
        .map(|p| {
            server.url(&format!(
                "data/{}",
                p.file_name().unwrap().to_string_lossy()
            ))
        })
        .collect();
    urls.sort();
    remote::set_options(RemoteOptions {
        part_bytes: args.part_mib.max(1) << 20,
        read_ahead: args.read_ahead,
        ..RemoteOptions::default()
    });
    let expect = (paths.len() * args.gen_records.max(1)) as u64;
    println!(
        "dataset: {} {} files, {} records, {:.1} MB, served from {} with {} ms per request{}",
        paths.len(),
        preset.name(),
        expect,
        total_bytes as f64 / 1e6,
        server.url(""),
        args.latency_ms,
        link.map_or(String::new(), |_| format!(
            " over a {} Mbit/s link",
            args.link_mbit
        ))
    );
    println!(
        "{} devices, batch {}, {} MiB parts, {} ahead per reader\n",
        args.devices, args.batch, args.part_mib, args.read_ahead
    );

    let local: Vec<String> = paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let most = *args.readers.iter().max().unwrap();
    let mut rows = Vec::new();
    let mut r = train(&args, &local, most, expect, &AtomicU64::new(0))?;
    r.what = format!("local files, {most} readers");
    let local_rate = r.records as f64 / r.secs;
    rows.push(r);
    for &readers in &args.readers {
        let before = (
            server.counts.requests.load(Ordering::Relaxed),
            server.counts.bytes.load(Ordering::Relaxed),
        );
        let mut r = train(&args, &urls, readers, expect, &server.counts.bytes)?;
        let served = server.counts.bytes.load(Ordering::Relaxed) - before.1;
        let asked = server.counts.requests.load(Ordering::Relaxed) - before.0;
        // The server's count includes schema inference at build time.
        r.requests = asked.max(r.requests);
        r.bytes = served;
        r.what = format!("remote, {readers} readers");
        rows.push(r);
    }

    println!(
        "{:<24} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10} {:>12} {:>9}",
        "run",
        "records/s",
        "MB/s",
        "% link",
        "steady%",
        "% local",
        "1st batch",
        "requests/GB",
        "seconds"
    );
    for r in &rows {
        let rate = r.records as f64 / r.secs;
        let mbs = r.bytes as f64 / r.secs / 1e6;
        let link_pct = link.map_or("-".to_string(), |l| format!("{:.0}", 100.0 * mbs * 1e6 / l));
        // After the first batch: the link's use once the pipeline is full.
        let steady_pct = link.map_or("-".to_string(), |l| format!("{:.0}", 100.0 * r.steady / l));
        let remote = r.what.starts_with("remote");
        let per_gb = if remote && r.bytes > 0 {
            format!("{:.0}", r.requests as f64 / (r.bytes as f64 / 1e9))
        } else {
            "-".into()
        };
        println!(
            "{:<24} {:>10.0} {:>9.1} {:>8} {:>8} {:>10.0} {:>9.3}s {:>12} {:>9.2}",
            r.what,
            rate,
            mbs,
            if remote { link_pct } else { "-".into() },
            if remote { steady_pct } else { "-".into() },
            100.0 * rate / local_rate,
            r.first_batch,
            per_gb,
            r.secs
        );
    }
    let remote_rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.what.starts_with("remote"))
        .collect();
    if let (Some(one), Some(best)) = (
        remote_rows.first(),
        remote_rows
            .iter()
            .max_by(|a, b| (a.records as f64 / a.secs).total_cmp(&(b.records as f64 / b.secs))),
    ) {
        println!(
            "\nthe latency cost: {} reached {:.0}% of the local rate; {} reached {:.0}%. \
             Every record arrived exactly once in every run.",
            one.what,
            100.0 * one.records as f64 / one.secs / local_rate,
            best.what,
            100.0 * best.records as f64 / best.secs / local_rate
        );
        let worst_first = remote_rows
            .iter()
            .map(|r| r.first_batch)
            .fold(0.0, f64::max);
        println!("first batch from the cold remote dataset: at most {worst_first:.3} s");
    }
    Ok(())
}
