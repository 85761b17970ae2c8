//! Text input: JSON Lines of generated documents → a small BPE tokenizer
//! trained from that same text with the `tokenizers` crate (no download) →
//! tokenization on the prefetch readers (a format that wraps JSON Lines) →
//! shuffled batches cut by a token budget, each document exactly once.
//!
//! Tokenizing on the readers, before the shuffle, is what lets the batcher
//! count tokens: `BatchPolicy::tokens` sums the length of the ragged `ids`
//! field, so every batch holds at most `--max-tokens` tokens (padding-free
//! packing for a transformer), and the readers tokenize in parallel.
//!
//! ```sh
//! cargo run --release --example text -- --docs 20000 --readers 2
//! ```

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use feedline::batch_policy::BatchPolicy;
use feedline::format::jsonl::JsonlFormat;
use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::{DType, Error, Ragged, Record, Schema, Tensor, Values};
use feedline_actors::Loader;
use rand::{Rng, SeedableRng};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::whitespace::Whitespace;
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

/// Generated JSON Lines text, tokenized on the readers, batched by a token budget.
#[derive(Parser, Debug)]
#[command(
    about = "Text input: generated JSON Lines documents, a BPE tokenizer trained on them \
                   (tokenizers crate), tokenization on the readers, token-budget batches"
)]
struct Args {
    /// Documents to generate.
    #[arg(long, default_value_t = 8000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    docs: u64,
    /// JSON Lines files to spread them over.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1000))]
    files: u64,
    /// BPE vocabulary size.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=100_000))]
    vocab: u64,
    /// Token budget of a batch.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    max_tokens: u64,
    /// Prefetch readers (they tokenize).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    readers: u64,
    /// Shuffle pool in documents.
    #[arg(long, default_value_t = 2000)]
    shuffle: usize,
    /// Passes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    passes: u64,
    /// Seed of the generated text and of the shuffle.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where the text and the tokenizer go (default: target/text-example).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Made-up words from syllables, with a Zipf-like choice so that BPE finds
/// frequent pieces to merge, as in natural text.
fn words(rng: &mut impl Rng, n: usize) -> Vec<String> {
    const SYL: [&str; 24] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "en", "or", "al", "is", "tra", "pel",
        "dor", "sun", "ber", "qui", "ght", "ion", "ing", "ed", "er", "st",
    ];
    (0..n)
        .map(|_| {
            let k = rng.gen_range(1..=4);
            (0..k).map(|_| SYL[rng.gen_range(0..SYL.len())]).collect()
        })
        .collect()
}

/// Write `docs` documents as `files` JSON Lines files (`{"id": i, "text": …}`)
/// and the whole text as one plain file for training; their paths.
fn generate(dir: &Path, a: &Args) -> std::io::Result<(Vec<String>, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
    let lexicon = words(&mut rng, 600);
    let corpus = dir.join("corpus.txt");
    let mut plain = std::io::BufWriter::new(std::fs::File::create(&corpus)?);
    let mut outs = Vec::new();
    let mut paths = Vec::new();
    for f in 0..a.files {
        let p = dir.join(format!("docs-{f:03}.jsonl"));
        outs.push(std::io::BufWriter::new(std::fs::File::create(&p)?));
        paths.push(p.to_string_lossy().into_owned());
    }
    for id in 0..a.docs {
        let len = rng.gen_range(4..160);
        let text: Vec<&str> = (0..len)
            .map(|_| {
                // Zipf-like: small indices far more often.
                let r: f64 = rng.gen();
                lexicon[((r * r * r) * lexicon.len() as f64) as usize].as_str()
            })
            .collect();
        let text = text.join(" ");
        writeln!(plain, "{text}")?;
        let line = serde_json::json!({"id": id, "text": text});
        writeln!(outs[(id % a.files) as usize], "{line}")?;
    }
    for mut o in outs {
        o.flush()?;
    }
    plain.flush()?;
    Ok((paths, corpus))
}

/// Train a BPE of `vocab` tokens on `corpus` (whitespace pre-tokenizer).
fn train(corpus: &Path, vocab: u64) -> Result<Bpe, Box<dyn std::error::Error + Send + Sync>> {
    let mut tokenizer: Bpe = TokenizerBuilder::default()
        .with_model(BPE::builder().unk_token("[UNK]".into()).build()?)
        .with_pre_tokenizer(Some(PreTokenizerWrapper::Whitespace(Whitespace {})))
        .build()?;
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab as usize)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from("[UNK]", true)])
        .build();
    tokenizer.train_from_files(&mut trainer, vec![corpus.to_string_lossy().into_owned()])?;
    Ok(tokenizer)
}

/// JSON Lines documents, tokenized as they are read: `tokens:PATH` gives
/// instances `{id: i64, ids: i64 [?]}` (the ids of the document's text).
struct Tokenized {
    tokenizer: Arc<Bpe>,
}

impl Tokenized {
    fn schema() -> Schema {
        Schema::builder()
            .field("id", DType::I64, [])
            .ragged("ids", DType::I64, Ragged::Offsets)
            .build()
            .expect("a valid schema")
    }
}

