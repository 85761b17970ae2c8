//! `--transform` on the command: `cat` prints decoded and augmented pixels
//! (a flat C-order array, what the plan gives with the instance's RNG),
//! `run` and `bench` transform on their workers, a corrupt JPEG is a bad
//! record under --on-error, and a bad spec or a stray --workers is refused;
//! `--max-pixels` refuses a larger image as a bad record naming file,
//! record, field, the transform as given, the step, the image's size and
//! the limit, and the in-flight bound counts each worker's working memory.

mod cli_common;

use std::path::{Path, PathBuf};

use cli_common::{assert_no_panic, code, feedline, stderr, stdout};
use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::Compression;
use feedline::transform::instance_rng;
use feedline::transform::InstanceMap;
use feedline::{BytesList, Location, Record, SourceId, Tensor, Values};
use feedline_vision::{Decoder, ImageArray, ImageFields, ImageTransform, Plan};

fn fixture(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vision/tests/fixtures");
    std::fs::read(dir.join(name)).unwrap()
}

/// ImageNet's layout: `image/encoded` JPEG bytes, `image/class/label`;
/// record `bad` (if any) a JPEG cut short.
fn write_images(path: &Path, images: &[Vec<u8>], bad: Option<usize>) {
    let mut w = TfRecordWriter::new(std::fs::File::create(path).unwrap(), Compression::None);
    for (i, jpeg) in images.iter().enumerate() {
        let mut jpeg = jpeg.clone();
        if Some(i) == bad {
            jpeg.truncate(600);
        }
        w.write_example(&Record {
            fields: vec![
                (
                    "image/encoded".into(),
                    Tensor::vector(Values::Bytes(BytesList::from_iter([&jpeg[..]]))),
                ),
                (
                    "image/class/label".into(),
                    Tensor::vector(Values::I64(vec![10 + i as i64])),
                ),
            ],
            location: Location::new(SourceId::intern("written"), i as u64, None),
        })
        .unwrap();
    }
    w.finish().unwrap();
}

fn images() -> Vec<Vec<u8>> {
    [
        "pil_420.jpg",
        "tf_444.jpg",
        "pil_grey.jpg",
        "pil_progressive.jpg",
    ]
    .iter()
    .map(|n| fixture(n))
    .collect()
}

