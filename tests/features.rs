//! The cargo features (docs/features.md): a build without `parquet` or
//! without `remote` still recognises a Parquet path (`.parquet`, `.pq`, a
//! `parquet:` prefix, the format's name) and a remote URL (`s3://`, `gs://`,
//! `http(s)://`, behind a `FORMAT:` prefix too), and refuses it with one
//! error naming the feature to enable — at every door: resolving, opening,
//! inferring a schema, expanding the inputs (a glob over a bucket), reading a
//! list file, stamping a checkpoint's inputs. With the feature, the same
//! inputs resolve to their format. `cargo test -p feedline
//! --no-default-features` runs the first half, the default build the second.

use feedline::format::Registry;
#[cfg(not(feature = "remote"))]
use feedline::plan::expand_inputs;
use feedline::Feature;
#[cfg(not(all(
    feature = "parquet",
    feature = "remote",
    feature = "arrow",
    feature = "mds"
)))]
use feedline::{format::OpenOptions, Error};

/// The text of the error `f` gives, asserting it is `NotCompiledIn` for
/// `feature` and names `input`.
#[cfg(not(all(
    feature = "parquet",
    feature = "remote",
    feature = "arrow",
    feature = "mds"
)))]
fn refused<T>(got: feedline::Result<T>, feature: Feature, input: &str) -> String {
    let e = match got {
        Ok(_) => panic!("{input}: accepted without the `{feature}` feature"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(
        matches!(&e, Error::NotCompiledIn { feature: f, .. } if *f == feature),
        "{input}: {e:?}"
    );
    assert!(
        text.contains(input) && text.contains(&format!("enable the `{feature}` feature")),
        "{text}"
    );
    text
}

#[test]
fn each_feature_names_itself_and_says_whether_it_is_in() {
    assert_eq!(Feature::Parquet.name(), "parquet");
    assert_eq!(Feature::Arrow.name(), "arrow");
    assert_eq!(Feature::Mds.to_string(), "mds");
    assert_eq!(Feature::Arrow.enabled(), cfg!(feature = "arrow"));
    assert_eq!(Feature::Mds.enabled(), cfg!(feature = "mds"));
    assert_eq!(Feature::Remote.to_string(), "remote");
    assert_eq!(Feature::Parquet.enabled(), cfg!(feature = "parquet"));
    assert_eq!(Feature::Remote.enabled(), cfg!(feature = "remote"));
    assert_eq!(
        Feature::Parquet.not_compiled_in(),
        "Parquet support is not compiled in: enable the `parquet` feature"
    );
    assert!(Feature::Remote
        .not_compiled_in()
        .starts_with("Remote sources (s3://, gs://, http://, https://) are not compiled in"));
}

#[test]
fn a_toml_schema_file_is_read_with_the_toml_feature_and_refused_naming_it_without() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.toml");
    std::fs::write(
        &path,
        "[[fields]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\n",
    )
    .unwrap();
    let got = feedline::Schema::from_file(&path);
    if cfg!(feature = "toml") {
        assert_eq!(got.unwrap().field("x").unwrap().unit_elements(), 4);
    } else {
        let e = got.unwrap_err();
        assert!(
            matches!(
                &e,
                feedline::Error::NotCompiledIn {
                    feature: Feature::Toml,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("schema.toml")
                && text
                    .contains("TOML schema support is not compiled in: enable the `toml` feature"),
            "{text}"
        );
    }
    // A JSON schema file needs no feature.
    let json = dir.path().join("schema.json");
    std::fs::write(
        &json,
        r#"{"fields": [{"name": "x", "dtype": "f32", "shape": [4]}]}"#,
    )
    .unwrap();
    assert!(feedline::Schema::from_file(&json).is_ok());
}

#[cfg(not(feature = "parquet"))]
#[test]
fn without_parquet_a_parquet_input_is_refused_naming_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("table.parquet");
    std::fs::write(&path, b"PAR1 not really PAR1").unwrap();
    let path = path.to_str().unwrap().to_string();
    let reg = Registry::with_builtin();
    assert!(!reg.names().iter().any(|n| n == "parquet"), "{reg:?}");
    let text = refused(reg.resolve(&path, None), Feature::Parquet, &path);
    assert!(
        text.contains("Parquet support is not compiled in: enable the `parquet` feature"),
        "{text}"
    );
    refused(
        reg.open(&path, None, &OpenOptions::default()),
        Feature::Parquet,
        &path,
    );
    refused(reg.infer_schema(&path, None, 10), Feature::Parquet, &path);
    let pq = format!("{path}.pq");
    refused(reg.resolve(&pq, None), Feature::Parquet, &pq);
    let prefixed = "parquet:shard-7.dat";
    refused(reg.resolve(prefixed, None), Feature::Parquet, prefixed);
    refused(
        reg.resolve("x.dat", Some("parquet")),
        Feature::Parquet,
        "x.dat",
    );
    // Another unknown extension is still "no format", not a feature.
    let e = reg.resolve("x.unknown", None).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::UnknownFormat { .. }), "{e:?}");
}