impl Format for Tokenized {
    fn name(&self) -> &str {
        "tokens"
    }
    fn extensions(&self) -> &[&str] {
        &[]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> feedline::Result<Box<dyn RecordReader>> {
        Ok(Box::new(TokenizingReader {
            inner: JsonlFormat.open(path, opts)?,
            tokenizer: self.tokenizer.clone(),
        }))
    }
}

struct TokenizingReader {
    inner: Box<dyn RecordReader>,
    tokenizer: Arc<Bpe>,
}

impl RecordReader for TokenizingReader {
    fn next_record(&mut self) -> feedline::Result<Option<Record>> {
        let Some(rec) = self.inner.next_record()? else {
            return Ok(None);
        };
        let loc = rec.location.clone();
        let bad = |what: String| Error::corrupt(loc.clone(), what);
        let field = |name: &str| {
            rec.get(name)
                .ok_or_else(|| bad(format!("no field `{name}`")))
        };
        let id = match &field("id")?.values {
            Values::I64(v) if v.len() == 1 => v[0],
            other => {
                let got = other.dtype().name();
                return Err(bad(format!("field `id`: expected one i64, got {got}")));
            }
        };
        let text = field("text")?
            .values
            .as_bytes()
            .filter(|b| b.len() == 1)
            .ok_or_else(|| bad("field `text`: expected one string".into()))?;
        let text =
            std::str::from_utf8(text.get(0)).map_err(|e| bad(format!("field `text`: {e}")))?;
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| bad(format!("tokenizing `text`: {e}")))?;
        let ids: Vec<i64> = encoding.get_ids().iter().map(|&t| t as i64).collect();
        Ok(Some(Record {
            fields: vec![
                ("id".into(), Tensor::scalar(Values::I64(vec![id]))),
                ("ids".into(), Tensor::vector(Values::I64(ids))),
            ],
            location: loc,
        }))
    }
    fn next_index(&self) -> u64 {
        self.inner.next_index()
    }
    fn can_continue(&self) -> bool {
        self.inner.can_continue()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    env_logger::init();
    let a = Args::parse();
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/text-example"));
    let (files, corpus) = generate(&dir, &a)?;
    let t0 = Instant::now();
    let tokenizer = train(&corpus, a.vocab)?;
    tokenizer.save(dir.join("tokenizer.json"), false)?;
    println!(
        "trained a BPE of {} tokens on {} documents in {:.2} s (saved {})",
        tokenizer.get_vocab_size(true),
        a.docs,
        t0.elapsed().as_secs_f64(),
        dir.join("tokenizer.json").display()
    );

    let schema = Tokenized::schema();
    let mut registry = Registry::with_builtin();
    registry.register(Arc::new(Tokenized {
        tokenizer: Arc::new(tokenizer),
    }));
    let loader = Loader::builder()
        .registry(registry)
        .files(
            files
                .iter()
                .map(|f| format!("tokens:{f}"))
                .collect::<Vec<_>>(),
        )
        .schema(schema.clone())
        .batch_policy(BatchPolicy::tokens("ids", a.max_tokens, &schema)?)
        .readers(a.readers as usize)
        .shuffle(a.shuffle)
        .passes(a.passes)
        .seed(a.seed)
        .shard_from_env(false)
        .build()?;

    let t0 = Instant::now();
    let (mut batches, mut tokens, mut most, mut over) = (0u64, 0u64, 0u64, 0u64);
    let mut seen: Vec<BTreeSet<i64>> = vec![BTreeSet::new(); a.passes as usize];
    for d in loader {
        let d = d?;
        let lengths = d.batch.offsets("ids")?.expect("ids is ragged");
        let in_batch = (lengths[lengths.len() - 1] - lengths[0]) as u64;
        batches += 1;
        tokens += in_batch;
        most = most.max(in_batch);
        // A single document longer than the budget is a batch of its own.
        if in_batch > a.max_tokens && d.batch.len() > 1 {
            over += 1;
        }
        for id in d.batch.i64("id")?.iter() {
            if !seen[d.pass as usize].insert(*id) {
                return Err(format!("document {id} twice in pass {}", d.pass).into());
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    for (pass, ids) in seen.iter().enumerate() {
        if ids.len() as u64 != a.docs {
            return Err(format!("pass {pass}: {} documents of {}", ids.len(), a.docs).into());
        }
    }
    println!(
        "{} passes: every one of {} documents once per pass, in {batches} batches",
        a.passes, a.docs
    );
    println!(
        "tokens per batch: mean {:.0}, most {most}, budget {} ({} batches over it with more than one document)",
        tokens as f64 / batches.max(1) as f64,
        a.max_tokens,
        over
    );
    println!(
        "{:.0} documents/s, {:.0} tokens/s with {} readers tokenizing",
        (a.docs * a.passes) as f64 / secs,
        tokens as f64 / secs,
        a.readers
    );
    if over > 0 {
        return Err(format!("{over} batches over the token budget").into());
    }
    Ok(())
}
