//! What a new user meets first in the core crate: two `.npy`
//! files as the columns of the same rows (`npy-columns:`), TFRecord
//! features of one value inferred as scalars, an inferred shape that a later
//! record does not fit, a directory given as an input, f64 → f32 overflow,
//! and typed batch views — each with the error it gives.

use std::path::Path;

use feedline::format::npy::{columns_spec, NPY_COLUMNS};
use feedline::format::{OpenOptions, Registry};
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline::{collate_chunks, Chunk, DType, Dim, Error, Schema};
use ndarray::{Array1, Array4, Ix1, Ix2, Ix4};
use ndarray_npy::write_npy;

/// `images.npy` (`f32 [n, 3, 2, 2]`, image `i` filled with `i`) and
/// `labels.npy` (`i64 [n]`, label `i` = `10 * i`) in `dir`.
fn images_and_labels(dir: &Path, n: usize, labels: usize) -> (String, String) {
    let images = Array4::from_shape_fn((n, 3, 2, 2), |(i, _, _, _)| i as f32);
    let lab = Array1::from_shape_fn(labels, |i| 10 * i as i64);
    let (ip, lp) = (dir.join("images.npy"), dir.join("labels.npy"));
    write_npy(&ip, &images).unwrap();
    write_npy(&lp, &lab).unwrap();
    (
        ip.to_string_lossy().into_owned(),
        lp.to_string_lossy().into_owned(),
    )
}

fn read_all(spec: &str, schema: &Schema) -> feedline::Result<Chunk> {
    let mut r = Registry::with_builtin().open(spec, None, &OpenOptions::default())?;
    let mut chunk = Chunk::new(schema);
    while r.read_chunk(&mut chunk, 1024, 1 << 20)? > 0 {}
    Ok(chunk)
}

#[test]
fn two_npy_files_are_the_columns_of_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (images, labels) = images_and_labels(dir.path(), 7, 7);
    let spec = columns_spec([&images, &labels]);
    assert_eq!(spec, format!("{NPY_COLUMNS}:{images},{labels}"));
    let schema = Registry::with_builtin()
        .infer_schema(&spec, None, 64)
        .unwrap();
    assert_eq!(
        schema.field("images").unwrap().shape,
        [Dim::Fixed(3), Dim::Fixed(2), Dim::Fixed(2)]
    );
    assert_eq!(schema.field("images").unwrap().dtype, DType::F32);
    assert!(schema.field("labels").unwrap().shape.is_empty(), "{schema}");
    let chunk = read_all(&spec, &schema).unwrap();
    assert_eq!(chunk.len(), 7);
    let batch = collate_chunks(&schema, [&chunk]).unwrap();
    let x = batch.view::<f32, Ix4>("images").unwrap();
    let y = batch.view::<i64, Ix1>("labels").unwrap();
    for i in 0..7 {
        assert!(x
            .slice(ndarray::s![i, .., .., ..])
            .iter()
            .all(|&v| v == i as f32));
        assert_eq!(y[i], 10 * i as i64, "row {i}: the label of the same row");
    }
    // Sharded by record, a reader starts mid-group: every member from there.
    let opts = OpenOptions {
        start_record: 5,
        ..Default::default()
    };
    let mut r = Registry::with_builtin().open(&spec, None, &opts).unwrap();
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.location.record, 5);
    assert_eq!(
        rec.to_json()["labels"],
        serde_json::json!([50]),
        "records list their values flat"
    );
}

#[test]
fn npy_columns_with_different_row_counts_name_each_member() {
    let dir = tempfile::tempdir().unwrap();
    let (images, labels) = images_and_labels(dir.path(), 7, 6);
    let spec = columns_spec([&images, &labels]);
    let e = read_all(
        &spec,
        &Schema::builder()
            .field("labels", DType::I64, [])
            .build()
            .unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::BadFile { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("`{images}` has 7")), "{msg}");
    assert!(msg.contains(&format!("`{labels}` has 6")), "{msg}");
    assert!(msg.contains("same rows"), "{msg}");
}

#[test]
fn npy_columns_refuse_one_member_two_fields_of_one_name_and_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let (images, _) = images_and_labels(dir.path(), 3, 3);
    let reg = Registry::with_builtin();
    let open = |spec: &str| {
        reg.open(spec, None, &OpenOptions::default())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let one = open(&format!("{NPY_COLUMNS}:{images}"));
    assert!(one.contains("two or more .npy paths"), "{one}");
    let other = dir.path().join("sub");
    std::fs::create_dir(&other).unwrap();
    let twin = other.join("images.npy");
    std::fs::copy(&images, &twin).unwrap();
    let twice = open(&columns_spec([Path::new(&images), twin.as_path()]));
    assert!(twice.contains("would both be field `images`"), "{twice}");
    let missing = dir.path().join("nope.npy");
    let gone = open(&columns_spec([Path::new(&images), missing.as_path()]));
    assert!(gone.contains("nope.npy"), "{gone}");
}

