//! Sequence packing on a real corpus available offline: the Rust sources of
//! the local cargo registry (`$CARGO_HOME/registry/src`, else
//! `~/.cargo/registry/src`), one `.rs` file a document.
//!
//! ```sh
//! cargo run --release --features tokenize --example packing
//! ```
//!
//! What it does and shows:
//! 1. the corpus: the registry's `.rs` files, paths sorted, the non-UTF-8,
//!    empty and larger than `--max-doc-bytes` ones skipped, at most
//!    `--max-docs`, written as JSON Lines shards (`{"text": …}`) into the
//!    output directory (default `target/packing-example`);
//! 2. a byte-level BPE (`--vocab` tokens, `<|endoftext|>` special token)
//!    trained on that text by the `tokenizers` crate and saved as
//!    `tokenizer.json` there (Python's `tokenizers` loads the same file);
//! 3. every document tokenized by feedline's stage
//!    ([`feedline::tokenize::Tokenize`], EOS added), in a seeded shuffled
//!    order, then packed by [`feedline::pack::Packer`] at L = 2,048 / 4,096 /
//!    8,192 with best-fit and first-fit (window `--window`) and concat: a
//!    markdown table of rows, fill, documents of at most L tokens cut,
//!    documents longer than L (split into pieces), padding tokens — every
//!    configuration checked from the packed batches themselves (each
//!    document's tokens once, in order, at the right place);
//! 4. the packer alone: tokens/s on one thread, best-fit at L = 4,096 over
//!    the tokenized documents (push, pop, finish and the batch layout);
//! 5. the whole pipeline through feedline's loader (read JSON Lines, shuffle,
//!    tokenize on the transform workers, pack best-fit L = 4,096): tokens/s
//!    of the whole job, each document's pieces once, and the packing stats.
//!
//! Every timing line says the machine's load average: on a shared machine
//! the figures are of the cores this run got.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use feedline::pack::{LongDocs, Pack, PackPolicy, PackStats, Packer};
use feedline::tokenize::{Tokenize, Tokenizer};
use feedline::{Batch, Origin, SourceId};
use feedline_actors::Loader;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    TokenizerBuilder, TokenizerImpl,
};

type Bpe = TokenizerImpl<
    BPE,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The row lengths of the table.
const LENGTHS: [usize; 3] = [2048, 4096, 8192];
/// The row length of the throughput figures and the pipeline.
const THROUGHPUT_LENGTH: usize = 4096;

/// Packing the local cargo registry's Rust sources: the fill table, the
/// packer's throughput and the whole pipeline.
#[derive(Parser, Debug)]
#[command(
    about = "Sequence packing on the local cargo registry's Rust sources: a byte-level BPE \
             (tokenizers crate), best-fit / first-fit / concat at L = 2,048 / 4,096 / 8,192"
)]
struct Args {
    /// Documents (files) at most.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_docs: u64,
    /// Files larger than this (bytes) are skipped.
    #[arg(long, default_value_t = 256 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_doc_bytes: u64,
    /// JSON Lines shards the corpus is written to.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    shards: u64,
    /// BPE vocabulary size (the special token included).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(300..=1_000_000))]
    vocab: u64,
    /// Best-fit and first-fit window (documents in open rows).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    window: u64,
    /// Rows per batch.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    batch: u64,
    /// Runs of the packer-alone timing (the best and the median reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeats: u64,
    /// Seed of the document order (and of the pipeline's shuffle).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The directory of crate sources (default: $CARGO_HOME/registry/src,
    /// else ~/.cargo/registry/src).
    #[arg(long)]
    registry: Option<PathBuf>,
    /// Where the shards and tokenizer.json go (default: target/packing-example).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Leave out the whole-pipeline part.
    #[arg(long)]
    no_pipeline: bool,
}

/// The registry's unpacked crate sources.
fn registry_src() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into())).join(".cargo")
        });
    home.join("registry").join("src")
}

/// Every `.rs` file under `dir`, recursively (symbolic links not followed).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            rust_files(&path, out)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The corpus: its documents and what was skipped.
struct Corpus {
    texts: Vec<String>,
    files_seen: usize,
    skipped_empty: usize,
    skipped_large: usize,
    skipped_not_utf8: usize,
}

