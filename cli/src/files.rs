//! `cat`, `inspect` and `gen`: the commands that look at files and write them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use feedline::format::Registry;
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline::transform::{InstanceMap, Row, TransformCtx};
use feedline::{Chunk, Dim, Record, Schema};
use feedline_actors::SCHEMA_SAMPLE_RECORDS;
use serde_json::json;

use crate::error::{CliError, CliResult};
use crate::output::{Stderr, Stdout};
use crate::pipeline_args::{count, FormatArgs, RemoteCacheArgs, TransformArgs};

#[derive(Args)]
pub struct CatArgs {
    /// Files to print, in order (a FORMAT: prefix picks the format).
    #[arg(required = true)]
    paths: Vec<String>,
    #[command(flatten)]
    format: FormatArgs,
    /// Print at most N instances in all.
    #[arg(long)]
    limit: Option<u64>,
    /// With --transform: the seed of the transforms' random draws (each
    /// instance's from this seed, pass 0, its file and record, as `run --seed`).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    transform: TransformArgs,
    #[command(flatten)]
    cache: RemoteCacheArgs,
}

/// `record` through an instance map — `--transform`'s (its image fields
/// decoded and augmented, the others as they are) or `--tokenizer`'s (its
/// text field's token ids, `input_ids`) — what the model would see of it,
/// in pass 0, as `run` makes it.
fn transformed(map: &dyn InstanceMap, record: &Record, seed: u64) -> CliResult<Record> {
    let schema = Schema::infer([record])?;
    let mut chunk = Chunk::new(&schema);
    chunk.push_record(record)?;
    let origin = chunk.origins()[0];
    let mut ctx = TransformCtx::new(seed, 0, origin);
    let sample =
        map.map(&Row::new(&chunk, 0), &mut ctx)
            .map_err(|e| feedline::Error::Transform {
                location: record.location.clone(),
                transform: map.name(),
                what: e.to_string(),
            })?;
    Ok(sample.into_record(record.location.clone()))
}

