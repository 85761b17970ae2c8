//! The actor pipeline over Parquet files and WebDataset shards (the
//! pyarrow- and webdataset-written fixtures): every record exactly once
//! per pass by identity (file, record) with readers {1, 4}; Parquet nulls
//! skipped under the skip policy, each named by file and record (the
//! Parquet half with the `parquet` feature).

use std::collections::BTreeMap;
use std::path::PathBuf;

use feedline::{DType, Schema};
use feedline_actors::Loader;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    p.to_str().unwrap().to_string()
}

/// (pass → every (file, record) delivered, sorted) of a loader's run.
fn identities(loader: Loader) -> BTreeMap<u64, Vec<(String, u64)>> {
    let mut per_pass: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for d in loader {
        let d = d.unwrap();
        per_pass.entry(d.pass).or_default().extend(
            d.batch
                .origins()
                .iter()
                .map(|o| (o.source.name().to_string(), o.record)),
        );
    }
    for v in per_pass.values_mut() {
        v.sort();
    }
    per_pass
}

fn every(files: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut v: Vec<_> = files
        .iter()
        .flat_map(|(f, n)| (0..*n).map(move |i| (f.clone(), i)))
        .collect();
    v.sort();
    v
}

#[test]
fn parquet_and_webdataset_records_exactly_once_per_pass() {
    let parquet: Vec<(String, u64)> = ["none", "snappy", "zstd", "gzip"]
        .iter()
        .map(|c| (fixture(&format!("pq_table.{c}.parquet")), 10))
        .collect();
    let wds: Vec<(String, u64)> = vec![
        (fixture("wds-000000.tar"), 7),
        (fixture("wds-000001.tar"), 5),
        (fixture("wds-gz-000000.tar.gz"), 12),
    ];
    let wds_schema = Schema::builder()
        .field("cls", DType::I64, [])
        .field("jpg", DType::Bytes, [])
        .build()
        .unwrap();
    // Parquet with its feature; WebDataset in every build.
    let sets = [(&parquet, None), (&wds, Some(wds_schema))];
    let sets = &sets[usize::from(!cfg!(feature = "parquet"))..];
    for readers in [1, 4] {
        for (files, schema) in sets {
            let mut b = Loader::builder()
                .files(files.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>())
                .readers(readers)
                .passes(2)
                .batch(3)
                .shuffle(8)
                .seed(readers as u64);
            if let Some(s) = schema {
                b = b.schema(s.clone());
            }
            let per_pass = identities(b.build().unwrap());
            assert_eq!(per_pass.len(), 2);
            for (pass, ids) in per_pass {
                assert_eq!(ids, every(files), "readers {readers}, pass {pass}");
            }
        }
    }
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_nulls_are_skipped_and_named_under_the_skip_policy() {
    use feedline_actors::ErrorPolicy;

    let file = fixture("pq_nulls.parquet");
    let mut loader = Loader::builder()
        .files(vec![file.clone()])
        .readers(2)
        .batch(2)
        .shuffle(0)
        .error_policy(ErrorPolicy::skip())
        .build()
        .unwrap();
    let mut got = Vec::new();
    for d in loader.iter() {
        got.extend(d.unwrap().batch.origins().iter().map(|o| o.record));
    }
    got.sort();
    assert_eq!(got, vec![0, 1, 3, 5]);
    let skipped = loader.stats_handle().skipped();
    let mut at: Vec<(u64, bool)> = skipped
        .iter()
        .map(|s| (s.record, s.error.contains("null")))
        .collect();
    at.sort();
    assert_eq!(at, vec![(2, true), (4, true)]);
    assert!(skipped
        .iter()
        .all(|s| s.source.ends_with("pq_nulls.parquet")));
}
