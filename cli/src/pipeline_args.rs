//! The pipeline's flags, shared by `run` and `bench` (and the peers
//! harness adapter in `benches/`), translated into the pipeline settings:
//! every number has a stated range (a value outside it is refused by clap,
//! by name, value and range); every rule across settings is the settings'
//! own ([`PipelineConfig::check`]), whose sentence the command prints with
//! the settings spelled as its flags ([`Flags`]).

use feedline_actors::{
    Autotune, Batching, Faults, Feeding, FixedSettings, Inputs, Monitoring, Order, Reading,
    ShuffleMode, Tuning,
};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, ValueEnum};
use feedline::batch_policy::BatchPolicy;
use feedline::format::{Compression, OpenOptions};
use feedline::plan::{Equalize, Shard};
use feedline::transform::InstanceMap;
use feedline::Schema;
use feedline_actors::{ErrorPolicy, FileSet, Given, PipelineConfig, PipelineError};

use crate::error::{CliError, CliResult};
use crate::flags::Flags;

/// Most prefetch readers (one OS thread each), in all and per `--set`.
pub const MAX_READERS: u64 = 256;
/// Most devices (one OS thread each) a run simulates.
pub const MAX_DEVICES: u64 = 256;
/// Most transform workers (one OS thread each).
pub const MAX_WORKERS: u64 = 256;
/// Longest simulated step or consumer pause, milliseconds (an hour).
pub const MAX_MILLIS: f64 = 3_600_000.0;