fn collect(root: &Path, max_docs: usize, max_bytes: u64) -> Result<Corpus, AnyError> {
    let mut paths = Vec::new();
    rust_files(root, &mut paths)
        .map_err(|e| format!("reading the cargo registry {}: {e}", root.display()))?;
    paths.sort();
    let mut c = Corpus {
        texts: Vec::new(),
        files_seen: 0,
        skipped_empty: 0,
        skipped_large: 0,
        skipped_not_utf8: 0,
    };
    for p in paths {
        if c.texts.len() >= max_docs {
            break;
        }
        c.files_seen += 1;
        let len = std::fs::metadata(&p)?.len();
        if len == 0 {
            c.skipped_empty += 1;
            continue;
        }
        if len > max_bytes {
            c.skipped_large += 1;
            continue;
        }
        match String::from_utf8(std::fs::read(&p)?) {
            Ok(text) => c.texts.push(text),
            Err(_) => c.skipped_not_utf8 += 1,
        }
    }
    if c.texts.is_empty() {
        return Err(format!("no Rust source in {}", root.display()).into());
    }
    Ok(c)
}

/// Document `i` of `n` goes to shard `i * shards / n` (consecutive runs of
/// the sorted paths), as record `i - first(shard)`.
fn shard_of(i: usize, n: usize, shards: usize) -> usize {
    i * shards / n
}

/// Write the shards; their paths and each document's origin.
fn write_shards(
    dir: &Path,
    texts: &[String],
    shards: usize,
) -> Result<(Vec<String>, Vec<Origin>), AnyError> {
    let shards = shards.min(texts.len());
    let paths: Vec<String> = (0..shards)
        .map(|s| {
            dir.join(format!("docs-{s:03}.jsonl"))
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut outs = paths
        .iter()
        .map(|p| Ok(std::io::BufWriter::new(std::fs::File::create(p)?)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let ids: Vec<SourceId> = paths.iter().map(|p| SourceId::intern(p)).collect();
    let mut records = vec![0u64; shards];
    let mut origins = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let s = shard_of(i, texts.len(), shards);
        serde_json::to_writer(&mut outs[s], &serde_json::json!({ "text": text }))?;
        outs[s].write_all(b"\n")?;
        origins.push(Origin::new(ids[s], records[s]));
        records[s] += 1;
    }
    for mut o in outs {
        o.flush()?;
    }
    Ok((paths, origins))
}

/// A byte-level BPE of `vocab` tokens (GPT-2's pre-tokenizer and decoder)
/// with the special token `<|endoftext|>`, trained on `texts`.
fn train(texts: &[String], vocab: u64) -> Result<Bpe, AnyError> {
    let mut tokenizer: Bpe = TokenizerBuilder::default()
        .with_model(BPE::default())
        .with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(
            ByteLevel::default().add_prefix_space(false),
        )))
        .with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())))
        .with_post_processor(Some(PostProcessorWrapper::ByteLevel(
            ByteLevel::default().trim_offsets(false),
        )))
        .build()?;
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab as usize)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(vec![AddedToken::from("<|endoftext|>", true)])
        .build();
    tokenizer.train(&mut trainer, texts.iter())?;
    Ok(tokenizer)
}

/// What one configuration's packed batches hold, counted from the batches
/// themselves (not from the packer's stats).
#[derive(Default)]
struct Check {
    /// Per document: its pieces as (start, len).
    pieces: Vec<Vec<(u64, u32)>>,
    tokens: u64,
}

impl Check {
    fn new(docs: usize) -> Self {
        Check {
            pieces: vec![Vec::new(); docs],
            tokens: 0,
        }
    }

    /// Check one packed batch: every segment's tokens equal its document's
    /// tokens at that place (`doc` names a segment's document); note its
    /// pieces. Its real tokens, counted from `segment_ids`.
    fn batch(
        &mut self,
        batch: &Batch,
        doc: impl Fn(&Origin) -> Option<usize>,
        docs: &[Vec<i32>],
    ) -> Result<u64, AnyError> {
        let input_ids = batch.view::<i32, ndarray::Ix2>("input_ids")?;
        let real = batch
            .view::<i32, ndarray::Ix2>("segment_ids")?
            .iter()
            .filter(|&&s| s != 0)
            .count() as u64;
        let segments = batch.segments().ok_or("a packed batch without segments")?;
        let mut at = vec![0usize; batch.len()];
        let mut in_segments = 0u64;
        for seg in segments {
            let d = doc(&seg.origin)
                .ok_or_else(|| format!("a segment of an unknown document {:?}", seg.origin))?;
            let tokens = &docs[d];
            if seg.doc_tokens != tokens.len() as u64 {
                return Err(format!(
                    "document {d}: doc_tokens {} != its {} tokens",
                    seg.doc_tokens,
                    tokens.len()
                )
                .into());
            }
            let (r, s, n) = (seg.row as usize, seg.start as usize, seg.len as usize);
            let row = input_ids.row(r);
            let got = row
                .as_slice()
                .ok_or("input_ids rows are not contiguous")?
                .get(at[r]..at[r] + n)
                .ok_or("a segment past its row's end")?;
            if tokens.get(s..s + n) != Some(got) {
                return Err(format!("document {d}: tokens {s}..{} differ", s + n).into());
            }
            at[r] += n;
            in_segments += n as u64;
            self.pieces[d].push((seg.start, seg.len));
        }
        if real != in_segments {
            return Err(
                format!("{real} tokens with a segment id, {in_segments} in the segments").into(),
            );
        }
        self.tokens += real;
        Ok(real)
    }

