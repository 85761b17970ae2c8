//! `ImageTransform` in feedline's single-thread path: a TFRecord of JPEGs
//! (`image/encoded`, `image/class/label`, as ImageNet's TFRecords are laid
//! out) through `imagenet-train` and `decode` — pixels equal to the plan run
//! alone with the instance's RNG, identical for 1, 2 and 4 workers; a corrupt
//! JPEG is a bad record with its provenance; images of another size than the
//! first are shape errors naming file, record and field.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use feedline::batch_policy::BatchPolicy;
use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::{Compression, OpenOptions, Registry};
use feedline::plan::PassPlan;
use feedline::reader::{batches, BatchesConfig, BatchesReader};
use feedline::shuffle::ShuffleConfig;
use feedline::transform::{instance_rng, Transforms};
use feedline::{BytesList, Error, Location, Record, SourceId, Tensor, Values};
use feedline_vision::{Decoder, ImageArray, ImageFields, ImageTransform, Plan};

/// A TFRecord of `n` records cycling through `images`; the JPEGs of the
/// records in `bad` cut in half.
fn write_tfrecord(path: &Path, images: &[Vec<u8>], n: usize, bad: &[usize]) {
    let mut w = TfRecordWriter::new(std::fs::File::create(path).unwrap(), Compression::None);
    for i in 0..n {
        let mut jpeg = images[i % images.len()].clone();
        if bad.contains(&i) {
            // Cut 16 bytes into the first scan's data, and those bytes
            // garbage: whatever region the random crop asks for (its draw
            // depends on the file's path, a temporary one), decoding it
            // needs the data from the scan's start, so it fails. (Cutting
            // at half the file left the top quarter intact, and a crop
            // there decoded: a flaky test.)
            let sos = jpeg.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
            let header = usize::from(u16::from_be_bytes([jpeg[sos + 2], jpeg[sos + 3]]));
            let data = sos + 2 + header;
            jpeg.truncate(data + 16);
            jpeg[data..].fill(0x55);
        }
        let record = Record {
            fields: vec![
                (
                    "image/encoded".into(),
                    Tensor::vector(Values::Bytes(BytesList::from_iter([&jpeg[..]]))),
                ),
                (
                    "image/class/label".into(),
                    Tensor::vector(Values::I64(vec![i as i64])),
                ),
            ],
            location: Location::new(SourceId::intern("written"), i as u64, None),
        };
        w.write_example(&record).unwrap();
    }
    w.finish().unwrap();
}

fn reader(file: &str, spec: &str, workers: usize, fields: ImageFields) -> BatchesReader {
    reader_chunks(file, spec, workers, fields, None)
}

/// [`reader`] with chunks of `chunk_rows` rows (`None`: the default).
fn reader_chunks(
    file: &str,
    spec: &str,
    workers: usize,
    fields: ImageFields,
    chunk_rows: Option<usize>,
) -> BatchesReader {
    let registry = Registry::with_builtin();
    let schema = registry.infer_schema(file, None, 64).unwrap();
    let t = Transforms {
        instance: Some(Arc::new(ImageTransform::parse(spec, fields).unwrap())),
        workers,
        ..Transforms::default()
    };
    let mut cfg = BatchesConfig {
        shuffle: ShuffleConfig {
            pool_size: 8,
            min_pool_size: None,
            max_bytes: 64 << 20,
            seed: 4,
        },
        ..BatchesConfig::new(BatchPolicy::Fixed(5))
    };
    if let Some(rows) = chunk_rows {
        cfg.chunk_rows = rows;
    }
    batches(
        registry,
        PassPlan::new(vec![file.to_string()]),
        schema,
        OpenOptions::default(),
        cfg,
    )
    .unwrap()
    .transforms(&t, 4)
    .unwrap()
}

/// label → pixels, and the errors.
fn read_all(r: &BatchesReader) -> (BTreeMap<i64, Vec<f32>>, Vec<Error>) {
    let (mut rows, mut errors) = (BTreeMap::new(), Vec::new());
    for b in r.read_pass(0) {
        match b {
            Ok(b) => {
                let x = b.f32("image/encoded").unwrap();
                assert_eq!(&x.shape()[1..], &[3, 224, 224]);
                for (i, label) in b.i64("image/class/label").unwrap().iter().enumerate() {
                    let px = x.index_axis(ndarray::Axis(0), i).iter().copied().collect();
                    assert!(rows.insert(*label, px).is_none());
                }
            }
            Err(e) => errors.push(e),
        }
    }
    (rows, errors)
}

