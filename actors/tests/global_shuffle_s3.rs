//! `shuffle_mode` `global` and `block` over S3 objects (moto's server, as
//! `remote_s3.rs` starts it, behind the same fault-injecting proxy: every
//! 7th request gets 503, 429 or its answer cut): each object indexed by one
//! streamed read (the index kept in the index directory by URL and ETag),
//! its records read by ranged GETs (in block mode one per block and
//! object). Checked by identity, for several seeds: the same batches as the
//! same files read locally, for 1 and 3 readers; in block mode no byte
//! fetched twice in a pass (a block that runs span is fetched once); a resume mid-pass equal to
//! the uninterrupted run; one index per object in the index directory; a
//! remote JSON Lines object is refused naming it and the mode. (An object
//! rewritten is not checked here: moto answers an unsigned overwrite with
//! 403; a rewritten local file is, in `global_shuffle.rs`.)

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::s3::{request, start_moto, start_proxy};
use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::Compression;
use feedline::{Location, Record, SourceId, Tensor, Values};
use feedline_actors::{Checkpoint, Loader, LoaderBuilder, ShuffleMode};

/// A delivered batch: pass, ids.
type Got = (u64, Vec<i64>);

/// The bytes of a TFRecord file of `n` records, ids `f * 1_000_000 + i`.
fn tfrecord_bytes(dir: &Path, f: u64, n: u64) -> Vec<u8> {
    let path = dir.join(format!("t{f}.tfrecord"));
    let mut w = TfRecordWriter::create(&path, Compression::None).unwrap();
    for i in 0..n {
        let rec = Record {
            fields: vec![(
                "id".into(),
                Tensor {
                    values: Values::I64(vec![(f * 1_000_000 + i) as i64]),
                    shape: vec![],
                },
            )],
            location: Location::new(SourceId::intern("w"), i, None),
        };
        w.write_example(&rec).unwrap();
    }
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

fn ordered(mode: ShuffleMode, files: &[String], idx: &Path, seed: u64) -> LoaderBuilder {
    Loader::builder()
        .files(files.to_vec())
        .shard_from_env(false)
        .shuffle_mode(mode)
        .shuffle(40)
        .index_dir(idx)
        .batch(9)
        .chunk_records(6)
        .passes(2)
        .seed(seed)
}

fn got(d: Result<feedline_actors::Delivered, feedline_actors::PipelineError>) -> Got {
    let d = d.unwrap();
    (d.pass, d.batch.i64("id").unwrap().iter().copied().collect())
}

fn all(b: LoaderBuilder) -> Vec<Got> {
    b.build().unwrap().into_iter().map(got).collect()
}

fn sorted_per_pass(batches: &[Got]) -> BTreeMap<u64, Vec<i64>> {
    let mut m: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (p, ids) in batches {
        m.entry(*p).or_default().extend(ids);
    }
    m.values_mut().for_each(|v| v.sort());
    m
}

#[test]
fn s3_objects_read_by_position_give_the_local_files_batches() {
    let Some(moto) = start_moto() else { return };
    let (proxy, injected) = start_proxy(moto.port, 7);
    feedline::remote::set_options(feedline::remote::RemoteOptions {
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        ..Default::default()
    });
    // The standard environment, set before any S3 client exists (this
    // binary has this one test).
    for (k, v) in [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{proxy}")),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ] {
        std::env::set_var(k, v);
    }
    let dir = tempfile::tempdir().unwrap();
    let idx = dir.path().join("idx");
    let counts = [70u64, 25, 131, 14];
    assert_eq!(request(moto.port, "PUT", "/bucket", b""), 200);
    let mut local = Vec::new();
    let mut urls = Vec::new();
    let mut object_bytes = 0u64;
    let mut first_object_bytes = 0u64;
    for (f, &n) in counts.iter().enumerate() {
        let bytes = tfrecord_bytes(dir.path(), f as u64, n);
        object_bytes += bytes.len() as u64;
        if f == 0 {
            first_object_bytes = bytes.len() as u64;
        }
        let key = format!("/bucket/gs/t{f}.tfrecord");
        assert_eq!(request(moto.port, "PUT", &key, &bytes), 200);
        local.push(
            dir.path()
                .join(format!("t{f}.tfrecord"))
                .to_string_lossy()
                .into_owned(),
        );
        urls.push(format!("s3://bucket/gs/t{f}.tfrecord"));
    }
    let want: Vec<i64> = (counts.iter().enumerate())
        .flat_map(|(f, &n)| (0..n).map(move |i| (f as u64 * 1_000_000 + i) as i64))
        .collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    for mode in [ShuffleMode::Global, ShuffleMode::Block] {
        for seed in [1u64, 7] {
            let here = all(ordered(mode, &local, &idx, seed));
            let fetched_before = feedline::remote::stats().bytes;
            let one = all(ordered(mode, &urls, &idx, seed).readers(1));
            let fetched = feedline::remote::stats().bytes - fetched_before;
            if mode == ShuffleMode::Block {
                // Blocks of 40 records span the runs of 15: each block is
                // fetched once per pass (the next run takes it from the
                // run before), so no byte is fetched twice in a pass;
                // besides, the schema is inferred from the first object's
                // first records (streamed).
                assert!(
                    0 < fetched && fetched <= 2 * object_bytes + first_object_bytes,
                    "seed {seed}: {fetched} bytes fetched for 2 passes of {object_bytes}"
                );
            }
            let three = all(ordered(mode, &urls, &idx, seed).readers(3));
            for (p, ids) in sorted_per_pass(&one) {
                assert_eq!(
                    ids, want_sorted,
                    "{mode:?} seed {seed} pass {p}: every record once"
                );
            }
            assert_eq!(one, here, "{mode:?} seed {seed}: S3 and local files");
            assert_eq!(one, three, "{mode:?} seed {seed}: 1 reader and 3");
            // A resume mid-pass: the uninterrupted run's batches.
            let mut loader = ordered(mode, &urls, &idx, seed).build().unwrap();
            let mut before = Vec::new();
            let mut it = loader.iter();
            for _ in 0..11 {
                before.push(got(it.next().unwrap()));
            }
            let cp = loader.checkpoint().unwrap();
            let cp = Checkpoint::from_json(&cp.to_json(), Path::new("cp.json")).unwrap();
            before.extend(all(ordered(mode, &urls, &idx, seed).resume(cp)));
            assert_eq!(before, one, "{mode:?} seed {seed}: resumed");
        }
    }
    assert!(injected.load(Ordering::SeqCst) > 0, "faults were injected");
    // One index per object, beside the local files' ones.
    let indexes = std::fs::read_dir(&idx).unwrap().count();
    assert_eq!(
        indexes,
        2 * counts.len(),
        "an index per file and per object"
    );
    // A remote JSON Lines object: refused, naming it and the modes.
    assert_eq!(
        request(moto.port, "PUT", "/bucket/gs/x.jsonl", b"{\"id\": 1}\n"),
        200
    );
    let e = ordered(
        ShuffleMode::Block,
        &["s3://bucket/gs/x.jsonl".to_string()],
        &idx,
        0,
    )
    .build()
    .and_then(|l| l.into_iter().next().unwrap().map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("s3://bucket/gs/x.jsonl")
            && e.contains("uncompressed TFRecord")
            && e.contains("buffer"),
        "{e}"
    );
}