    /// Every document once (its pieces cover it exactly); the documents of
    /// at most `length` tokens delivered in more than one piece.
    fn finish(mut self, docs: &[Vec<i32>], length: usize) -> Result<(u64, u64), AnyError> {
        let mut cut = 0;
        for (d, pieces) in self.pieces.iter_mut().enumerate() {
            pieces.sort_unstable();
            let mut end = 0u64;
            for &(s, n) in pieces.iter() {
                if s != end {
                    return Err(format!("document {d}: a piece at {s}, expected {end}").into());
                }
                end += n as u64;
            }
            if end != docs[d].len() as u64 {
                return Err(format!("document {d}: {end} of {} tokens", docs[d].len()).into());
            }
            if docs[d].len() <= length && pieces.len() > 1 {
                cut += 1;
            }
        }
        Ok((cut, self.tokens))
    }
}

/// Pack `order` of `docs` with `pack`, `b` rows a batch, every batch
/// checked; the packer's stats and the documents ≤ L cut counted from the
/// batches.
fn pack_checked(
    pack: Pack,
    b: usize,
    docs: &[Vec<i32>],
    origins: &[Origin],
    order: &[usize],
    index: &HashMap<Origin, usize>,
) -> Result<(PackStats, u64), AnyError> {
    let length = pack.length;
    let mut packer = Packer::new(pack, b)?;
    let mut check = Check::new(docs.len());
    let doc = |o: &Origin| index.get(o).copied();
    for &d in order {
        packer.push(origins[d], &docs[d], None);
        while let Some(rows) = packer.pop() {
            check.batch(&rows.into_batch(length)?, doc, docs)?;
        }
    }
    for rows in packer.finish() {
        check.batch(&rows.into_batch(length)?, doc, docs)?;
    }
    let stats = packer.stats();
    let (cut, tokens) = check.finish(docs, length)?;
    if tokens != stats.tokens {
        return Err(format!(
            "{tokens} tokens in the batches, the stats say {}",
            stats.tokens
        )
        .into());
    }
    Ok((stats, cut))
}

