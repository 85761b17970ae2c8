//! The reference dataset generator behind `feedline gen`: TFRecord files of
//! `tf.train.Example`s in two presets, deterministic for a seed.
//!
//! | preset | files × records | features | schema |
//! |---|---|---|---|
//! | `small` | 32 × 32,768 | `x`: 64 floats ~ N(0, 1), `y`: one int64 in [0, 1000) | `x: f32 [64]`, `y: i64 [1]` |
//! | `large` | 16 × 512 | `image`: ONE bytes value of 150,528 random bytes, `label`: one int64 in [0, 1000) | `image: u8 [150528]`, `label: i64 [1]` |
//!
//! File `i` of `n` is `PRESET-iiiii-of-nnnnn.tfrecord`; its records come from
//! a `ChaCha8Rng` seeded from `(seed, preset, i)` only, so a file's bytes do
//! not depend on how many files or threads there are. Files are written in
//! parallel (rayon), each record encoded into one reused buffer.
//!
//! ```
//! use feedline::synthetic::{generate, preset_schema, GenOptions, Preset};
//! let dir = tempfile::tempdir().unwrap();
//! let mut opts = GenOptions::new(Preset::Small, dir.path());
//! opts.files = Some(2);
//! opts.records = Some(10);
//! let paths = generate(&opts).unwrap();
//! assert_eq!(paths.len(), 2);
//! assert!(paths[0].ends_with("small-00000-of-00002.tfrecord"));
//! assert_eq!(preset_schema(Preset::Small).len(), 2);
//! ```

use std::f64::consts::TAU;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::example::{encode_features_into, FeatureRef};
use crate::format::tfrecord::TfRecordWriter;
use crate::format::Compression;
use crate::schema::{DType, Schema};

/// Elements of the small preset's `x`.
pub const SMALL_X_LEN: usize = 64;
/// Bytes of the large preset's `image` (224 × 224 × 3).
pub const LARGE_IMAGE_BYTES: usize = 150_528;
/// Number of classes of `y` / `label`.
pub const NUM_CLASSES: i64 = 1000;

/// A reference workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Many small records (64 floats and a label: a 287-byte Example, 303 bytes framed).
    Small,
    /// Few large records (an image of 150,528 bytes and a label).
    Large,
}