#[test]
fn cat_prints_the_pixels_the_model_sees() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("img.tfrecord");
    let imgs = images();
    write_images(&file, &imgs, None);
    let path = file.to_str().unwrap();
    // decode: u8 [H, W, 3] flat, as the decoder gives it (PIL's pixels).
    let o = feedline(&["cat", path, "--transform", "decode", "--limit", "3"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (i, line) in lines.iter().enumerate() {
        let want = feedline_vision::decode(&imgs[i]).unwrap();
        let got: Vec<u8> = (line["image/encoded"].as_array().unwrap().iter())
            .map(|v| v.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(got, want.pixels(), "record {i}");
        assert_eq!(
            line["image/class/label"],
            serde_json::json!([10 + i as i64])
        );
    }
    // imagenet-train: the plan with record i's RNG from (--seed, pass 0, file, i).
    let o = feedline(&["cat", path, "--transform", "imagenet-train", "--seed", "3"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let plan = Plan::parse("imagenet-train").unwrap();
    for (i, line) in stdout(&o).lines().enumerate() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        let ImageArray::F32(want) = plan
            .run(
                &mut Decoder::new(),
                &imgs[i],
                &mut instance_rng(3, 0, path, i as u64),
            )
            .unwrap()
        else {
            panic!("f32")
        };
        let got: Vec<f32> = (line["image/encoded"].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got.len(), 3 * 224 * 224);
        assert!(want.iter().copied().eq(got.iter().copied()), "record {i}");
    }
}

#[test]
fn run_and_bench_transform_and_a_corrupt_jpeg_is_a_bad_record() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("img.tfrecord");
    write_images(&file, &images(), Some(2));
    let path = file.to_str().unwrap();
    let o = feedline(&[
        "run",
        path,
        "--transform",
        "imagenet-train",
        "--workers",
        "2",
        "--batch",
        "2",
    ]);
    assert_no_panic(&o);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{path}: record 2")) && stderr(&o).contains("image/encoded"),
        "{}",
        stderr(&o)
    );
    for cmd in ["run", "bench"] {
        let o = feedline(&[
            cmd,
            path,
            "--transform",
            "imagenet-train",
            "--workers",
            "2",
            "--batch",
            "2",
            "--on-error",
            "skip",
        ]);
        assert_no_panic(&o);
        assert_eq!(code(&o), 0, "{cmd}: {}", stderr(&o));
        // The 3 good images, in 2 batches (2 and 1): the corrupt one skipped.
        let all = stdout(&o) + &stderr(&o);
        let delivered = match cmd {
            "run" => {
                all.contains("skipped bad records: 1") && all.contains("     0        2        3 ")
            }
            _ => all.contains("[timed 0] 3 records, 2 batches"),
        };
        assert!(delivered, "{cmd}: {all}");
    }
}

#[test]
fn a_bad_spec_and_a_stray_workers_flag_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("img.tfrecord");
    write_images(&file, &images(), None);
    let path = file.to_str().unwrap();
    for cmd in ["cat", "run", "bench"] {
        let o = feedline(&[cmd, path, "--transform", "decode,resize(25"]);
        assert_eq!(code(&o), 2, "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--transform") && stderr(&o).contains("column 17"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    for cmd in ["run", "bench"] {
        let o = feedline(&[cmd, path, "--workers", "2"]);
        assert_eq!(code(&o), 2, "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--workers 2 applies only with --transform"),
            "{cmd}: {}",
            stderr(&o)
        );
        let o = feedline(&[cmd, path, "--transform", "decode", "--workers", "0"]);
        assert_eq!(code(&o), 2, "{cmd}: {}", stderr(&o));
    }
    let o = feedline(&["cat", path, "--transform", "decode", "--workers", "2"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[test]
fn max_pixels_refuses_a_larger_image_naming_it_and_the_bound_counts_each_worker() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("img.tfrecord");
    // Record 1 is 640 x 480 = 307200 pixels, the others about 20000.
    let imgs: Vec<Vec<u8>> = ["pil_420.jpg", "big_420.jpg", "pil_grey.jpg"]
        .iter()
        .map(|n| fixture(n))
        .collect();
    write_images(&file, &imgs, None);
    let path = file.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            path,
            "--transform",
            "imagenet-train",
            "--workers",
            "2",
            "--batch",
            "2",
            "--max-pixels",
            "300000",
        ];
        args.extend_from_slice(extra);
        feedline(&args)
    };
    let o = run(&[]);
    assert_no_panic(&o);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let err = stderr(&o);
    for words in [
        &format!("{path}: record 1"),
        "transform `imagenet-train`",
        "field `image/encoded`",
        "step `decode`",
        "image of 640x480 pixels (307200) is over the pixel limit of 300000",
    ] {
        assert!(err.contains(words), "{words:?} not in {err}");
    }
    assert!(!err.contains("random-resized-crop"), "{err}");
    let o = run(&["--on-error", "skip"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("skipped bad records: 1"),
        "{}",
        stdout(&o)
    );
    // cat likewise.
    let o = feedline(&[
        "cat",
        path,
        "--transform",
        "decode",
        "--max-pixels",
        "300000",
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("(307200) is over the pixel limit of 300000"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        stdout(&o).lines().count(),
        1,
        "record 0 printed before the error"
    );
    // Without --transform the flag is refused.
    for cmd in ["cat", "run", "bench"] {
        let o = feedline(&[cmd, path, "--max-pixels", "1000"]);
        assert_eq!(code(&o), 2, "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--max-pixels 1000 applies only with --transform"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    // bench: the stated bound holds each worker's working memory, as the
    // transform states it, once per worker (mutation, tried: dropping the
    // workers' term from in_flight_bound_bytes → transform_workers_bytes
    // is still reported but the bound is below it).
    let per_worker = ImageTransform::parse("imagenet-train", ImageFields::Detect)
        .unwrap()
        .max_pixels(300_000)
        .working_memory_bytes() as u64;
    for workers in ["1", "3"] {
        let o = feedline(&[
            "bench",
            path,
            "--transform",
            "imagenet-train",
            "--workers",
            workers,
            "--batch",
            "2",
            "--max-pixels",
            "300000",
            "--on-error",
            "skip",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--json",
        ]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let line: serde_json::Value =
            serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
        let n: u64 = workers.parse().unwrap();
        assert_eq!(
            line["transform_workers_bytes"],
            serde_json::json!(n * per_worker),
            "{line}"
        );
        let bound = line["in_flight_bound_bytes"].as_u64().unwrap();
        assert!(bound > n * per_worker, "{line}");
        // run states the same bound, and its peak RSS (mutation, tried:
        // `transform_workers: 0` in run's `Memory::of` → caught here).
        let run_with = |extra: &[&str]| {
            let mut args = vec![
                "run",
                path,
                "--transform",
                "imagenet-train",
                "--workers",
                workers,
                "--batch",
                "2",
                "--max-pixels",
                "300000",
                "--on-error",
                "skip",
            ];
            args.extend_from_slice(extra);
            feedline(&args)
        };
        let o = run_with(&["--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let line: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(
            line["transform_workers_bytes"],
            serde_json::json!(n * per_worker),
            "{line}"
        );
        assert!(
            line["in_flight_bound_bytes"].as_u64().unwrap() > n * per_worker,
            "{line}"
        );
        assert!(line["peak_rss_bytes"].as_u64().unwrap() > 0, "{line}");
        let o = run_with(&[]);
        let text = stdout(&o);
        let want = format!(
            "(transform workers {n} x {:.1} MiB)",
            per_worker as f64 / (1u64 << 20) as f64
        );
        assert!(
            text.contains("in-flight bound") && text.contains(&want),
            "{want:?} not in {text}"
        );
    }
}
