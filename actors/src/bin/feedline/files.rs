//! `cat`, `inspect` and `gen`: the commands that look at files and write them.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use feedline::format::{Compression, OpenOptions, Registry};
use feedline::gen::{generate, GenOptions, Preset};

/// Anything that can fail with a message.
pub type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Args, Clone)]
pub struct FormatArgs {
    /// Format of every file (default: from a FORMAT: prefix or the extension).
    #[arg(long)]
    pub format: Option<String>,
    /// Compression: none, gzip or zlib (default: from the extension).
    #[arg(long)]
    pub compression: Option<String>,
}

impl FormatArgs {
    pub fn open_options(&self) -> AnyResult<OpenOptions> {
        let mut opts = OpenOptions::default();
        if let Some(c) = &self.compression {
            opts.compression = Some(Compression::parse(c)?);
        }
        Ok(opts)
    }
}

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
}

pub fn cat(args: CatArgs) -> AnyResult<ExitCode> {
    let registry = Registry::with_builtin();
    let opts = args.format.open_options()?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut printed = 0u64;
    for path in &args.paths {
        let mut reader = registry.open(path, args.format.format.as_deref(), &opts)?;
        while args.limit.is_none_or(|l| printed < l) {
            match reader.next_record()? {
                Some(rec) => {
                    serde_json::to_writer(&mut out, &rec.to_json())?;
                    out.write_all(b"\n")?;
                    printed += 1;
                }
                None => break,
            }
        }
    }
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r?,
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct InspectArgs {
    /// Files to inspect.
    #[arg(required = true)]
    paths: Vec<String>,
    #[command(flatten)]
    format: FormatArgs,
    /// Machine-readable output: one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct FieldReport {
    kind: String,
    min_len: usize,
    max_len: usize,
    records: u64,
}

#[derive(serde::Serialize)]
struct FileReport {
    path: String,
    format: String,
    records: u64,
    bytes: u64,
    fields: BTreeMap<String, FieldReport>,
    checksums_ok: bool,
    error: Option<String>,
}

pub fn inspect(args: InspectArgs) -> AnyResult<ExitCode> {
    let registry = Registry::with_builtin();
    let opts = args.format.open_options()?;
    let mut reports = Vec::new();
    let mut any_bad = false;
    for path in &args.paths {
        let (format, bare, _) = registry.resolve(path, args.format.format.as_deref())?;
        let bytes = std::fs::metadata(&bare)
            .map_err(|e| feedline::Error::io(&bare, e))?
            .len();
        let mut report = FileReport {
            path: path.clone(),
            format: format.name().to_string(),
            records: 0,
            bytes,
            fields: BTreeMap::new(),
            checksums_ok: true,
            error: None,
        };
        let mut reader = registry.open(path, args.format.format.as_deref(), &opts)?;
        loop {
            match reader.next_record() {
                Ok(Some(rec)) => {
                    report.records += 1;
                    for (name, t) in &rec.fields {
                        let n = t.values.len();
                        let f = report.fields.entry(name.clone()).or_insert(FieldReport {
                            kind: t.values.dtype().to_string(),
                            min_len: n,
                            max_len: n,
                            records: 0,
                        });
                        f.min_len = f.min_len.min(n);
                        f.max_len = f.max_len.max(n);
                        f.records += 1;
                        if f.kind != t.values.dtype().name() && !f.kind.contains('|') {
                            f.kind = format!("{}|{}", f.kind, t.values.dtype());
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    any_bad = true;
                    report.checksums_ok = false;
                    report.error = Some(e.to_string());
                    break;
                }
            }
        }
        reports.push(report);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "files": reports }))?;
        writeln!(out)?;
    } else {
        for r in &reports {
            writeln!(
                out,
                "{} ({}): {} records, {} bytes",
                r.path, r.format, r.records, r.bytes
            )?;
            for (name, f) in &r.fields {
                let shape = if f.min_len == f.max_len && f.records == r.records {
                    format!("[{}]", f.min_len)
                } else {
                    format!(
                        "[?] (length {}..={}, in {} records)",
                        f.min_len, f.max_len, f.records
                    )
                };
                writeln!(out, "  {name}: {} {shape}", f.kind)?;
            }
            match &r.error {
                None => writeln!(out, "  every record read, every checksum held")?,
                Some(e) => writeln!(out, "  BAD: {e}")?,
            }
        }
    }
    Ok(if any_bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[derive(Args)]
pub struct GenArgs {
    /// Which reference dataset: small (64 f32 + 1 i64 per record) or large (150,528-byte image + label).
    #[arg(long)]
    preset: Preset,
    /// Directory to write into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Number of files (default: 32 small, 16 large).
    #[arg(long)]
    files: Option<usize>,
    /// Records per file (default: 32,768 small, 512 large).
    #[arg(long)]
    records: Option<usize>,
    /// Seed: the same seed writes the same bytes.
    #[arg(long, default_value_t = 20240601)]
    seed: u64,
}

pub fn gen(args: GenArgs) -> AnyResult<ExitCode> {
    let start = std::time::Instant::now();
    let paths = generate(&GenOptions {
        preset: args.preset,
        out_dir: args.out,
        files: args.files,
        records: args.records,
        seed: args.seed,
    })?;
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    eprintln!(
        "wrote {} files, {:.1} MB in {:.2} s",
        paths.len(),
        bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    for p in paths {
        println!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}