impl Preset {
    /// `"small"` or `"large"`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Large => "large",
        }
    }

    /// Files the preset has by default.
    pub fn default_files(self) -> usize {
        match self {
            Preset::Small => 32,
            Preset::Large => 16,
        }
    }

    /// Records per file by default.
    pub fn default_records(self) -> usize {
        match self {
            Preset::Small => 32_768,
            Preset::Large => 512,
        }
    }

    fn id(self) -> u64 {
        match self {
            Preset::Small => 1,
            Preset::Large => 2,
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "small" => Ok(Preset::Small),
            "large" => Ok(Preset::Large),
            other => Err(Error::Config(format!(
                "unknown preset `{other}` (expected small or large)"
            ))),
        }
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenOptions {
    /// Which workload.
    pub preset: Preset,
    /// Directory for the files (created if missing).
    pub out_dir: PathBuf,
    /// Number of files; `None`: the preset's.
    pub files: Option<usize>,
    /// Records per file; `None`: the preset's.
    pub records: Option<usize>,
    /// Seed of the values.
    pub seed: u64,
}

impl GenOptions {
    /// The preset's defaults, seed 0, into `out_dir`.
    pub fn new(preset: Preset, out_dir: impl AsRef<Path>) -> Self {
        GenOptions {
            preset,
            out_dir: out_dir.as_ref().to_path_buf(),
            files: None,
            records: None,
            seed: 0,
        }
    }
}

/// The schema that reads a preset's files.
pub fn preset_schema(preset: Preset) -> Schema {
    let b = Schema::builder();
    match preset {
        Preset::Small => b
            .field("x", DType::F32, [SMALL_X_LEN])
            .field("y", DType::I64, [1]),
        Preset::Large => {
            b.field("image", DType::U8, [LARGE_IMAGE_BYTES])
                .field("label", DType::I64, [1])
        }
    }
    .build()
    .expect("preset schemas are valid")
}

/// Name of file `index` of `files`: `PRESET-iiiii-of-nnnnn.tfrecord`.
pub fn file_name(preset: Preset, index: usize, files: usize) -> String {
    format!("{}-{index:05}-of-{files:05}.tfrecord", preset.name())
}

/// The random generator of file `index`: ChaCha8 seeded from `(seed, preset, index)`.
fn file_rng(preset: Preset, seed: u64, index: usize) -> ChaCha8Rng {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s[8..16].copy_from_slice(&preset.id().to_le_bytes());
    s[16..24].copy_from_slice(&(index as u64).to_le_bytes());
    s[24..].copy_from_slice(b"feedline");
    ChaCha8Rng::from_seed(s)
}

/// Fill `out` with N(0, 1) samples (Box–Muller).
fn fill_normal(rng: &mut ChaCha8Rng, out: &mut [f32]) {
    for pair in out.chunks_mut(2) {
        let u1 = 1.0 - rng.gen::<f64>(); // (0, 1]: ln is finite
        let u2 = rng.gen::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (TAU * u2).sin_cos();
        pair[0] = (r * c) as f32;
        if let Some(x) = pair.get_mut(1) {
            *x = (r * s) as f32;
        }
    }
}

/// Write file `index`'s `records` records of `preset` (uncompressed
/// TFRecord) to `w`; gives `w` back, flushed.
pub fn write_file<W: Write>(
    preset: Preset,
    seed: u64,
    index: usize,
    records: usize,
    w: W,
) -> io::Result<W> {
    let mut rng = file_rng(preset, seed, index);
    let mut writer = TfRecordWriter::new(w, Compression::None);
    let mut payload = Vec::new();
    match preset {
        Preset::Small => {
            let mut x = [0f32; SMALL_X_LEN];
            for _ in 0..records {
                fill_normal(&mut rng, &mut x);
                let y = [rng.gen_range(0..NUM_CLASSES)];
                payload.clear();
                encode_features_into(
                    &mut [("x", FeatureRef::F32(&x)), ("y", FeatureRef::I64(&y))],
                    &mut payload,
                );
                writer.write_record(&payload)?;
            }
        }
        Preset::Large => {
            let mut image = vec![0u8; LARGE_IMAGE_BYTES];
            for _ in 0..records {
                rng.fill_bytes(&mut image);
                let label = [rng.gen_range(0..NUM_CLASSES)];
                payload.clear();
                encode_features_into(
                    &mut [
                        ("image", FeatureRef::OneBytes(&image)),
                        ("label", FeatureRef::I64(&label)),
                    ],
                    &mut payload,
                );
                writer.write_record(&payload)?;
            }
        }
    }
    writer.finish()
}

/// File `index`'s bytes in memory (for benchmarks and tests).
pub fn file_bytes(preset: Preset, seed: u64, index: usize, records: usize) -> Vec<u8> {
    write_file(preset, seed, index, records, Vec::new()).expect("writing to a Vec cannot fail")
}

/// Write the preset's files into `opts.out_dir` (in parallel) and return
/// their paths in file order.
pub fn generate(opts: &GenOptions) -> Result<Vec<PathBuf>> {
    let files = opts.files.unwrap_or(opts.preset.default_files());
    let records = opts.records.unwrap_or(opts.preset.default_records());
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| Error::io(&opts.out_dir, e))?;
    log::info!(
        "generating {files} {} files of {records} records into {}",
        opts.preset,
        opts.out_dir.display()
    );
    (0..files)
        .into_par_iter()
        .map(|i| {
            let path = opts.out_dir.join(file_name(opts.preset, i, files));
            let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
            let w = io::BufWriter::with_capacity(1 << 20, file);
            write_file(opts.preset, opts.seed, i, records, w)
                .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
                .map_err(|e| Error::io(&path, e))?;
            Ok(path)
        })
        .collect()
}