#[test]
fn a_tfrecord_feature_of_one_value_in_every_record_is_a_scalar() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = GenOptions::new(Preset::Small, dir.path());
    opts.files = Some(1);
    opts.records = Some(20);
    let path = generate(&opts).unwrap().remove(0);
    let spec = path.to_str().unwrap();
    let schema = Registry::with_builtin()
        .infer_schema(spec, None, 64)
        .unwrap();
    let y = schema.field("y").unwrap();
    assert_eq!((y.dtype, y.shape.clone()), (DType::I64, vec![]), "{schema}");
    assert_eq!(schema.field("x").unwrap().shape, [Dim::Fixed(64)]);
    let chunk = read_all(spec, &schema).unwrap();
    let batch = collate_chunks(&schema, [&chunk]).unwrap();
    assert_eq!(batch.view::<i64, Ix1>("y").unwrap().len(), 20, "y: [batch]");
    assert_eq!(batch.view::<f32, Ix2>("x").unwrap().dim(), (20, 64));
    assert!(schema
        .inferred_source()
        .unwrap()
        .contains("the first 20 records of"));
}

#[test]
fn a_record_that_does_not_fit_an_inferred_shape_says_it_was_inferred() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.jsonl");
    let mut text = String::new();
    for i in 0..70 {
        let n = if i < 64 { 3 } else { 5 };
        text.push_str(&format!("{{\"tokens\": {:?}}}\n", vec![i; n]));
    }
    std::fs::write(&path, text).unwrap();
    let spec = path.to_str().unwrap();
    let schema = Registry::with_builtin()
        .infer_schema(spec, None, 64)
        .unwrap();
    assert_eq!(schema.field("tokens").unwrap().shape, [Dim::Fixed(3)]);
    let e = read_all(spec, &schema)
        .unwrap_err()
        .explain_inferred(&schema);
    let msg = e.to_string();
    assert!(msg.contains("record 64"), "{msg}");
    assert!(
        msg.contains("inferred from the first 64 records of"),
        "{msg}"
    );
    assert!(msg.contains("declare it variable"), "{msg}");
    // A declared schema's error is left as it is.
    let declared = Schema::builder()
        .field("tokens", DType::I64, [3])
        .build()
        .unwrap();
    let plain = read_all(spec, &declared)
        .unwrap_err()
        .explain_inferred(&declared)
        .to_string();
    assert!(!plain.contains("inferred"), "{plain}");
}

#[test]
fn a_directory_input_says_it_is_one_and_suggests_a_glob() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let e = Registry::with_builtin()
        .resolve(d, None)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a directory"), "{e}");
    assert!(e.contains(&format!("`{d}/*`")), "{e}");
    assert!(
        !e.contains("--"),
        "no command-line wording in a library error: {e}"
    );
    let with_prefix = Registry::with_builtin()
        .open(&format!("npy:{d}"), None, &OpenOptions::default())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        with_prefix.contains("is a directory") && with_prefix.contains("glob"),
        "{with_prefix}"
    );
    let no_ext = Registry::with_builtin()
        .resolve("data/train", None)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        no_ext.contains("FORMAT: prefix") && !no_ext.contains("--format"),
        "{no_ext}"
    );
}

#[test]
fn f64_values_too_large_for_an_f32_field_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    std::fs::write(&path, "{\"x\": [1.5, 2.5]}\n{\"x\": [1e300, 0.5]}\n").unwrap();
    let schema = Schema::builder()
        .field("x", DType::F32, [2])
        .build()
        .unwrap();
    let e = read_all(path.to_str().unwrap(), &schema).unwrap_err();
    assert!(matches!(e, Error::Field { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("record 1"), "{msg}");
    assert!(msg.contains("field `x`"), "{msg}");
    assert!(msg.contains("1e300 out of range for f32"), "{msg}");
    // In range: narrowed to the nearest f32, as before.
    std::fs::write(&path, "{\"x\": [0.1, -3e38]}\n").unwrap();
    let chunk = read_all(path.to_str().unwrap(), &schema).unwrap();
    let batch = collate_chunks(&schema, [&chunk]).unwrap();
    assert_eq!(
        batch.f32("x").unwrap().as_slice().unwrap(),
        &[0.1f32, -3e38f32]
    );
}

#[test]
fn a_url_of_a_scheme_feedline_does_not_read_says_so() {
    for url in [
        "az://container/train-0.tfrecord",
        "abfs://c@account.dfs.core.windows.net/x.parquet",
        "ftp://host/x.jsonl",
    ] {
        let e = Registry::with_builtin()
            .resolve(url, None)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        let scheme = url.split("://").next().unwrap();
        assert!(
            e.contains(&format!("`{scheme}://` is not a URL scheme")) && e.contains("s3://"),
            "{e}"
        );
    }
    // The schemes it reads resolve by their extension (no request is made);
    // without the `remote` feature they are refused, naming it.
    for url in ["s3://b/x.tfrecord", "gs://b/x.jsonl", "https://h/x.tar"] {
        let got = Registry::with_builtin().resolve(url, None).map(|_| ());
        if cfg!(feature = "remote") {
            assert!(got.is_ok(), "{url}");
        } else {
            let e = got.unwrap_err().to_string();
            assert!(e.contains("enable the `remote` feature"), "{e}");
        }
    }
}