/// The packer's work alone: push, pop, finish and the batch layout; its
/// seconds and the tokens packed.
fn pack_timed(
    pack: Pack,
    b: usize,
    docs: &[Vec<i32>],
    origins: &[Origin],
    order: &[usize],
) -> Result<(f64, u64), AnyError> {
    let length = pack.length;
    let t0 = Instant::now();
    let mut packer = Packer::new(pack, b)?;
    let mut batches = 0u64;
    for &d in order {
        packer.push(origins[d], &docs[d], None);
        while let Some(rows) = packer.pop() {
            std::hint::black_box(rows.into_batch(length)?);
            batches += 1;
        }
    }
    for rows in packer.finish() {
        std::hint::black_box(rows.into_batch(length)?);
        batches += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    std::hint::black_box(batches);
    Ok((secs, packer.stats().tokens))
}

/// The 1-minute load average (Linux), for the timings' context: the
/// figures are of a machine perhaps shared.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            l.split_whitespace()
                .next()
                .map(|x| format!("load average {x}"))
        })
        .unwrap_or_else(|| "load average unknown".into())
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn main() -> Result<(), AnyError> {
    env_logger::init();
    let a = Args::parse();
    let dir = a.dir.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/packing-example")
    });
    std::fs::create_dir_all(&dir)?;
    let b = a.batch as usize;
    let window = a.window as usize;

    println!(
        "{} cores available, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );

    // 1. The corpus.
    let root = a.registry.clone().unwrap_or_else(registry_src);
    let t0 = Instant::now();
    let corpus = collect(&root, a.max_docs as usize, a.max_doc_bytes)?;
    let texts = corpus.texts;
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    let (shards, origins) = write_shards(&dir, &texts, a.shards as usize)?;
    println!(
        "corpus: {} documents, {:.1} MB (the .rs files of {}, paths sorted; of the first {} files \
         skipped {} empty, {} over {} bytes, {} not UTF-8), as {} JSON Lines shards in {} ({:.1} s)",
        thousands(texts.len() as u64),
        bytes as f64 / 1e6,
        root.display(),
        thousands(corpus.files_seen as u64),
        corpus.skipped_empty,
        corpus.skipped_large,
        a.max_doc_bytes,
        corpus.skipped_not_utf8,
        shards.len(),
        dir.display(),
        t0.elapsed().as_secs_f64()
    );

    // 2. The tokenizer.
    let json = dir.join("tokenizer.json");
    let t0 = Instant::now();
    let bpe = train(&texts, a.vocab)?;
    let train_s = t0.elapsed().as_secs_f64();
    bpe.save(&json, false)?;
    println!(
        "tokenizer: a byte-level BPE of {} tokens (with <|endoftext|>) trained in {train_s:.1} s \
         on {} threads ({}), saved as {}",
        bpe.get_vocab_size(true),
        rayon::current_num_threads(),
        load(),
        json.display()
    );
    drop(bpe);

    // 3. Every document tokenized by feedline's stage (EOS added).
    let stage = Tokenize::new(Tokenizer::from_file(&json)?, "text").add_eos(true)?;
    let t0 = Instant::now();
    let docs: Vec<Vec<i32>> = texts
        .par_iter()
        .map(|t| stage.ids(t.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tokenizing: {e}"))?;
    let tok_s = t0.elapsed().as_secs_f64();
    drop(texts);
    let total: u64 = docs.iter().map(|d| d.len() as u64).sum();
    let mut lens: Vec<usize> = docs.iter().map(Vec::len).collect();
    lens.sort_unstable();
    println!(
        "tokens: {} (EOS included; {:.2} bytes a token), a document {:.0} on average, median {}, \
         longest {}; tokenized in {tok_s:.1} s on {} threads ({})",
        thousands(total),
        bytes as f64 / (total - docs.len() as u64) as f64,
        total as f64 / docs.len() as f64,
        lens[lens.len() / 2],
        lens[lens.len() - 1],
        rayon::current_num_threads(),
        load()
    );
    let index: HashMap<Origin, usize> = origins.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(a.seed));

    println!();
    println!(
        "Packing {} documents ({} tokens) in a shuffled order (seed {}), {b} rows a batch, \
         best-fit and first-fit with a window of {window} documents, documents longer than L \
         split into pieces of L; every document's tokens checked once, in order, in the batches:",
        thousands(docs.len() as u64),
        thousands(total),
        a.seed
    );
    println!();
    println!(
        "| L | policy | rows | fill | documents ≤ L cut | documents > L (split) | padding tokens |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for length in LENGTHS {
        let long = docs.iter().filter(|d| d.len() > length).count() as u64;
        for policy in [
            PackPolicy::BestFit,
            PackPolicy::FirstFit,
            PackPolicy::Concat,
        ] {
            let pack = Pack::new(policy, length)
                .window(window)
                .long_docs(LongDocs::Split);
            let (stats, cut) = pack_checked(pack, b, &docs, &origins, &order, &index)?;
            if cut != stats.documents_cut {
                return Err(format!(
                    "L {length} {policy}: {cut} documents ≤ L cut in the batches, the stats say {}",
                    stats.documents_cut
                )
                .into());
            }
            if policy != PackPolicy::Concat && stats.long_split != long {
                return Err(format!(
                    "L {length} {policy}: {long} documents > L, the stats say {} split",
                    stats.long_split
                )
                .into());
            }
            println!(
                "| {} | {policy} | {} | {:.2} % | {} | {} | {} |",
                thousands(length as u64),
                thousands(stats.rows),
                100.0 * stats.fill(length),
                thousands(cut),
                thousands(long),
                thousands(stats.padding_tokens)
            );
        }
    }
    println!();
    println!(
        "(rows include the padding rows that fill the last batch up to {b}; fill = real tokens / \
         (rows × L); concat cuts documents > L too, where rows end)"
    );

    // 4. The packer alone.
    let mut runs = Vec::new();
    let mut packed = 0;
    for _ in 0..a.repeats {
        let pack = Pack::best_fit(THROUGHPUT_LENGTH).window(window);
        let (secs, tokens) = pack_timed(pack, b, &docs, &origins, &order)?;
        runs.push(secs);
        packed = tokens;
    }
    runs.sort_by(f64::total_cmp);
    let (best, median) = (runs[0], runs[runs.len() / 2]);
    println!();
    println!(
        "packer alone, one thread, best-fit L = {THROUGHPUT_LENGTH} W = {window}, {b} rows a batch \
         (push, pop, finish, batch layout; {} tokens, {} documents, {} runs): best {:.1} M \
         tokens/s ({:.3} s, {} documents/s), median {:.1} M tokens/s ({:.3} s); {}",
        thousands(packed),
        thousands(docs.len() as u64),
        runs.len(),
        packed as f64 / best / 1e6,
        best,
        thousands((docs.len() as f64 / best) as u64),
        packed as f64 / median / 1e6,
        median,
        load()
    );

    // 5. The whole pipeline.
    if a.no_pipeline {
        return Ok(());
    }
    pipeline(&a, &shards, &json, &docs, &origins)
}

/// The whole job through feedline's loader: read the shards, shuffle,
/// tokenize on the transform workers (the same stage), pack best-fit at
/// L = 4,096; every document's pieces checked once, its tokens equal to the
/// ones tokenized above.
fn pipeline(
    a: &Args,
    shards: &[String],
    json: &Path,
    docs: &[Vec<i32>],
    origins: &[Origin],
) -> Result<(), AnyError> {
    const READERS: usize = 2;
    const WORKERS: usize = 2;
    const SHUFFLE: usize = 10_000;
    let length = THROUGHPUT_LENGTH;
    let window = a.window as usize;
    let b = a.batch as usize;
    // Documents by (file name, record): the loader names its files as it likes.
    let file_name = |o: &Origin| {
        Path::new(&*o.source.name())
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
    };
    let index: HashMap<(String, u64), usize> = origins
        .iter()
        .enumerate()
        .map(|(i, o)| ((file_name(o).unwrap_or_default(), o.record), i))
        .collect();
    let doc = |o: &Origin| index.get(&(file_name(o)?, o.record)).copied();
    let stage = Tokenize::new(Tokenizer::from_file(json)?, "text").add_eos(true)?;
    let t0 = Instant::now();
    let mut loader = Loader::builder()
        .files(shards.to_vec())
        .batch(b)
        .shuffle(SHUFFLE)
        .seed(a.seed)
        .passes(1)
        .readers(READERS)
        .workers(WORKERS)
        // What `.tokenize_with(stage)` does; that method is behind
        // feedline-actors' own `tokenize` feature, which this package's
        // `tokenize` does not turn on (a dev-dependency's feature).
        .transform(Arc::new(stage))
        .pack(Pack::best_fit(length).window(window))
        .shard_from_env(false)
        .build()?;
    let mut check = Check::new(docs.len());
    let mut batches = 0u64;
    for d in loader.iter() {
        let d = d?;
        check.batch(&d.batch, doc, docs)?;
        batches += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    let tokens = check.tokens;
    let (cut, _) = check.finish(docs, length)?;
    let total: u64 = docs.iter().map(|d| d.len() as u64).sum();
    if tokens != total {
        return Err(format!("the loader gave {tokens} tokens of {total}").into());
    }
    println!();
    println!(
        "whole pipeline (feedline's loader: {} JSON Lines shards read by {READERS} readers, shuffle \
         {SHUFFLE}, tokenized by {WORKERS} transform workers, EOS added, packed best-fit L = \
         {length} W = {window}, {b} rows a batch, 1 pass): {} batches, {} real tokens (segment \
         ids != 0), every one of {} documents once with the same tokens as above, {cut} \
         documents ≤ L cut, in {secs:.1} s: {:.2} M tokens/s ({})",
        shards.len(),
        thousands(batches),
        thousands(tokens),
        thousands(docs.len() as u64),
        tokens as f64 / secs / 1e6,
        load()
    );
    let stats = loader.stats();
    println!(
        "loader.stats(): bottleneck {}; readers busy {:.0} %, batch maker (tokenizing workers \
         included) busy {:.0} % over {} workers",
        stats.bottleneck,
        100.0 * stats.readers.busy,
        100.0 * stats.batch_maker.busy,
        stats.batch_maker_workers
    );
    match stats.packing {
        Some(p) => println!(
            "loader.stats().packing: fill {:.2} % (L = {}), {:?}",
            100.0 * p.fill,
            p.length,
            p.counts
        ),
        None => println!("loader.stats().packing: None"),
    }
    Ok(())
}