/// A whole number in `min..=max`; clap's error names the flag, the value
/// and the range ("0 is not in 1..=256").
pub fn count(min: u64, max: u64) -> impl TypedValueParser<Value = usize> {
    clap::value_parser!(u64)
        .range(min..=max)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Milliseconds in `0..=MAX_MILLIS` (no NaN, no infinity, not negative).
pub fn millis(text: &str) -> Result<Duration, String> {
    let ms: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("not a number of milliseconds (expected 0..={MAX_MILLIS})"))?;
    if !(ms.is_finite() && (0.0..=MAX_MILLIS).contains(&ms)) {
        return Err(format!("{ms} is not in 0..={MAX_MILLIS} (milliseconds)"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// A refused setting as the command says it (exit code 2); any other
/// pipeline error as it is.
pub fn refused(e: PipelineError) -> CliError {
    match e {
        PipelineError::Config(e) => CliError::usage(Flags::say(&e)),
        e => CliError::Pipeline(e),
    }
}

/// How files are read: their format and compression.
#[derive(Args, Clone, Debug)]
pub struct FormatArgs {
    /// Format of every file (default: from a FORMAT: prefix or the extension).
    #[arg(long)]
    pub format: Option<String>,
    /// Compression: none, gzip or zlib (default: from the extension).
    #[arg(long)]
    pub compression: Option<String>,
}

impl FormatArgs {
    /// The open options these flags ask for.
    pub fn open_options(&self) -> CliResult<OpenOptions> {
        let mut opts = OpenOptions::default();
        if let Some(c) = &self.compression {
            opts.compression = Some(Compression::parse(c)?);
        }
        Ok(opts)
    }
}

/// A local cache directory for remote inputs (`--cache-dir`,
/// `--cache-max-bytes`), shared by `run`, `bench` and `cat`.
#[derive(Args, Clone, Debug)]
pub struct RemoteCacheArgs {
    /// Keep remote inputs (s3://, gs://, http(s)://) in this directory after
    /// their first whole read; later passes and runs read the local copy
    /// while the object is unchanged (same size and ETag). Needs
    /// --cache-max-bytes. Default: $FEEDLINE_REMOTE_CACHE_DIR, else none.
    #[arg(long, value_name = "DIR", requires = "cache_max_bytes")]
    pub cache_dir: Option<PathBuf>,
    /// The cache directory's bound in bytes, ≥ 1: the least recently used
    /// objects are evicted to stay within it.
    #[arg(long, value_name = "N", requires = "cache_dir",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub cache_max_bytes: Option<u64>,
}

impl RemoteCacheArgs {
    /// The cache these flags ask for.
    pub fn cache(&self) -> Option<feedline::remote::cache::RemoteCache> {
        let (dir, max) = (self.cache_dir.as_ref()?, self.cache_max_bytes?);
        Some(feedline::remote::cache::RemoteCache::new(dir, max))
    }

    /// Make the flags' cache the process's (every remote read of the
    /// command goes through it, schema inference included).
    pub fn install(&self) -> CliResult<()> {
        let Some(cache) = self.cache() else {
            return Ok(());
        };
        let mut o = feedline::remote::options().map_err(|e| CliError::usage(e.to_string()))?;
        o.cache = Some(cache);
        feedline::remote::set_options(o);
        Ok(())
    }
}

/// What to do with a bad record (`--on-error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnError {
    /// Stop the run with the error (file, record, offset).
    Fail,
    /// Skip the record, count it and go on (see --max-bad).
    Skip,
}

/// Whether ranks are made to deliver as many batches (`--equalize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EqualizeArg {
    /// Each rank delivers what it has.
    Off,
    /// Every rank keeps as many instances as the smallest (with --pack: as
    /// many packed rows as the smallest rank's tokens fill; the rest dropped).
    Drop,
    /// Every rank repeats its own instances up to the largest (with --pack:
    /// padding rows up to the largest rank's rows plus 1 %; every document once).
    Pad,
}

/// The pipeline's knobs.
#[derive(Args, Clone, Debug)]
pub struct PipelineArgs {
    /// Input files, glob patterns or list files (@train.list); FORMAT: prefixes allowed.
    pub files: Vec<String>,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Schema file (JSON or TOML); default: inferred from the first file.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// Prefetch readers, 1..=256 (default: 2; with --set, each set gives its own).
    #[arg(long, value_parser = count(1, MAX_READERS))]
    pub readers: Option<usize>,
    /// A file set mixed with the others by weight, with its own readers, as
    /// NAME,WEIGHT,READERS,FILE[,FILE…] (files: paths, globs, @lists);
    /// repeat for each set, instead of FILES and --readers.
    #[arg(long = "set", value_name = "NAME,WEIGHT,READERS,FILES")]
    pub sets: Vec<String>,
    /// Batch size, 1..=1048576.
    #[arg(long, default_value_t = 256, value_parser = count(1, 1 << 20))]
    pub batch: usize,
    /// Shuffle pool in instances, 0..=1073741824 (0: no shuffle).
    #[arg(long, default_value_t = 10_000, value_parser = count(0, 1 << 30))]
    pub shuffle: usize,
    /// Instances held before the shuffle draws start, 1..=--shuffle (default: the pool size).
    #[arg(long, value_parser = count(1, 1 << 30))]
    pub min_pool: Option<usize>,
    /// Byte bound of the shuffle pool, MiB, 1..=1048576 (default: 256).
    #[arg(long, value_parser = count(1, 1 << 20))]
    pub shuffle_mib: Option<usize>,
    /// Seed of file order and shuffle.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Same batches on every run whatever the reader count and timing.
    #[arg(long)]
    pub deterministic: bool,
    /// How records are shuffled: `buffer` (a streaming pool of --shuffle
    /// records, the default), `global` (each pass an exact permutation of
    /// every record, read by position through a record index of every
    /// file; the same batches whatever the readers), `block` (the pass's
    /// files in a permuted order, in groups of 16, each group cut into
    /// blocks of about --shuffle records holding a slice of each of its
    /// files, each block permuted; read by position like `global`, a
    /// block's records of a file with one read).
    #[arg(long, default_value = "buffer", value_parser = parse_shuffle_mode)]
    pub shuffle_mode: ShuffleMode,
    /// Where `--shuffle-mode global` and `block` keep their record indexes (default:
    /// $XDG_CACHE_HOME/feedline/index or ~/.cache/feedline/index).
    #[arg(long)]
    pub index_dir: Option<PathBuf>,
    /// Feed-queue capacity in batches, 1..=1024.
    #[arg(long, default_value_t = 4, value_parser = count(1, 1024))]
    pub capacity: usize,
    /// Batches the batch maker holds at most — made side by side on the
    /// transform workers, or made and not yet in the feed queue —,
    /// 1..=1024 (default: enough for 16 rows per transform worker, at
    /// least 2). The batches do not depend on it.
    #[arg(long, value_parser = count(1, feedline_actors::MAX_BATCHES_IN_FLIGHT as u64))]
    pub batches_in_flight: Option<usize>,
    /// Drop each pass's last partial batch.
    #[arg(long)]
    pub drop_last: bool,
    /// Instances per chunk, 1..=1048576.
    #[arg(long, default_value_t = 1024, value_parser = count(1, 1 << 20))]
    pub chunk_records: usize,
    /// Byte bound of a chunk, MiB, 1..=4096 (a chunk ends at whichever bound it reaches first).
    #[arg(long, default_value_t = 1, value_parser = count(1, 4096))]
    pub chunk_mib: usize,
    /// Unacknowledged chunks per reader, 1..=1024 (default 2; given, --autotune leaves it).
    #[arg(long, value_parser = count(1, 1024))]
    pub chunks_in_flight: Option<usize>,
    /// Data-parallel rank, 0..=65535, below the world size (default: $RANK or 0).
    #[arg(long, value_parser = count(0, 65_535))]
    pub rank: Option<usize>,
    /// Data-parallel world size, 1..=65536 (default: $WORLD_SIZE or 1).
    #[arg(long, value_parser = count(1, 65_536))]
    pub world_size: Option<usize>,
    /// What to do with a bad record.
    #[arg(long, value_enum, default_value_t = OnError::Fail)]
    pub on_error: OnError,
    /// With --on-error skip: fail once more than N records were skipped.
    #[arg(long)]
    pub max_bad: Option<u64>,
    /// Same batch count on every rank.
    #[arg(long, value_enum, default_value_t = EqualizeArg::Off)]
    pub equalize: EqualizeArg,
    /// Skip CRC checks (says so in the output).
    #[arg(long)]
    pub no_checksums: bool,
    /// Check each TFRecord CRC as the record is read (default: a record whose
    /// large bytes are read straight into its batch is checked as those
    /// bytes are copied, so they are read once; with `--on-error skip` the
    /// readers always check as they read).
    #[arg(long, conflicts_with = "no_checksums")]
    pub crc_on_read: bool,
    #[command(flatten)]
    pub transform: TransformArgs,
    #[command(flatten)]
    pub pack: PackArgs,
    #[command(flatten)]
    pub cache: RemoteCacheArgs,
    /// Serve Prometheus metrics (OpenMetrics text) at
    /// http://HOST:PORT/metrics while it runs (default: none, no port
    /// opened); a port in use is an error naming it.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Tune, while it runs, the transform workers, batches in flight and
    /// chunks in flight not given — and choose the readers not given when
    /// it starts — within --cpus and --memory-budget (docs/autotune.md).
    #[arg(long)]
    pub autotune: bool,
    /// The autotuner's CPU budget, cores of CPU time: a reader or worker is
    /// added only while the process used less, each pool at most N threads
    /// (default: the cores this process may use); needs --autotune.
    #[arg(long, value_name = "N", value_parser = count(0, 1 << 20))]
    pub cpus: Option<usize>,
    /// The autotuner's memory budget, the stated in-flight bound: bytes, or
    /// with a unit (512MiB, 2GiB, 1.5GB; default: a quarter of the memory
    /// this process may use); needs --autotune.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_budget: Option<u64>,
}

/// A size: bytes (`1048576`), or a number with a unit — `KiB`, `MiB`,
/// `GiB`, `TiB` (powers of 1024), `KB`, `MB`, `GB`, `TB` (of 1000), `B`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
            "unknown unit {unit:?} in {text:?}: give bytes, or KiB, MiB, GiB, TiB, KB, MB, GB, TB"
        ))
        }
    };
    let bad = || format!("{text:?} is not a size (such as 512MiB or 2GiB)");
    if number.is_empty() {
        return Err(bad());
    }
    let bytes = match number.parse::<u64>() {
        Ok(n) => n.checked_mul(scale).ok_or_else(bad)?,
        Err(_) => {
            let x: f64 = number.parse().map_err(|_| bad())?;
            let b = x * scale as f64;
            if !b.is_finite() || b >= u64::MAX as f64 {
                return Err(bad());
            }
            b.round() as u64
        }
    };
    Ok(bytes)
}

