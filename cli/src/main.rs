//! The `feedline` command: look into data files (`cat`, `inspect`), write the
//! reference datasets (`gen`), and run or measure the loader (`run`, `bench`).
//! Every flag is checked ([`pipeline_args`]), every write to standard output
//! and standard error too ([`output`]); errors are [`error::CliError`]s,
//! printed once, with exit code 2 for a refused flag and 1 otherwise.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod error;
mod files;
mod flags;
mod measure;
mod output;
mod pipeline_args;
mod progress;
mod run;
mod signals;

use crate::error::CliError;

/// Read training-data files (TFRecord, NumPy .npy/.npz, JSON Lines, CSV,
/// Parquet, WebDataset tar shards) and feed them, shuffled and batched, to
/// training devices: look into the files, run the loader with simulated
/// devices, and measure it.
///
/// `feedline inspect` shows the schema the loader uses (the file's own, or
/// inferred from its first records); `feedline run`
/// delivers every record once per pass and can trace each batch's records;
/// `feedline bench` measures records/s, MB/s, CPU, memory and latency on
/// your files. Libraries: `feedline` (core) and `feedline-actors` (the
/// pipeline and its `Loader`).
#[derive(Parser)]
#[command(name = "feedline", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print one JSON object per instance, in file order (with --transform
    /// its decoded images, with --tokenizer its token ids `input_ids`, as
    /// `run` makes them).
    Cat(files::CatArgs),
    /// Print per file: records, bytes, the schema the loader uses (the
    /// file's own, or inferred from its first records), and whether every
    /// record fits it and every checksum holds.
    Inspect(files::InspectArgs),
    /// Write a reference dataset (TFRecord of tf.train.Example).
    Gen(files::GenArgs),
    /// Run the actor pipeline with simulated devices; Ctrl-C stops it cleanly.
    Run(run::RunArgs),
    /// Measure the loader on your files: records/s, MB/s, CPU, peak RSS,
    /// first-batch latency, bottleneck.
    Bench(bench::BenchArgs),
}

/// Exit code of a refused flag (clap's own usage errors use it too).
const USAGE: u8 = 2;

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`feedline cat … | head`), as Unix tools do.
    // SAFETY: setting a signal's disposition to the default is always sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // The command reports a pipeline's error itself; the core's note that a
    // schema was inferred from the records before a bad one would say it
    // a second time (RUST_LOG overrides this).
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,feedline::format::registry=error"),
    )
    .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help, version or a usage error; writing it can fail too.
        Err(e) => {
            return match e.print() {
                Ok(()) => ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1)),
                Err(io) => report(&CliError::Output {
                    stream: if e.use_stderr() {
                        "standard error"
                    } else {
                        "standard output"
                    },
                    source: io,
                }),
            };
        }
    };
    let result = match cli.command {
        Command::Cat(a) => files::cat(a),
        Command::Inspect(a) => files::inspect(a),
        Command::Gen(a) => files::gen(a),
        Command::Run(a) => run::run(a),
        Command::Bench(a) => bench::bench(a).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => report(&e),
    }
}

/// Print the error (once) and give its exit code.
fn report(e: &CliError) -> ExitCode {
    // Nowhere left to say it if standard error fails too: the code says it.
    let _ = writeln!(std::io::stderr(), "feedline: error: {e}");
    match e {
        CliError::Usage(_) => ExitCode::from(USAGE),
        _ => ExitCode::FAILURE,
    }
}