/// The paths given to `cat` and `inspect`, with WebDataset brace ranges
/// (`shard-{000..009}.tar`, `{a,b}`) expanded in place, for local paths and
/// URLs alike, and dataset directories (a Hugging Face `save_to_disk`
/// directory, an MDS directory, also as `arrow:DIR`, `mds:DIR`) as the
/// files they name, in order; a file that exists as written is kept as it is.
fn expand_brace_args(paths: &[String]) -> CliResult<Vec<String>> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let path = std::path::Path::new(p);
        let dir = path.is_dir()
            || (!path.exists()
                && p.split_once(':')
                    .is_some_and(|(_, rest)| std::path::Path::new(rest).is_dir()));
        if dir || (p.contains('{') && !path.exists()) {
            out.extend(feedline::plan::expand_inputs(std::slice::from_ref(p))?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

pub fn cat(mut args: CatArgs) -> CliResult<ExitCode> {
    args.cache.install()?;
    args.paths = expand_brace_args(&args.paths)?;
    let registry = Registry::with_builtin();
    let opts = args.format.open_options()?;
    let mut out = Stdout::new();
    let mut printed = 0u64;
    if args.transform.workers.is_some() {
        return Err(CliError::usage(
            "--workers does not apply to cat (it prints instances in file order, on one thread)",
        ));
    }
    // Every flag checked before a file is read; the tokenizer loaded once.
    args.transform.image_transform()?;
    let tokenize = args.transform.tokenize()?;
    for path in &args.paths {
        let mut reader = registry.open(path, args.format.format.as_deref(), &opts)?;
        // Image fields are detected in each file's first record.
        let image = args.transform.image_transform()?;
        let map: Option<&dyn InstanceMap> = match (&image, &tokenize) {
            (Some(t), _) => Some(t),
            (None, Some(t)) => Some(t.as_ref()),
            (None, None) => None,
        };
        while args.limit.is_none_or(|l| printed < l) {
            match reader.next_record()? {
                Some(rec) => {
                    let rec = match map {
                        Some(t) => transformed(t, &rec, args.seed)?,
                        None => rec,
                    };
                    // Streamed: a decoded image is never a JSON tree (32
                    // bytes per element) or one string.
                    out.write_with(|w| rec.write_json(w))?;
                    writeln!(out)?;
                    printed += 1;
                }
                None => break,
            }
        }
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct InspectArgs {
    /// Files to inspect (each is reported, whatever the others hold).
    #[arg(required = true)]
    paths: Vec<String>,
    #[command(flatten)]
    format: FormatArgs,
    /// Machine-readable output: one JSON object.
    #[arg(long)]
    json: bool,
}

/// What the records of a file held in one field, beyond its schema.
#[derive(serde::Serialize)]
struct Observed {
    /// Fewest and most values in a record.
    min_values: usize,
    max_values: usize,
    /// Records that have the field.
    records: u64,
}

/// One file's report.
#[derive(serde::Serialize)]
struct FileReport {
    path: String,
    format: Option<String>,
    records: u64,
    /// File size; `None` for a stream (a pipe, a FIFO, a device).
    bytes: Option<u64>,
    /// The schema a loader would use for this file, in the schema-file
    /// format: the file's own (Parquet), or else inferred from its first
    /// records, as `Loader` does.
    schema: Option<Schema>,
    /// The schema is the file's own, not inferred from records.
    schema_declared: bool,
    /// Per field: what every record read held.
    observed: BTreeMap<String, Observed>,
    /// The first record that does not fit the schema.
    does_not_fit: Option<String>,
    /// Every record read and every checksum held.
    checksums_ok: bool,
    /// Why the file could not be read to its end.
    error: Option<String>,
}

impl FileReport {
    fn failed(&self) -> bool {
        self.error.is_some() || self.does_not_fit.is_some()
    }
}

pub fn inspect(mut args: InspectArgs) -> CliResult<ExitCode> {
    args.paths = expand_brace_args(&args.paths)?;
    let registry = Registry::with_builtin();
    let opts = args.format.open_options()?;
    let reports: Vec<FileReport> = (args.paths.iter())
        .map(|path| inspect_file(&registry, path, args.format.format.as_deref(), &opts))
        .collect();
    let mut out = Stdout::new();
    if args.json {
        let text = serde_json::to_string_pretty(&json!({ "files": reports })).unwrap_or_default();
        writeln!(out, "{text}")?;
    } else {
        for r in &reports {
            print_report(r, &mut out)?;
        }
    }
    out.finish()?;
    Ok(if reports.iter().any(FileReport::failed) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Read one file to its end, once (a stream — a pipe, a FIFO — can be read
/// only once): its schema as a loader infers it, what its records hold,
/// whether they fit that schema, and the first error.
fn inspect_file(
    registry: &Registry,
    path: &str,
    format: Option<&str>,
    opts: &feedline::format::OpenOptions,
) -> FileReport {
    let mut insp = Inspection {
        report: FileReport {
            path: path.to_string(),
            format: None,
            records: 0,
            bytes: None,
            schema: None,
            schema_declared: false,
            observed: BTreeMap::new(),
            does_not_fit: None,
            checksums_ok: false,
            error: None,
        },
        sample: Vec::new(),
        fit: None,
        format: None,
    };
    let result = (|| -> feedline::Result<()> {
        let (fmt, bare, _) = registry.resolve(path, format)?;
        insp.report.format = Some(fmt.name().to_string());
        insp.format = Some(fmt.clone());
        // As a loader: a file that declares its schema (a Parquet file's
        // list columns are ragged whatever the first rows hold) is read
        // with it, not with one inferred from its first records.
        if let Some(declared) = fmt.infer_schema(&bare) {
            insp.declared(declared?);
        }
        insp.report.bytes = match bare.to_str().filter(|b| feedline::remote::is_remote(b)) {
            Some(url) => Some(
                feedline::remote::stat(url)
                    .map_err(|e| feedline::Error::io(&bare, e.into_io()))?
                    .0,
            ),
            None => {
                let meta = std::fs::metadata(&bare).map_err(|e| feedline::Error::io(&bare, e))?;
                meta.is_file().then_some(meta.len())
            }
        };
        let mut reader = registry.open(path, format, opts)?;
        let read = (|| {
            while let Some(rec) = reader.next_record()? {
                insp.take(rec)?;
            }
            Ok(())
        })();
        // As a loader's inference: a bad record ends the sample, the
        // records before it are used.
        let settled = insp.settle();
        read.and(settled)
    })();
    match result {
        Ok(()) => insp.report.checksums_ok = true,
        Err(e) => insp.report.error = Some(e.to_string()),
    }
    insp.report
}

/// One file being read: its report so far, the first records (the sample
/// a loader infers its schema from, [`SCHEMA_SAMPLE_RECORDS`] of them, by
/// the same inference, the format's [`Format::infer_from_records`](feedline::format::Format::infer_from_records)) — or, for
/// a file that declares its schema ([`Format::infer_schema`](feedline::format::Format::infer_schema): Parquet), no
/// sample — then every record checked against that schema as a loader's
/// chunks check it.
struct Inspection {
    report: FileReport,
    sample: Vec<Record>,
    fit: Option<Chunk>,
    /// The file's format, whose inference from the sample the loader uses.
    format: Option<std::sync::Arc<dyn feedline::format::Format>>,
}

impl Inspection {
    /// Count and observe one record; infer the schema once the sample is full.
    fn take(&mut self, rec: Record) -> feedline::Result<()> {
        self.report.records += 1;
        for (name, t) in &rec.fields {
            let n = t.values.len();
            let o = self
                .report
                .observed
                .entry(name.clone())
                .or_insert(Observed {
                    min_values: n,
                    max_values: n,
                    records: 0,
                });
            o.min_values = o.min_values.min(n);
            o.max_values = o.max_values.max(n);
            o.records += 1;
        }
        if self.fit.is_some() {
            self.check(&rec);
            return Ok(());
        }
        self.sample.push(rec);
        if self.sample.len() == SCHEMA_SAMPLE_RECORDS {
            self.settle()?;
        }
        Ok(())
    }

    /// Use the schema the file declares: every record is checked against
    /// it, none is kept as a sample.
    fn declared(&mut self, schema: Schema) {
        self.fit = Some(Chunk::new(&schema));
        self.report.schema = Some(schema);
        self.report.schema_declared = true;
    }

    /// Infer the schema from the sample (if not yet done and there is one)
    /// and check the sample's records against it.
    fn settle(&mut self) -> feedline::Result<()> {
        if self.fit.is_some() || self.sample.is_empty() {
            return Ok(());
        }
        let schema = match &self.format {
            Some(f) => f.infer_from_records(&self.sample)?,
            None => Schema::infer(&self.sample)?,
        };
        self.fit = Some(Chunk::new(&schema));
        self.report.schema = Some(schema);
        for rec in std::mem::take(&mut self.sample) {
            self.check(&rec);
        }
        Ok(())
    }

    /// Note the first record that does not fit the schema.
    fn check(&mut self, rec: &Record) {
        let (Some(chunk), None) = (&mut self.fit, &self.report.does_not_fit) else {
            return;
        };
        if chunk.len() >= 1024 {
            chunk.clear();
        }
        if let Err(e) = chunk.push_record(rec) {
            self.report.does_not_fit = Some(e.to_string());
        }
    }
}

fn print_report(r: &FileReport, out: &mut Stdout) -> CliResult<()> {
    let bytes = r
        .bytes
        .map_or_else(|| "a stream".to_string(), |b| format!("{b} bytes"));
    writeln!(
        out,
        "{} ({}): {} records, {bytes}",
        r.path,
        r.format.as_deref().unwrap_or("format unknown"),
        r.records
    )?;
    if let Some(schema) = &r.schema {
        for f in schema.fields() {
            let mut line = format!("  {}: {}", f.name, f.describe());
            if let Some(o) = r.observed.get(&f.name) {
                if f.shape.first() == Some(&Dim::Var) {
                    line.push_str(&format!(
                        " (ragged: {}..={} values per record)",
                        o.min_values, o.max_values
                    ));
                }
                if o.records < r.records {
                    line.push_str(&format!(" (in {} of {} records)", o.records, r.records));
                }
            }
            writeln!(out, "{line}")?;
        }
        if r.schema_declared {
            writeln!(
                out,
                "  (the schema this file declares, which a loader uses as it is)"
            )?;
        } else {
            writeln!(
                out,
                "  (the schema a loader infers from this file's first {SCHEMA_SAMPLE_RECORDS} records)"
            )?;
        }
    }
    if let Some(e) = &r.does_not_fit {
        if r.schema_declared {
            writeln!(out, "  DOES NOT FIT the schema the file declares: {e}")?;
        } else {
            writeln!(
                out,
                "  DOES NOT FIT the inferred schema: {e} (declare the field's shape in a --schema file)"
            )?;
        }
    }
    match &r.error {
        None => writeln!(out, "  every record read, every checksum held"),
        Some(e) => writeln!(out, "  BAD: {e}"),
    }
}

#[derive(Args)]
pub struct GenArgs {
    /// Which reference dataset: small (64 f32 + 1 i64 per record) or large (150,528-byte image + label).
    #[arg(long)]
    preset: Preset,
    /// Directory to write into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Number of files, 1..=65536 (default: 32 small, 16 large).
    #[arg(long, value_parser = count(1, 65_536))]
    files: Option<usize>,
    /// Records per file, 1..=16777216 (default: 32,768 small, 512 large).
    #[arg(long, value_parser = count(1, 1 << 24))]
    records: Option<usize>,
    /// Seed: the same seed writes the same bytes.
    #[arg(long, default_value_t = 20240601)]
    seed: u64,
}

pub fn gen(args: GenArgs) -> CliResult<ExitCode> {
    let start = std::time::Instant::now();
    let paths = generate(&GenOptions {
        preset: args.preset,
        out_dir: args.out,
        files: args.files,
        records: args.records,
        seed: args.seed,
    })?;
    let mut bytes = 0u64;
    for p in &paths {
        bytes += std::fs::metadata(p)
            .map_err(|source| CliError::File {
                path: p.clone(),
                source,
            })?
            .len();
    }
    writeln!(
        Stderr,
        "wrote {} files, {:.1} MB in {:.2} s",
        paths.len(),
        bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    )?;
    let mut out = Stdout::new();
    for p in paths {
        writeln!(out, "{}", p.display())?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