/// Sequence packing (`--pack L`): each pass's documents packed into
/// batches of --batch rows of L tokens.
#[derive(Args, Clone, Debug)]
pub struct PackArgs {
    /// Pack each pass's documents (the ragged token field --pack-field,
    /// e.g. --tokenizer's `input_ids`) into rows of exactly L tokens, --batch
    /// rows a batch: `input_ids`, `segment_ids` (1, 2, … per document of a
    /// row, 0 on padding), `position_ids` (from 0 per document),
    /// `cu_seqlens`, `max_seqlen`. 1..=16777216.
    #[arg(long, value_name = "L", value_parser = count(1, feedline::pack::MAX_PACK_LENGTH as u64))]
    pub pack: Option<usize>,
    /// How documents go into rows: best-fit (the open row each fills most
    /// tightly), first-fit (the oldest it fits), concat (concatenate, then
    /// cut where rows end); needs --pack.
    #[arg(long, value_name = "POLICY", value_parser = clap::builder::PossibleValuesParser::new(feedline::pack::PackPolicy::NAMES))]
    pub pack_policy: Option<String>,
    /// Documents held in open rows at most (best-fit, first-fit),
    /// 1..=10000000 (default 1000); needs --pack; refused with
    /// --pack-policy concat (one row at a time: no window).
    #[arg(long, value_name = "W", value_parser = count(1, 10_000_000))]
    pub pack_window: Option<usize>,
    /// A document longer than L: split (pieces of L tokens, the rest packed),
    /// truncate (its first L tokens) or drop (best-fit, first-fit); needs
    /// --pack; refused with --pack-policy concat (it cuts every document
    /// where a row ends).
    #[arg(long, value_name = "HOW", value_parser = clap::builder::PossibleValuesParser::new(feedline::pack::LongDocs::NAMES))]
    pub long_docs: Option<String>,
    /// The ragged token field packed (default: input_ids); needs --pack.
    #[arg(long, value_name = "FIELD")]
    pub pack_field: Option<String>,
}

