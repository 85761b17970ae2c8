//! Tokenizing speed per core: the same JSON Lines documents through the
//! `tokenizers` crate's `encode_fast` and through feedline's fast path
//! (`src/tokenize/fast.rs`), on one thread, with the ids compared document
//! by document.
//!
//! ```sh
//! cargo run --release --features tokenize --example tokenize_speed -- \
//!     --tokenizer /tmp/peers/data/text/tokenizer.json /tmp/peers/data/text/text-*.jsonl
//! ```
//!
//! Each path runs `--passes` passes over every document (the first one with
//! its word cache cold); each pass prints its tokens per CPU-second of the
//! thread and the machine's load average (on a shared machine the figures
//! are of the core this run got).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use feedline::tokenize::Tokenizer;

/// Tokenizing speed per core: the tokenizers crate against feedline's fast
/// path, same ids.
#[derive(Parser)]
#[command(name = "tokenize_speed")]
struct Args {
    /// The tokenizer.json.
    #[arg(long)]
    tokenizer: PathBuf,
    /// Passes over the documents per path.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    passes: u32,
    /// JSON Lines files, one `{"text": ...}` a line.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// CPU seconds of this thread.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut texts = Vec::new();
    for f in &args.files {
        for line in std::io::BufReader::new(std::fs::File::open(f)?).lines() {
            let v: serde_json::Value = serde_json::from_str(&line?)?;
            texts.push(
                v["text"]
                    .as_str()
                    .ok_or("a line without a text field")?
                    .to_string(),
            );
        }
    }
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    let fast = Tokenizer::from_file(&args.tokenizer)?;
    println!(
        "{} documents, {:.1} MB; fast path: {}",
        texts.len(),
        bytes as f64 / 1e6,
        fast.has_fast_path()
    );
    let slow = fast.clone().crate_path_only();
    let mut expect: Vec<Vec<u32>> = Vec::new();
    for (name, tok) in [("tokenizers crate", &slow), ("feedline fast path", &fast)] {
        for pass in 0..args.passes {
            let (c0, w0) = (thread_cpu(), Instant::now());
            let ids: Vec<Vec<u32>> = texts
                .iter()
                .map(|t| tok.encode(t))
                .collect::<Result<_, _>>()?;
            let (cpu, wall) = (thread_cpu() - c0, w0.elapsed().as_secs_f64());
            let n: usize = ids.iter().map(|i| i.len()).sum();
            println!(
                "{name:>18} pass {pass}: {n} tokens in {cpu:.2} CPU-s ({wall:.2} s): \
                 {:.3} M tokens per CPU-s, {:.1} MB/s (load {})",
                n as f64 / cpu / 1e6,
                bytes as f64 / cpu / 1e6,
                load()
            );
            if expect.is_empty() {
                expect = ids;
            } else if let Some(k) = (0..texts.len()).find(|&k| ids[k] != expect[k]) {
                return Err(format!("document {k}: the ids differ").into());
            }
        }
    }
    println!("the ids of every document are the same on both paths");
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokenize_speed: {e}");
            ExitCode::FAILURE
        }
    }
}
