//! Token sequences from JSON Lines, batched by a token budget.
//!
//! Writes `{"tokens": [...], "label": k}` lines of varying length (a
//! tokenised corpus), declares `tokens` ragged (`i64 [?]`: its length
//! varies, so it is declared, not inferred from the first lines), and
//! batches by tokens per batch (`BatchPolicy::tokens`) instead of a fixed
//! count. Each batch is read both ways a ragged field comes: values
//! concatenated with offsets (Paddle's LoD), or padded with lengths. It
//! checks that no batch is over the budget (a line longer than the budget
//! alone excepted), that every line comes once, and prints the batch sizes.
//!
//! ```text
//! cargo run --release --example jsonl_tokens
//! cargo run --release --example jsonl_tokens -- --lines 20000 --max-tokens 8192 --padded
//! ```

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use feedline_actors::ndarray::{Ix1, Ix2};
use feedline_actors::prelude::*;
use rand::{Rng, SeedableRng};

/// Batch token sequences read from JSON Lines by a token budget (tokens
/// per batch), with ragged fields as offsets or padded.
#[derive(Parser)]
#[command(name = "jsonl_tokens")]
struct Args {
    /// Lines (sequences) to write.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    lines: u64,
    /// Longest sequence, in tokens.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_len: u64,
    /// Tokens per batch.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_tokens: u64,
    /// Lay `tokens` out padded ([batch, longest]) with lengths, not as offsets.
    #[arg(long)]
    padded: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jsonl_tokens: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("corpus.jsonl");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut total_tokens = 0u64;
    for line in 0..args.lines {
        let len = rng.gen_range(1..=args.max_len);
        total_tokens += len;
        // Token t of line k is k * 1000 + t % 1000: each line's own.
        let tokens: Vec<u64> = (0..len).map(|t| line * 1000 + t % 1000).collect();
        writeln!(out, "{{\"tokens\": {tokens:?}, \"label\": {line}}}")?;
    }
    out.into_inner()?.sync_all()?;

    let layout = if args.padded {
        Ragged::Padded
    } else {
        Ragged::Offsets
    };
    let schema = Schema::builder()
        .ragged("tokens", DType::I64, layout)
        .field("label", DType::I64, [])
        .build()?;
    let policy = BatchPolicy::tokens("tokens", args.max_tokens, &schema)?;
    let loader = Loader::builder()
        .files(&path)
        .schema(schema)
        .batch_policy(policy)
        .shuffle(1000)
        .seed(11)
        .build()?;

    let mut seen = vec![false; args.lines as usize];
    let (mut batches, mut tokens_seen, mut sizes) = (0u64, 0u64, Vec::new());
    for delivered in loader {
        let batch = delivered?.batch;
        let labels = batch.view::<i64, Ix1>("label")?;
        let lengths: Vec<usize> = if args.padded {
            let padded = batch.view::<i64, Ix2>("tokens")?; // [batch, longest]
            let lengths = batch
                .lengths("tokens")?
                .ok_or("padded tokens come with lengths")?;
            for ((row, &len), &label) in padded.outer_iter().zip(lengths).zip(labels.iter()) {
                check_line(label, &row.as_slice().ok_or("rows are contiguous")?[..len])?;
            }
            lengths.to_vec()
        } else {
            let values = batch.view::<i64, Ix1>("tokens")?; // all rows' tokens, concatenated
            let offsets = batch.offsets("tokens")?.ok_or("tokens come with offsets")?;
            let values = values.as_slice().ok_or("values are contiguous")?;
            for (w, &label) in offsets.windows(2).zip(labels.iter()) {
                check_line(label, &values[w[0]..w[1]])?;
            }
            offsets.windows(2).map(|w| w[1] - w[0]).collect()
        };
        let tokens: u64 = lengths.iter().map(|&l| l as u64).sum();
        if tokens > args.max_tokens && lengths.len() > 1 {
            return Err(format!(
                "a batch of {} lines holds {tokens} tokens, over the budget",
                lengths.len()
            )
            .into());
        }
        for &label in labels.iter() {
            let seen = &mut seen[label as usize];
            if *seen {
                return Err(format!("line {label} came twice").into());
            }
            *seen = true;
        }
        batches += 1;
        tokens_seen += tokens;
        sizes.push(lengths.len());
    }
    if let Some(line) = seen.iter().position(|s| !s) {
        return Err(format!("line {line} never came").into());
    }
    if tokens_seen != total_tokens {
        return Err(format!("{tokens_seen} tokens delivered, {total_tokens} written").into());
    }
    sizes.sort_unstable();
    println!(
        "{} lines, {total_tokens} tokens → {batches} batches of at most {} tokens ({} layout); \
         lines per batch: min {}, median {}, max {}; every line once",
        args.lines,
        args.max_tokens,
        if args.padded { "padded" } else { "offsets" },
        sizes[0],
        sizes[sizes.len() / 2],
        sizes[sizes.len() - 1],
    );
    Ok(())
}

/// Line `label`'s tokens are `label * 1000 + t % 1000`.
fn check_line(label: i64, tokens: &[i64]) -> Result<(), String> {
    for (t, &v) in tokens.iter().enumerate() {
        if v != label * 1000 + (t % 1000) as i64 {
            return Err(format!("line {label}: token {t} is {v}: rows mixed up"));
        }
    }
    Ok(())
}