impl PackArgs {
    /// The packing these flags ask for, if any (what was given is in
    /// [`given`](Self::given), for the settings' check).
    pub fn pack(&self) -> CliResult<Option<feedline::pack::Pack>> {
        let Some(length) = self.pack else {
            return Ok(None);
        };
        let mut pack = feedline::pack::Pack::new(
            self.policy()?
                .unwrap_or(feedline::pack::PackPolicy::BestFit),
            length,
        );
        if let Some(w) = self.pack_window {
            pack = pack.window(w);
        }
        if let Some(l) = self.long_docs()? {
            pack = pack.long_docs(l);
        }
        if let Some(f) = &self.pack_field {
            pack = pack.field(f);
        }
        Ok(Some(pack))
    }

    fn policy(&self) -> CliResult<Option<feedline::pack::PackPolicy>> {
        (self.pack_policy.as_deref())
            .map(str::parse)
            .transpose()
            .map_err(CliError::usage)
    }

    fn long_docs(&self) -> CliResult<Option<feedline::pack::LongDocs>> {
        (self.long_docs.as_deref())
            .map(str::parse)
            .transpose()
            .map_err(CliError::usage)
    }

    /// The packing flags given (a default value given is still given).
    fn given(&self, g: &mut Given) -> CliResult<()> {
        g.pack_policy = self.policy()?;
        g.pack_window = self.pack_window;
        g.long_docs = self.long_docs()?;
        g.pack_field = self.pack_field.is_some();
        Ok(())
    }
}