/// Without `arrow` or `mds`: their extensions, prefixes and names, and
/// the dataset directories that name their files, are refused naming the
/// feature.
#[cfg(not(all(feature = "arrow", feature = "mds")))]
#[test]
fn without_arrow_or_mds_their_inputs_are_refused_naming_the_feature() {
    let reg = Registry::with_builtin();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    if !Feature::Arrow.enabled() {
        for spec in ["x.arrow", "x.feather", "arrow:x.dat"] {
            refused(reg.resolve(spec, None), Feature::Arrow, spec);
        }
        refused(reg.resolve("x.dat", Some("arrow")), Feature::Arrow, "x.dat");
        let hf = fixtures.join("arrow/hf").display().to_string();
        let specs = feedline::plan::expand_inputs(&[hf]).unwrap();
        refused(
            reg.open(&specs[0], None, &OpenOptions::default()),
            Feature::Arrow,
            &specs[0],
        );
    }
    if !Feature::Mds.enabled() {
        for spec in ["x.mds", "mds:x.mds.zstd"] {
            refused(reg.resolve(spec, None), Feature::Mds, spec);
        }
        let dir = fixtures.join("mds/plain").display().to_string();
        let specs = feedline::plan::expand_inputs(&[dir]).unwrap();
        refused(
            reg.open(&specs[0], None, &OpenOptions::default()),
            Feature::Mds,
            &specs[0],
        );
    }
}

#[cfg(not(feature = "remote"))]
#[test]
fn without_remote_a_url_is_refused_naming_the_feature_not_taken_for_a_file() {
    let reg = Registry::with_builtin();
    for url in [
        "s3://bucket/train/a.tfrecord",
        "S3A://bucket/a.tfrecord",
        "gs://b/x.jsonl",
        "http://127.0.0.1:9/x.tar",
        "https://h.example/x.csv",
        "tfrecord:s3://bucket/shard-7.dat",
    ] {
        let text = refused(reg.resolve(url, None), Feature::Remote, url);
        assert!(text.contains("Remote sources (s3://"), "{text}");
        refused(
            reg.open(url, None, &OpenOptions::default()),
            Feature::Remote,
            url,
        );
        // The plan refuses it before any reader: a plain URL, a glob over a
        // bucket, braces expanded to URLs.
        refused(expand_inputs(&[url.to_string()]), Feature::Remote, url);
    }
    let glob = "s3://bucket/train/*.tfrecord";
    refused(expand_inputs(&[glob.to_string()]), Feature::Remote, glob);
    let braces = "gs://b/shard-{0..3}.tar";
    refused(
        expand_inputs(&[braces.to_string()]),
        Feature::Remote,
        "gs://b/shard-0.tar",
    );
    let list = "s3://bucket/train.list";
    refused(expand_inputs(&[format!("@{list}")]), Feature::Remote, list);
    // A list file naming a URL: refused at that line.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("inputs.list");
    std::fs::write(&local, "https://h.example/x.jsonl\n").unwrap();
    refused(
        expand_inputs(&[format!("@{}", local.display())]),
        Feature::Remote,
        "https://h.example/x.jsonl",
    );
    // A checkpoint's input stamp.
    let e = feedline::checkpoint::FileStamp::of("gs://b/x.jsonl").unwrap_err();
    assert!(e.to_string().contains("enable the `remote` feature"), "{e}");
}

#[cfg(feature = "parquet")]
#[test]
fn with_parquet_its_paths_resolve_to_the_parquet_format() {
    let reg = Registry::with_builtin();
    for spec in ["t.parquet", "t.pq", "parquet:shard-7.dat"] {
        let (f, _, _) = reg.resolve(spec, None).unwrap();
        assert_eq!(f.name(), "parquet", "{spec}");
    }
}

#[cfg(feature = "remote")]
#[test]
fn with_remote_urls_resolve_by_their_extension() {
    let reg = Registry::with_builtin();
    for (url, format) in [
        ("s3://bucket/a.tfrecord", "tfrecord"),
        ("gs://b/x.jsonl", "jsonl"),
        ("https://h.example/x.tar", "wds"),
        ("tfrecord:s3://bucket/shard-7.dat", "tfrecord"),
    ] {
        let (f, _, _) = reg.resolve(url, None).unwrap();
        assert_eq!(f.name(), format, "{url}");
    }
}
