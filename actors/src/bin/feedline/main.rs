//! The `feedline` command: look into data files (`cat`, `inspect`), write the
//! reference datasets (`gen`), and run or measure the loader (`run`, `bench`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod files;
mod run;

/// Feeds training data to deep-learning trainers.
#[derive(Parser)]
#[command(name = "feedline", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print one JSON object per instance, in file order.
    Cat(files::CatArgs),
    /// Print per file: records, bytes, fields (the inferred schema), checksums.
    Inspect(files::InspectArgs),
    /// Write a reference dataset (TFRecord of tf.train.Example).
    Gen(files::GenArgs),
    /// Run the actor pipeline with simulated devices.
    Run(run::RunArgs),
    /// Measure the loader: records/s, MB/s, CPU, peak RSS, first-batch latency.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`feedline cat … | head`), as Unix tools do.
    // SAFETY: setting a signal's disposition to the default is always sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Cat(a) => files::cat(a),
        Command::Inspect(a) => files::inspect(a),
        Command::Gen(a) => files::gen(a),
        Command::Run(a) => run::run(a),
        Command::Bench(a) => bench::bench(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("feedline: error: {e}");
            ExitCode::FAILURE
        }
    }
}