/// The built-in image transforms (`--transform`), shared by `run`, `bench`
/// and `cat`.
#[derive(Args, Clone, Debug)]
pub struct TransformArgs {
    /// Decode and augment every image field (JPEG or PNG bytes) on the
    /// transform workers: a preset — `decode` (to u8 [H, W, 3] RGB, grey and
    /// palette images expanded as PIL's convert("RGB")), `imagenet-train`
    /// (decode, RandomResizedCrop 224, random horizontal flip, ImageNet
    /// mean/std to f32 [3, 224, 224]) or `imagenet-eval` — or a chain such as
    /// `decode,resize(256),center-crop(224),to-f32,chw` (steps: decode,
    /// random-resized-crop(SIZE[,scale=LO:HI][,ratio=LO:HI]), resize(N|HxW),
    /// center-crop(N|HxW), flip(P), to-f32, normalize(imagenet|mean=R:G:B,std=R:G:B),
    /// hwc, chw). Other fields pass through. Each instance's random draws
    /// come from (--seed, pass, file, record).
    #[arg(long, value_name = "SPEC")]
    pub transform: Option<String>,
    /// Transform workers (threads of their own, apart from the readers),
    /// 1..=256 (default: 2); needs --transform.
    #[arg(long, value_parser = count(1, MAX_WORKERS))]
    pub workers: Option<usize>,
    /// The most pixels (width × height) an image may have, 1..=2^40
    /// (default: PIL's 178956970): a larger one is a bad record naming its
    /// size, refused from its header before it is decoded. Each transform
    /// worker may hold about 14 bytes per pixel of this limit, which the
    /// stated memory bound counts; needs --transform.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    pub max_pixels: Option<u64>,
    /// Tokenize the text field --text-field of every document with this
    /// Hugging Face tokenizer.json, on the transform workers, into a ragged
    /// i32 field `input_ids` (the ids Python's tokenizers gives with
    /// `encode(text).ids`); instead of --transform.
    #[arg(long, value_name = "TOKENIZER_JSON")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// The text field --tokenizer reads (default: text).
    #[arg(long, value_name = "FIELD")]
    pub text_field: Option<String>,
    /// Append the tokenizer's EOS token (<|endoftext|>, </s>, <eos>, …) to
    /// every document; needs --tokenizer.
    #[arg(long)]
    pub add_eos: bool,
    /// Put the tokenizer's BOS token (<s>, <bos>, …) first in every
    /// document; needs --tokenizer.
    #[arg(long)]
    pub add_bos: bool,
}

impl TransformArgs {
    /// The image transform these flags ask for, if any (a spec that does
    /// not parse is refused with where and what).
    pub fn image_transform(&self) -> CliResult<Option<feedline_vision::ImageTransform>> {
        self.given()
            .check_transforms()
            .map_err(|e| CliError::usage(Flags::say(&e)))?;
        let Some(spec) = &self.transform else {
            return Ok(None);
        };
        let image =
            feedline_vision::ImageTransform::parse(spec, feedline_vision::ImageFields::Detect)
                .map_err(|e| CliError::usage(format!("--transform: {e}")))?;
        Ok(Some(match self.max_pixels {
            Some(n) => image.max_pixels(n),
            None => image,
        }))
    }

    /// The tokenizing stage these flags ask for (`--tokenizer`,
    /// `--text-field`, `--add-eos`, `--add-bos`), if any: the tokenizer file
    /// loaded and checked (a missing or bad one refused naming it). `run`,
    /// `bench` and `cat` tokenize through it alike.
    pub fn tokenize(&self) -> CliResult<Option<std::sync::Arc<dyn InstanceMap>>> {
        let Some(path) = &self.tokenizer else {
            return Ok(None);
        };
        #[cfg(not(feature = "tokenize"))]
        {
            Err(CliError::usage(format!(
                "--tokenizer {}: tokenizing is not compiled in: enable the `tokenize` feature",
                path.display()
            )))
        }
        #[cfg(feature = "tokenize")]
        {
            use feedline::tokenize::{Tokenize, Tokenizer};
            let bad =
                |e: feedline::tokenize::TokenizeError| CliError::usage(format!("--tokenizer: {e}"));
            let field = self.text_field.as_deref().unwrap_or("text");
            let stage = Tokenize::new(Tokenizer::from_file(path).map_err(bad)?, field)
                .add_eos(self.add_eos)
                .map_err(bad)?
                .add_bos(self.add_bos)
                .map_err(bad)?;
            stage.check().map_err(bad)?;
            Ok(Some(std::sync::Arc::new(stage)))
        }
    }

