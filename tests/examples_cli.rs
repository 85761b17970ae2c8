//! What the examples show a user beyond their output: each `--help` says
//! what the example does (not the crate's package description); the
//! timeline plot keeps its legends off the data, draws each line in the
//! legend as in the chart, marks pass ends and states the sampling
//! interval; and the peers harness adapter runs every job of
//! `benches/peers-jobs.tsv`, checking each pass exactly once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use feedline::format::{OpenOptions, Registry};
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline::Values;

mod examples_common;
use examples_common::example;

fn run(name: &str, args: &[&str]) -> Output {
    Command::new(example(name)).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_example_help_says_what_it_does() {
    let core = env!("CARGO_PKG_DESCRIPTION");
    for (name, does) in [
        ("actix_embed", "inside an actix application"),
        ("multi_gpu", "Feed simulated GPUs"),
        ("push_feed", "Push images and labels from user code"),
        ("scaling", "Scale feedline's readers on slow storage"),
        ("peers_adapter", "peers' benchmark harness"),
        ("numpy", "Load images and labels saved by numpy"),
        ("jsonl_tokens", "Batch token sequences read from JSON Lines"),
        #[cfg(feature = "tokenize")]
        ("packing", "Sequence packing"),
        #[cfg(feature = "tokenize")]
        ("tokenize_speed", "Tokenizing speed per core"),
    ] {
        let o = run(name, &["--help"]);
        assert!(o.status.success(), "{name}");
        let help = text(&o.stdout);
        let first = help.lines().next().unwrap_or("");
        assert!(
            !help.contains(core),
            "{name}: the package description: {first}"
        );
        assert!(
            first.contains(does),
            "{name}: `{first}` does not say `{does}`"
        );
    }
}

#[test]
fn multi_gpu_refuses_a_step_time_out_of_range() {
    for bad in ["inf", "NaN", "-1", "1e300", "2,inf"] {
        let o = run("multi_gpu", &["--devices", "2", "--step-ms", bad]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "--step-ms {bad}: {err}");
        assert!(
            err.contains("--step-ms") && !err.contains("panicked"),
            "{err}"
        );
    }
}

/// The `<text>` elements of an SVG: (x, y, content).
fn svg_texts(svg: &str) -> Vec<(f64, f64, String)> {
    let attr = |tag: &str, name: &str| -> f64 {
        let start = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        tag[start..].split('"').next().unwrap().parse().unwrap()
    };
    svg.split("<text ")
        .skip(1)
        .map(|t| {
            let (tag, rest) = t.split_once('>').unwrap();
            let tag = format!(" {tag}");
            let content = rest.split("</text>").next().unwrap().trim().to_string();
            (attr(&tag, "x"), attr(&tag, "y"), content)
        })
        .collect()
}

/// The `<polyline>` elements of an SVG: (stroke, points).
fn svg_polylines(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    svg.split("<polyline ")
        .skip(1)
        .map(|p| {
            let tag = p.split('>').next().unwrap();
            let value = |name: &str| {
                let start = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                tag[start..].split('"').next().unwrap().to_string()
            };
            let points = value("points")
                .split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            (value("stroke"), points)
        })
        .collect()
}

#[test]
fn the_timeline_plot_keeps_legends_off_the_data_and_marks_passes_and_interval() {
    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("timeline.svg");
    let o = run(
        "multi_gpu",
        &[
            "--gen-files",
            "2",
            "--gen-records",
            "2048",
            "--passes",
            "3",
            "--devices",
            "2",
            "--step-ms",
            "1",
            "--batch",
            "64",
            "--plot",
            svg_path.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let texts = svg_texts(&svg);
    let has = |s: &str| texts.iter().any(|t| t.2.contains(s));
    // The sampling interval, stated.
    assert!(has("one sample every 50 ms"), "no sampling interval");
    assert!(
        has("busy % in each 50 ms interval"),
        "no sampling interval in the caption"
    );
    // Pass ends, marked.
    for k in 1..=3 {
        assert!(has(&format!("pass {k} ends")), "pass {k} not marked");
    }
    // Legends beside the data: every legend label right of every data line.
    let lines = svg_polylines(&svg);
    let data_right = (lines.iter())
        .filter(|(_, pts)| pts.len() > 2)
        .flat_map(|(_, pts)| pts.iter().map(|p| p.0))
        .fold(f64::MIN, f64::max);
    let label = |s: &str| {
        texts
            .iter()
            .find(|t| t.2 == s)
            .unwrap_or_else(|| panic!("no legend label `{s}`"))
    };
    let labels = [
        "device 0",
        "device 1",
        "readers busy % (per reader)",
        "shuffle busy %",
        "batch maker busy % (per worker)",
        "queued batches (at each sample)",
        "capacity (per lane)",
    ];
    for l in labels {
        assert!(
            label(l).0 > data_right,
            "legend `{l}` at x {} over the data (to {data_right})",
            label(l).0
        );
    }
    // Each legend line drawn as its series: the segments at a label's height
    // left of it — one for a solid line, several for a dashed one.
    let segments = |l: &str| {
        let (x, y, _) = *label(l);
        lines
            .iter()
            .filter(|(_, pts)| {
                pts.len() == 2
                    && pts
                        .iter()
                        .all(|p| p.0 < x && p.0 > data_right && (p.1 - y).abs() < 16.0)
            })
            .count()
    };
    for solid in ["device 0", "device 1", "queued batches (at each sample)"] {
        assert_eq!(segments(solid), 1, "`{solid}` is solid in the chart");
    }
    for dashed in [
        "readers busy % (per reader)",
        "shuffle busy %",
        "batch maker busy % (per worker)",
        "capacity (per lane)",
    ] {
        assert!(segments(dashed) >= 3, "`{dashed}` is dashed in the chart");
    }
}

/// The order-independent sums of a dataset's records, as the harness's
/// manifest states them: records, label sum, probe sum.
fn sums(files: &[PathBuf], label: &str, probe: impl Fn(&Values) -> u128) -> (u64, i128, u128) {
    let registry = Registry::with_builtin();
    let (mut n, mut labels, mut probes) = (0u64, 0i128, 0u128);
    for f in files {
        let mut r = registry
            .open(f.to_str().unwrap(), None, &OpenOptions::default())
            .unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            n += 1;
            let Values::I64(l) = &rec.get(label).unwrap().values else {
                panic!("label not i64")
            };
            labels += l[0] as i128;
            let field = rec.fields.iter().find(|(k, _)| k != label).unwrap();
            probes += probe(&field.1.values);
        }
    }
    (n, labels, probes)
}

/// Workload C's layout: `shards` TFRecords of `per_shard` small JPEGs
/// (`image/encoded`, `image/class/label` = `i % 7 + 3` for image `i`).
fn jpeg_shards(dir: &Path, shards: usize, per_shard: usize) -> Vec<PathBuf> {
    use feedline::format::tfrecord::TfRecordWriter;
    use feedline::{BytesList, Location, Record, SourceId, Tensor};
    (0..shards)
        .map(|s| {
            let path = dir.join(format!("jpeg-{s:05}.tfrecord"));
            let mut w = TfRecordWriter::new(
                std::fs::File::create(&path).unwrap(),
                feedline::format::Compression::None,
            );
            for k in 0..per_shard {
                let i = s * per_shard + k;
                let (width, height) = (40 + 3 * k, 30 + 2 * s);
                let pixels: Vec<u8> = (0..width * height * 3)
                    .map(|p| ((p * 7 + i * 13) % 251) as u8)
                    .collect();
                let mut jpeg = Vec::new();
                jpeg_encoder::Encoder::new(&mut jpeg, 90)
                    .encode(
                        &pixels,
                        width as u16,
                        height as u16,
                        jpeg_encoder::ColorType::Rgb,
                    )
                    .unwrap();
                w.write_example(&Record {
                    fields: vec![
                        (
                            "image/encoded".into(),
                            Tensor::vector(Values::Bytes(BytesList::from_iter([&jpeg[..]]))),
                        ),
                        (
                            "image/class/label".into(),
                            Tensor::vector(Values::I64(vec![(i % 7 + 3) as i64])),
                        ),
                    ],
                    location: Location::new(SourceId::intern("written"), k as u64, None),
                })
                .unwrap();
            }
            w.finish().unwrap();
            path
        })
        .collect()
}

/// A small harness data directory: datasets A and B in the presets'
/// layout, C's JPEG shards, and the manifest (with B's label sum off by
/// `b_label_error`).
fn harness_data(dir: &Path, b_label_error: i128) {
    let make = |preset, files, records| {
        let mut o = GenOptions::new(preset, dir);
        o.files = Some(files);
        o.records = Some(records);
        generate(&o).unwrap()
    };
    let a = make(Preset::Small, 3, 300);
    let b = make(Preset::Large, 2, 10);
    let a_sums = sums(&a, "y", |v| match v {
        Values::F32(x) => x[0].to_bits() as u128,
        _ => panic!("x not f32"),
    });
    let b_sums = sums(&b, "label", |v| match v {
        Values::Bytes(img) => {
            let img = img.get(0);
            img[0] as u128 + img[img.len() - 1] as u128
        }
        _ => panic!("image not bytes"),
    });
    let entry = |files: &[PathBuf],
                 (records, label_sum, probe_sum): (u64, i128, u128),
                 payload: u64| {
        let names: Vec<String> = (files.iter())
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        serde_json::json!({
            "files": names,
            "expected": {"records": records, "label_sum": label_sum as i64, "probe_sum": probe_sum as u64},
            "payload_bytes_per_record": payload,
        })
    };
    let mut b_sums = b_sums;
    b_sums.1 += b_label_error;
    let c = jpeg_shards(dir, 2, 15);
    let c_sums = sums(&c, "image/class/label", |_| 0);
    // C's probe is the sum of label².
    let c_probe: u128 = (0..30u128).map(|i| (i % 7 + 3) * (i % 7 + 3)).sum();
    let manifest = serde_json::json!({
        "A": entry(&a, a_sums, 64 * 4 + 8),
        "B": entry(&b, b_sums, feedline::synthetic::LARGE_IMAGE_BYTES as u64 + 8),
        "C": entry(&c, (c_sums.0, c_sums.1, c_probe), 3 * 224 * 224 * 4 + 8),
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
}

/// Every job of `benches/peers-jobs.tsv` that runs the peers adapter (the
/// Python package's jobs run `python/benches/peers_py.py`), with one timed
/// pass: its name and arguments.
fn jobs(data: &Path) -> Vec<(String, Vec<String>)> {
    let tsv = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers-jobs.tsv");
    let text = std::fs::read_to_string(tsv).unwrap();
    (text.lines())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| {
            l.split('\t')
                .nth(1)
                .is_some_and(|c| c.starts_with("$PEERS_ADAPTER "))
        })
        .map(|l| {
            let (name, cmd) = l.split_once('\t').unwrap();
            let args = cmd
                .split_whitespace()
                .skip(1) // $PEERS_ADAPTER
                .map(|a| match a {
                    "$PEERS_DATA" => data.to_string_lossy().into_owned(),
                    "$WARMUP" => "0".into(),
                    "$REPEATS_A" | "$REPEATS_B" | "$REPEATS_C" => "1".into(),
                    other => other.to_string(),
                })
                .collect();
            (name.to_string(), args)
        })
        .collect()
}

#[test]
fn the_peers_adapter_runs_every_job_and_checks_each_pass() {
    let dir = tempfile::tempdir().unwrap();
    harness_data(dir.path(), 0);
    let jobs = jobs(dir.path());
    assert!(jobs.len() >= 16, "{} jobs", jobs.len());
    for (name, args) in &jobs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run("peers_adapter", &args);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{name}: {}{out}", text(&o.stderr));
        let results: Vec<serde_json::Value> = (out.lines())
            .filter_map(|l| l.strip_prefix("RESULT "))
            .map(|j| serde_json::from_str(j).unwrap())
            .collect();
        assert_eq!(results.len(), 1, "{name}: {out}");
        let r = &results[0];
        assert_eq!(r["check"], "ok", "{name}: {r}");
        assert_eq!(r["loader"], "feedline");
        assert_eq!(r["dataset"], &name[..1]);
        let records = match &name[..1] {
            "A" => 900,
            "B" => 20,
            _ => 30,
        };
        assert_eq!(r["records"], records, "{name}");
    }
    // A pass that does not match the manifest fails its check and the job.
    harness_data(dir.path(), 1);
    let (_, args) = jobs.iter().find(|(n, _)| n == "B_feedline_r2").unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run("peers_adapter", &args);
    assert!(!o.status.success());
    let out = text(&o.stdout);
    assert!(out.contains("\"check\": \"FAIL label_sum="), "{out}");
}
