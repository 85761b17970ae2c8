//! The peers harness adapter: feedline as one more loader in the peers'
//! side-by-side benchmark (`/work/shared/peers`, jobs in
//! `benches/peers-jobs.tsv`). It reads dataset A, B or C of the harness's
//! `gen_data.py` / `gen_images.py` — the files and the expected sums from
//! its `manifest.json` — times passes exactly as `feedline bench` does (the
//! same code: `measure.rs` and the pipeline flags of the command are
//! included below, `--transform` and `--workers` too), checks every pass as
//! the harness's `common.py` does (record count, sum of the labels, probe
//! sum: each record exactly once; for C also the layout: `f32 [n, 3, 224,
//! 224]` images whose 4×4 grid of pixels lies in the normalised range, some
//! negative), and prints one `RESULT {json}` line per pass as its
//! `run_passes` does.
//!
//! It is an example target (`[[example]] peers_adapter`, its crate root
//! `benches/peers_main.rs`; its unit tests below run from
//! `tests/peers_adapter.rs`) so
//! that `cargo build --release --example peers_adapter` puts it at a fixed
//! path (`target/release/examples/peers_adapter`) for the jobs file, in the
//! release profile the command itself is built with; the user's `feedline
//! bench` knows nothing of the harness.
//!
//! ```sh
//! cargo build --release --example peers_adapter
//! target/release/examples/peers_adapter --dataset A --data /tmp/peers/data --warmup 1 --repeats 5
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use feedline::{Batch, Schema};
use serde_json::{json, Map, Value};

use crate::error::{CliError, CliResult};
use crate::measure::{Consume, MeasureArgs, PassResult, Plan};
use crate::output::{Stderr, Stdout};
use crate::pipeline_args::PipelineArgs;

/// Run feedline in the peers' benchmark harness: dataset A or B of its
/// gen_data.py, every pass timed as `feedline bench` times it, checked
/// exactly once (records, label sum, probe sum) and printed as a
/// `RESULT {json}` line.
#[derive(Parser)]
#[command(name = "peers_adapter")]
struct Args {
    /// The harness's dataset: A (1,048,576 small records), B (8,192 images)
    /// or C (6,000 JPEGs; give `--transform imagenet-train`).
    #[arg(long, value_enum)]
    dataset: Dataset,
    /// Directory of the harness's data (default: $PEERS_DATA or /tmp/peers/data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Variant name in the RESULT lines (default: from the settings).
    #[arg(long)]
    variant: Option<String>,
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    measure: MeasureArgs,
}

/// The harness's datasets (gen_data.py).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Dataset {
    /// 1,048,576 × {x: 64 f32, y: i64}.
    #[value(name = "A")]
    A,
    /// 8,192 × {image: 224×224×3 u8, label: i64}.
    #[value(name = "B")]
    B,
    /// 6,000 × {image/encoded: JPEG bytes, image/class/label: i64}.
    #[value(name = "C")]
    C,
}

/// C's output layout: ImageNet's mean and standard deviation, and the
/// normalised range's bounds per channel (±0.02 for resampling's rounding),
/// as common.py checks them.
const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

impl Dataset {
    fn name(self) -> &'static str {
        match self {
            Dataset::A => "A",
            Dataset::B => "B",
            Dataset::C => "C",
        }
    }

    /// The same schema as `feedline gen`'s presets (same field names); C's
    /// as the loader infers it from the files.
    fn schema(self) -> Option<Schema> {
        match self {
            Dataset::A => Some(feedline::synthetic::preset_schema(
                feedline::synthetic::Preset::Small,
            )),
            Dataset::B => Some(feedline::synthetic::preset_schema(
                feedline::synthetic::Preset::Large,
            )),
            Dataset::C => None,
        }
    }

    /// The reference settings of the harness (common.py): shuffle, batch.
    fn reference(self) -> (usize, usize) {
        match self {
            Dataset::A => (10_000, 256),
            Dataset::B => (1_000, 32),
            Dataset::C => (1_000, 64),
        }
    }
}

/// The order-independent sums a pass must reproduce (manifest `expected`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sums {
    records: u64,
    label_sum: i128,
    probe_sum: u128,
}

/// What `manifest.json` says about one dataset.
#[derive(Debug)]
struct Manifest {
    files: Vec<String>,
    expected: Sums,
    payload_bytes_per_record: u64,
}