    /// The transform flags given, for the settings' check.
    pub fn given(&self) -> Given {
        Given {
            tokenizer: self.tokenizer.is_some(),
            transform: self.transform.is_some(),
            max_pixels: self.max_pixels,
            workers: self.workers,
            text_field: self.text_field.is_some(),
            add_eos: self.add_eos,
            add_bos: self.add_bos,
            ..Given::default()
        }
    }

    /// The transforms of the pipeline settings.
    pub fn transforms(&self) -> CliResult<feedline::transform::Transforms> {
        let mut t = feedline::transform::Transforms::default();
        if let Some(image) = self.image_transform()? {
            t.instance = Some(std::sync::Arc::new(image));
            t.workers = self.workers.unwrap_or(t.workers);
        }
        if let Some(stage) = self.tokenize()? {
            t.instance = Some(stage);
            t.workers = self.workers.unwrap_or(t.workers);
        }
        Ok(t)
    }
}

impl PipelineArgs {
    /// The pipeline settings these flags ask for, every combination
    /// checked: one pass, one device (the caller sets what it runs).
    pub fn config(&self) -> CliResult<PipelineConfig> {
        let defaults = PipelineConfig::default();
        let error_policy = match self.on_error {
            OnError::Fail => ErrorPolicy::Fail,
            OnError::Skip => ErrorPolicy::Skip {
                max_bad: self.max_bad,
                max_bad_fraction: None,
            },
        };
        self.cache.install()?;
        let mut open = self.format.open_options()?;
        open.verify_checksums = !self.no_checksums;
        open.defer_checksums = !self.crc_on_read;
        let sets = self
            .sets
            .iter()
            .map(|s| parse_set(s))
            .collect::<CliResult<Vec<_>>>()?;
        let config = {
            let base = PipelineConfig::default();
            PipelineConfig {
                inputs: Inputs {
                    files: self.files.clone(),
                    sets,
                    format: self.format.format.clone(),
                    schema: self.schema.as_ref().map(Schema::from_file).transpose()?,
                    shard: self.shard()?,
                    ..base.inputs
                },
                reading: Reading {
                    open,
                    readers: self.readers.unwrap_or(defaults.reading.readers),
                    chunk_records: self.chunk_records,
                    chunk_bytes: self.chunk_mib << 20,
                    chunks_in_flight: (self.chunks_in_flight)
                        .unwrap_or(defaults.reading.chunks_in_flight),
                    remote_cache: self.cache.cache(),
                    index_dir: self.index_dir.clone(),
                },
                order: Order {
                    shuffle: self.shuffle,
                    min_pool: self.min_pool,
                    shuffle_bytes: self
                        .shuffle_mib
                        .map_or(defaults.order.shuffle_bytes, |m| m << 20),
                    seed: self.seed,
                    deterministic: self.deterministic,
                    shuffle_mode: self.shuffle_mode,
                    ..base.order
                },
                batching: Batching {
                    batch: BatchPolicy::Fixed(self.batch),
                    drop_last: self.drop_last,
                    batches_in_flight: self.batches_in_flight,
                    equalize: match self.equalize {
                        EqualizeArg::Off => Equalize::Off,
                        EqualizeArg::Drop => Equalize::Drop,
                        EqualizeArg::Pad => Equalize::Pad,
                    },
                    pack: self.pack.pack()?,
                },
                feeding: Feeding {
                    capacity: self.capacity,
                    ..base.feeding
                },
                faults: Faults {
                    error_policy,
                    ..base.faults
                },
                transforms: self.transform.transforms()?,
                monitoring: Monitoring {
                    metrics_addr: self.metrics_addr.clone(),
                },
                tuning: Tuning {
                    autotune: self.autotune.then_some(Autotune {
                        cpus: self.cpus,
                        memory_budget: self.memory_budget,
                    }),
                    fixed: FixedSettings {
                        readers: self.readers.is_some(),
                        workers: self.transform.workers.is_some(),
                        chunks_in_flight: self.chunks_in_flight.is_some(),
                        shuffle_bytes: self.shuffle_mib.is_some(),
                    },
                    ..base.tuning
                },
                given: self.given()?,
                ..base
            }
        };
        config.check().map_err(refused)?;
        Ok(config)
    }