#[test]
fn imagenet_train_pixels_are_the_plans_with_the_instance_rng_for_any_worker_count() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("train-0.tfrecord");
    let names = common::jpeg_names();
    let images: Vec<Vec<u8>> = names.iter().map(|n| common::fixture(n)).collect();
    write_tfrecord(&file, &images, 23, &[6]);
    let file = file.to_string_lossy().into_owned();
    let plan = Plan::parse("imagenet-train").unwrap();
    let mut runs = Vec::new();
    for (workers, fields) in [
        (1, ImageFields::Detect),
        (2, ImageFields::Named(vec!["image/encoded".into()])),
        (4, ImageFields::Detect),
    ] {
        let (rows, errors) = read_all(&reader(&file, "imagenet-train", workers, fields));
        // The corrupt JPEG: a bad record with its provenance, never a panic.
        assert_eq!(errors.len(), 1, "{errors:?}");
        // It names the transform as given (not its expanded chain), the
        // field and the failing step (issue 28). Mutation (tried):
        // `ImageTransform::name` returning `self.plan.to_string()` → fails.
        match &errors[0] {
            Error::Transform {
                location,
                transform,
                what,
            } => {
                assert_eq!(
                    (location.source.name().to_string(), location.record),
                    (file.clone(), 6)
                );
                assert_eq!(transform, "imagenet-train");
                assert!(
                    what.starts_with("field `image/encoded`: step `decode`: JPEG decoding failed"),
                    "{what}"
                );
                let text = errors[0].to_string();
                assert!(!text.contains("random-resized-crop"), "{text}");
            }
            other => panic!("{other}"),
        }
        assert_eq!(
            rows.keys().copied().collect::<Vec<_>>(),
            (0..23).filter(|&i| i != 6).collect::<Vec<_>>()
        );
        for (&label, px) in &rows {
            let mut rng = instance_rng(4, 0, &file, label as u64);
            let want = plan
                .run(
                    &mut Decoder::new(),
                    &images[label as usize % images.len()],
                    &mut rng,
                )
                .unwrap();
            let ImageArray::F32(want) = want else {
                panic!("f32 expected")
            };
            assert!(
                want.iter().copied().eq(px.iter().copied()),
                "label {label}: pixels differ"
            );
        }
        runs.push(rows);
    }
    assert!(runs.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn decode_keeps_the_first_images_shape_and_names_an_image_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.tfrecord");
    // pil_420 and pil_422 are the same size; big_420 is larger.
    let images: Vec<Vec<u8>> = ["pil_420.jpg", "pil_422.jpg", "big_420.jpg"]
        .iter()
        .map(|n| common::fixture(n))
        .collect();
    write_tfrecord(&file, &images, 6, &[]);
    let file = file.to_string_lossy().into_owned();
    let r = reader(&file, "decode", 2, ImageFields::Detect);
    let mut labels = Vec::new();
    let mut errors = Vec::new();
    // One batch holding records 0..5 in file order (no shuffle would do; the
    // pool of 8 holds all 6, and the first instance transformed sets the shape).
    for b in r.read_pass(0) {
        match b {
            Ok(b) => {
                let x = b.u8("image/encoded").unwrap();
                assert_eq!(x.shape()[3], 3);
                labels.extend(b.i64("image/class/label").unwrap().iter().copied());
            }
            Err(e) => errors.push(e),
        }
    }
    let shape = r
        .output_schema()
        .unwrap()
        .field("image/encoded")
        .unwrap()
        .describe();
    assert!(shape.ends_with("u8"), "{shape}");
    // Whichever size came first, the others are errors naming file, record, field.
    assert_eq!(labels.len() + errors.len(), 6);
    assert!(!errors.is_empty());
    for e in &errors {
        match e {
            Error::Field {
                location,
                field,
                expected,
                actual,
            } => {
                assert_eq!(location.source.name().to_string(), file);
                assert_eq!(field, "image/encoded");
                assert_eq!(expected, &shape);
                assert_ne!(actual, expected);
            }
            other => panic!("{other}"),
        }
    }
}

#[test]
fn a_first_batch_of_corrupt_images_is_skipped_with_no_rows_and_the_pass_goes_on() {
    // Records 0..14 are corrupt: the shuffle pool of 8, filled by chunks of
    // 4 rows, draws the first batch of 5 from them alone, so no instance has
    // transformed when it is made.
    // The image map knows its output schema from the fields it detected in
    // those rows, so that batch comes with no rows and the pass goes on.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad-first.tfrecord");
    let names = common::jpeg_names();
    let images: Vec<Vec<u8>> = names.iter().map(|n| common::fixture(n)).collect();
    let bad: Vec<usize> = (0..14).collect();
    write_tfrecord(&file, &images, 20, &bad);
    let file = file.to_string_lossy().into_owned();
    for workers in [1, 2] {
        let r = reader_chunks(
            &file,
            "imagenet-train",
            workers,
            ImageFields::Detect,
            Some(4),
        );
        let (mut labels, mut failed, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        for b in r.read_pass(0) {
            match b {
                Ok(b) => {
                    let x = b.f32("image/encoded").unwrap();
                    assert_eq!(&x.shape()[1..], &[3, 224, 224]);
                    sizes.push(x.shape()[0]);
                    labels.extend(b.i64("image/class/label").unwrap().iter().copied());
                }
                Err(Error::Transform { location, .. }) => failed.push(location.record),
                Err(other) => panic!("workers {workers}: {other}"),
            }
        }
        assert_eq!(
            sizes[0], 0,
            "workers {workers}: the first batch has no rows"
        );
        labels.sort_unstable();
        failed.sort_unstable();
        assert_eq!(labels, (14..20).collect::<Vec<i64>>(), "workers {workers}");
        assert_eq!(failed, (0..14).collect::<Vec<u64>>(), "workers {workers}");
    }
}