impl Manifest {
    fn load(dir: &Path, ds: Dataset) -> CliResult<Self> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            CliError::usage(format!("{}: {e} (run gen_data.py first)", path.display()))
        })?;
        Self::parse(&text, dir, ds).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))
    }

    fn parse(text: &str, dir: &Path, ds: Dataset) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let m = v
            .get(ds.name())
            .ok_or_else(|| format!("no dataset {}", ds.name()))?;
        let files = m
            .get("files")
            .and_then(Value::as_array)
            .ok_or("no `files` list")?
            .iter()
            .map(|f| {
                f.as_str()
                    .map(|s| dir.join(s).to_string_lossy().into_owned())
                    .ok_or_else(|| format!("a file name that is not a string: {f}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if files.is_empty() {
            return Err("the manifest lists no files".into());
        }
        let e = m.get("expected").ok_or("no `expected` sums")?;
        let int = |k: &str| -> Result<i128, String> {
            let x = e.get(k).ok_or_else(|| format!("no expected `{k}`"))?;
            x.as_i64()
                .map(i128::from)
                .or_else(|| x.as_u64().map(i128::from))
                .ok_or_else(|| format!("expected `{k}` is not an integer: {x}"))
        };
        let records = u64::try_from(int("records")?).map_err(|e| e.to_string())?;
        let probe_sum = u128::try_from(int("probe_sum")?).map_err(|e| e.to_string())?;
        let payload_bytes_per_record = m
            .get("payload_bytes_per_record")
            .and_then(Value::as_u64)
            .ok_or("no `payload_bytes_per_record`")?;
        Ok(Manifest {
            files,
            expected: Sums {
                records,
                label_sum: int("label_sum")?,
                probe_sum,
            },
            payload_bytes_per_record,
        })
    }
}

/// Accumulates the harness's checksums over the batches of a pass
/// (common.py's `Checker`): records, the sum of the labels, and the probe —
/// A: the u32 bit pattern of `x[:, 0]`; B: pixels `[0,0,0]` and
/// `[223,223,2]` of each image.
#[derive(Debug)]
struct Checker {
    ds: Dataset,
    sums: Sums,
    error: Option<String>,
    /// C: grid values below 0 (normalised values have some).
    negatives: u64,
}

impl Checker {
    fn new(ds: Dataset) -> Self {
        Checker {
            ds,
            sums: Sums::default(),
            error: None,
            negatives: 0,
        }
    }

    fn try_update(&mut self, batch: &Batch) -> Result<(), String> {
        let n = batch.len();
        let (feature, label) = match self.ds {
            Dataset::A => ("x", "y"),
            Dataset::B => ("image", "label"),
            Dataset::C => ("image/encoded", "image/class/label"),
        };
        let labels = batch.i64(label).map_err(|e| e.to_string())?;
        let labels = labels.as_slice().ok_or("labels not contiguous")?;
        if labels.len() != n {
            return Err(format!("{} labels for {n} records", labels.len()));
        }
        self.sums.label_sum += labels.iter().map(|&l| l as i128).sum::<i128>();
        self.sums.records += n as u64;
        match self.ds {
            Dataset::A => {
                let x = batch.f32(feature).map_err(|e| e.to_string())?;
                let x = x.as_slice().ok_or("x not contiguous")?;
                if x.len() != n * 64 {
                    return Err(format!("x has {} values for {n} records", x.len()));
                }
                self.sums.probe_sum += x
                    .iter()
                    .step_by(64)
                    .map(|v| v.to_bits() as u128)
                    .sum::<u128>();
            }
            Dataset::B => {
                let img = batch.u8(feature).map_err(|e| e.to_string())?;
                let img = img.as_slice().ok_or("image not contiguous")?;
                let per = feedline::synthetic::LARGE_IMAGE_BYTES;
                if img.len() != n * per {
                    return Err(format!("image has {} bytes for {n} records", img.len()));
                }
                // [0,0,0] is byte 0 of an image, [223,223,2] its last byte.
                self.sums.probe_sum += img
                    .chunks_exact(per)
                    .map(|im| im[0] as u128 + im[per - 1] as u128)
                    .sum::<u128>();
            }
            Dataset::C => {
                self.sums.probe_sum += labels
                    .iter()
                    .map(|&l| (l as i128 * l as i128) as u128)
                    .sum::<u128>();
                let img = batch.f32(feature).map_err(|e| e.to_string())?;
                if img.shape() != [n, 3, 224, 224] {
                    return Err(format!(
                        "images f32{:?} != float32[n,3,224,224]",
                        img.shape()
                    ));
                }
                // A 4×4 grid of pixels per image ([28::56, 28::56]).
                for im in img.outer_iter() {
                    for (c, plane) in im.outer_iter().enumerate() {
                        let lo = (0.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c] - 0.02;
                        let hi = (1.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c] + 0.02;
                        for y in (28..224).step_by(56) {
                            for x in (28..224).step_by(56) {
                                let v = plane[[y, x]];
                                if !(v.is_finite() && (lo..=hi).contains(&v)) {
                                    return Err(format!(
                                        "value {v} outside the normalised range of channel {c}"
                                    ));
                                }
                                self.negatives += u64::from(v < 0.0);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// "ok", or "FAIL k=got!=expected …" as common.py says it.
    fn verdict(&self, expected: &Sums) -> String {
        if let Some(e) = &self.error {
            return format!("FAIL {e}");
        }
        let mut bad = Vec::new();
        if self.sums.records != expected.records {
            bad.push(format!(
                "records={}!={}",
                self.sums.records, expected.records
            ));
        }
        if self.sums.label_sum != expected.label_sum {
            bad.push(format!(
                "label_sum={}!={}",
                self.sums.label_sum, expected.label_sum
            ));
        }
        if self.sums.probe_sum != expected.probe_sum {
            bad.push(format!(
                "probe_sum={}!={}",
                self.sums.probe_sum, expected.probe_sum
            ));
        }
        if self.ds == Dataset::C && self.sums.records > 0 && self.negatives == 0 {
            bad.push("no_negative_values:not_normalised?".into());
        }
        if bad.is_empty() {
            "ok".into()
        } else {
            format!("FAIL {}", bad.join(" "))
        }
    }
}

impl Consume for Checker {
    fn batch(&mut self, batch: &Batch) {
        if let Err(e) = self.try_update(batch) {
            self.error.get_or_insert(e);
        }
    }
}

/// The variant's name from the settings (`r2_s10000_b256_det` …).
fn variant(plan: &Plan) -> String {
    let config = &plan.config;
    let defaults = feedline_actors::PipelineConfig::default();
    let mut v = if plan.measure.single_thread {
        "single_thread".to_string()
    } else {
        format!("r{}", config.reading.readers)
    };
    v.push_str(&format!(
        "_s{}_b{}",
        config.order.shuffle,
        plan.batch_size()
    ));
    if config.order.deterministic {
        v.push_str("_det");
    }
    if config.reading.chunk_records != defaults.reading.chunk_records {
        v.push_str(&format!("_cr{}", config.reading.chunk_records));
    }
    if let Some(m) = config.order.min_pool {
        v.push_str(&format!("_minpool{m}"));
    }
    if config.feeding.capacity != defaults.feeding.capacity {
        v.push_str(&format!("_cap{}", config.feeding.capacity));
    }
    if plan.measure.multi_pass {
        v.push_str("_multipass");
    }
    if config.transforms.instance.is_some() {
        v.push_str(&format!("_w{}", config.transforms.workers));
    }
    if !config.reading.open.verify_checksums {
        v.push_str("_nocrc");
    } else if !config.reading.open.defer_checksums {
        v.push_str("_crc_on_read");
    }
    if let Some(d) = plan.measure.consumer_sleep_ms.filter(|d| !d.is_zero()) {
        v.push_str(&format!("_sleep{}ms", d.as_nanos() as f64 / 1e6));
    }
    v
}

/// JSON as Python's `json.dumps(obj, sort_keys=True)` writes it: keys
/// sorted, `", "` and `": "` separators (scalars and flat objects).
fn python_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}: {}", Value::String(k.clone()), python_json(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// One pass as the harness reads it: the `RESULT` line's object.
fn result_object(
    plan: &Plan,
    variant: &str,
    ds: Dataset,
    man: &Manifest,
    i: usize,
    r: &PassResult,
    check: &str,
) -> Value {
    use crate::measure::round;
    let (phase, run) = plan.phase(i);
    let mib = (1u64 << 20) as f64;
    let mut m = Map::new();
    for (k, v) in [
        ("loader", json!("feedline")),
        ("variant", json!(variant)),
        ("dataset", json!(ds.name())),
        ("phase", json!(phase)),
        ("run", json!(run)),
        ("records", json!(r.records)),
        ("batches", json!(r.batches)),
        ("seconds", json!(round(r.seconds, 4))),
        ("records_per_s", json!(round(r.records_per_s(), 1))),
        (
            "payload_mb_per_s",
            json!(round(
                (r.records * man.payload_bytes_per_record) as f64 / r.seconds / 1e6,
                2
            )),
        ),
        ("cpu_seconds", json!(round(r.cpu, 2))),
        ("teardown_seconds", json!(round(r.teardown, 3))),
        (
            "first_batch_seconds",
            json!(round(r.first_batch.unwrap_or(0.0), 3)),
        ),
        (
            "tree_rss_peak_mb",
            json!(round(r.peak_rss.unwrap_or(0) as f64 / mib, 1)),
        ),
        ("check", json!(check)),
        ("version", json!(env!("CARGO_PKG_VERSION"))),
    ] {
        m.insert(k.to_string(), v);
    }
    // Extras (summarize.py ignores them).
    m.extend(plan.details(r));
    Value::Object(m)
}

fn run(args: Args) -> CliResult<bool> {
    let ds = args.dataset;
    if !args.pipeline.files.is_empty() {
        return Err(CliError::usage(
            "the files come from the manifest (--data): give no files",
        ));
    }
    let dir = args.data.clone().unwrap_or_else(|| {
        PathBuf::from(std::env::var("PEERS_DATA").unwrap_or_else(|_| "/tmp/peers/data".into()))
    });
    if ds == Dataset::C && args.pipeline.transform.transform.is_none() {
        return Err(CliError::usage(
            "dataset C is JPEGs: give --transform imagenet-train (its pipeline: decode, RandomResizedCrop 224, flip, normalise to f32 CHW)",
        ));
    }
    let man = Manifest::load(&dir, ds)?;
    let plan = Plan::resolve(
        &args.pipeline,
        &args.measure,
        Some(man.files.clone()),
        ds.schema(),
    )?;
    let (shuffle, batch) = ds.reference();
    if plan.config.order.shuffle != shuffle || plan.batch_size() != batch.to_string() {
        writeln!(
            Stderr,
            "[feedline] note: dataset {} reference settings are shuffle {shuffle} / batch {batch}; this run uses shuffle {} / batch {}",
            ds.name(),
            plan.config.order.shuffle,
            plan.batch_size()
        )?;
    }
    let variant = args.variant.clone().unwrap_or_else(|| variant(&plan));
    let mut out = Stdout::new();
    let mut all_ok = true;
    plan.run(
        || Checker::new(ds),
        |i, r, checker| {
            let check = checker.verdict(&man.expected);
            all_ok &= check == "ok";
            let obj = result_object(&plan, &variant, ds, &man, i, r, &check);
            writeln!(out, "RESULT {}", python_json(&obj))?;
            out.flush()?;
            let (phase, run) = plan.phase(i);
            let mib = (1u64 << 20) as f64;
            writeln!(
                Stderr,
                "[feedline/{variant}/{}] {phase} {run}: {:.2}s {:.0} rec/s {:.1} MB/s cpu {:.1}s start-up {:.1}ms first-batch {:.1}ms teardown {:.2}s peak RSS {:.0} MiB (anon {:.0}, file {:.0}; bound+64 {:.0}) {check}",
                ds.name(),
                r.seconds,
                r.records_per_s(),
                (r.records * man.payload_bytes_per_record) as f64 / r.seconds / 1e6,
                r.cpu,
                r.startup.unwrap_or(0.0) * 1e3,
                r.first_batch.unwrap_or(0.0) * 1e3,
                r.teardown,
                r.peak_rss.unwrap_or(0) as f64 / mib,
                r.peak_anon.unwrap_or(0) as f64 / mib,
                r.peak_file.unwrap_or(0) as f64 / mib,
                plan.in_flight_bound(r) as f64 / mib + 64.0,
            )
        },
    )?;
    out.finish()?;
    Ok(all_ok)
}

pub fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        // A check failed: the RESULT lines say which.
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!("peers_adapter: error: {e}\n"),
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feedline::{collate, Chunk, Instance, Origin, SourceId, Values};

    fn batch_a(rows: &[(Vec<f32>, i64)]) -> Batch {
        let schema = Dataset::A.schema().unwrap();
        let mut chunk = Chunk::new(&schema);
        for (i, (x, y)) in rows.iter().enumerate() {
            let o = Origin::new(SourceId::intern("mem-a"), i as u64);
            let inst = Instance::new(
                &schema,
                vec![Values::F32(x.clone()), Values::I64(vec![*y])],
                o,
            )
            .unwrap();
            chunk.push_instance(&inst);
        }
        collate(&schema, (0..rows.len()).map(|i| (&chunk, i))).unwrap()
    }

    #[test]
    fn checker_a_sums_labels_and_the_bits_of_the_first_x() {
        let mut x0 = vec![0.0f32; 64];
        x0[0] = 1.5;
        x0[1] = 99.0; // not the probe
        let mut x1 = vec![0.0f32; 64];
        x1[0] = -2.0;
        let b = batch_a(&[(x0, 7), (x1, 993)]);
        let mut c = Checker::new(Dataset::A);
        c.batch(&b);
        c.batch(&b);
        let probe = 2 * (1.5f32.to_bits() as u128 + (-2.0f32).to_bits() as u128);
        let want = Sums {
            records: 4,
            label_sum: 2 * (7 + 993),
            probe_sum: probe,
        };
        assert_eq!(c.sums, want);
        assert_eq!(c.verdict(&want), "ok");
        let wrong = Sums { records: 5, ..want };
        assert_eq!(c.verdict(&wrong), "FAIL records=4!=5");
    }

    #[test]
    fn checker_b_probes_first_and_last_byte_of_each_image() {
        let schema = Dataset::B.schema().unwrap();
        let per = feedline::synthetic::LARGE_IMAGE_BYTES;
        let mut chunk = Chunk::new(&schema);
        for (i, (first, last, label)) in [(3u8, 250u8, 5i64), (200, 1, 10)].iter().enumerate() {
            let mut img = vec![77u8; per];
            img[0] = *first;
            img[per - 1] = *last;
            let o = Origin::new(SourceId::intern("mem-b"), i as u64);
            let inst = Instance::new(&schema, vec![Values::U8(img), Values::I64(vec![*label])], o)
                .unwrap();
            chunk.push_instance(&inst);
        }
        let b = collate(&schema, (0..2).map(|i| (&chunk, i))).unwrap();
        let mut c = Checker::new(Dataset::B);
        c.batch(&b);
        assert_eq!(
            c.sums,
            Sums {
                records: 2,
                label_sum: 15,
                probe_sum: 3 + 250 + 200 + 1
            }
        );
    }

    #[test]
    fn checker_reports_a_batch_of_the_wrong_schema() {
        let b = batch_a(&[(vec![0.0; 64], 1)]);
        let mut c = Checker::new(Dataset::B);
        c.batch(&b);
        let v = c.verdict(&Sums::default());
        assert!(v.starts_with("FAIL ") && v.contains("label"), "{v}");
    }

    #[test]
    fn manifest_gives_paths_sums_and_payload() {
        let text = r#"{"seed": 1, "A": {"files": ["small-00000.tfrecord", "small-00001.tfrecord"],
            "expected": {"records": 10, "label_sum": 4500, "probe_sum": 18446744073709551615},
            "payload_bytes_per_record": 264}}"#;
        let m = Manifest::parse(text, Path::new("/d"), Dataset::A).unwrap();
        assert_eq!(
            m.files,
            ["/d/small-00000.tfrecord", "/d/small-00001.tfrecord"]
        );
        assert_eq!(m.expected.records, 10);
        assert_eq!(m.expected.label_sum, 4500);
        assert_eq!(m.expected.probe_sum, u64::MAX as u128);
        assert_eq!(m.payload_bytes_per_record, 264);
        let e = Manifest::parse(text, Path::new("/d"), Dataset::B).unwrap_err();
        assert!(e.contains("no dataset B"), "{e}");
        let e =
            Manifest::parse(r#"{"A": {"files": []}}"#, Path::new("/d"), Dataset::A).unwrap_err();
        assert!(e.contains("no files"), "{e}");
    }

    #[test]
    fn python_json_sorts_keys_and_spaces_separators() {
        let v = json!({"b": 1.5, "a": "x", "c": null, "d": true});
        assert_eq!(
            python_json(&v),
            r#"{"a": "x", "b": 1.5, "c": null, "d": true}"#
        );
    }
}