    /// The flags given that the settings' values cannot tell, for the
    /// settings' check.
    fn given(&self) -> CliResult<Given> {
        let mut g = Given {
            readers: self.readers,
            shuffle_bytes: self.shuffle_mib.map(|m| m << 20),
            max_bad: self.max_bad,
            cpus: self.cpus,
            memory_budget: self.memory_budget,
            ..self.transform.given()
        };
        self.pack.given(&mut g)?;
        Ok(g)
    }

    /// This process's shard: the flags, each one not given from $RANK /
    /// $WORLD_SIZE, else 0 / 1 (the one rule, [`shard_given`], its refusal
    /// in the command's words).
    fn shard(&self) -> CliResult<Shard> {
        Ok(feedline_actors::shard_given(self.rank, self.world_size)
            .map_err(|e| CliError::usage(Flags::say(&e)))?
            .unwrap_or_default())
    }
}

/// `NAME,WEIGHT,READERS,FILE[,FILE…]` of `--set`.
/// `--shuffle-mode`: buffer, global or block.
fn parse_shuffle_mode(s: &str) -> Result<ShuffleMode, String> {
    s.parse()
}

fn parse_set(spec: &str) -> CliResult<FileSet> {
    let bad = |what: String| {
        CliError::usage(format!(
            "--set {spec:?}: {what} (expected NAME,WEIGHT,READERS,FILES)"
        ))
    };
    let mut parts = spec.split(',');
    let name = parts
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("no name".into()))?;
    let weight_text = parts.next().unwrap_or("").trim();
    let weight: f64 = weight_text
        .parse()
        .map_err(|_| bad(format!("WEIGHT {weight_text:?} is not a number")))?;
    if !(weight.is_finite() && weight > 0.0) {
        return Err(bad(format!(
            "WEIGHT {weight_text} must be a positive finite number"
        )));
    }
    let readers_text = parts.next().unwrap_or("").trim();
    let readers = readers_text
        .parse::<u64>()
        .ok()
        .filter(|r| (1..=MAX_READERS).contains(r))
        .ok_or_else(|| {
            bad(format!(
                "READERS {readers_text:?} is not in 1..={MAX_READERS}"
            ))
        })?;
    let files: Vec<String> = parts.filter(|f| !f.is_empty()).map(String::from).collect();
    if files.is_empty() {
        return Err(bad("no files".into()));
    }
    Ok(FileSet::new(name, files)
        .readers(readers as usize)
        .weight(weight))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults the help states for flags left to the library are the library's.
    #[test]
    fn stated_defaults_are_the_librarys() {
        let d = PipelineConfig::default();
        assert_eq!(d.reading.readers, 2, "--readers says (default: 2)");
        assert_eq!(
            d.order.shuffle_bytes,
            256 << 20,
            "--shuffle-mib says (default: 256)"
        );
    }

    #[test]
    fn sizes_take_bytes_and_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("300mib"), Ok(300 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64 KiB"), Ok(64 << 10));
        for bad in [
            "",
            "MiB",
            "2XB",
            "-1GiB",
            "1e3",
            "99999999999TiB",
            "1.2.3MiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn millis_takes_a_range_of_finite_milliseconds() {
        assert_eq!(millis("2.5"), Ok(Duration::from_micros(2500)));
        assert_eq!(millis("0"), Ok(Duration::ZERO));
        for bad in ["inf", "-inf", "NaN", "-0.5", "3600001", "1e300", "x", ""] {
            assert!(millis(bad).is_err(), "{bad}");
        }
    }
}
