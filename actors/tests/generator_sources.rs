//! Generator sources (reader creators) through the actor pipeline: like
//! files, they are read by the reader pool, shuffled, batched, repeated for
//! every pass, sharded, and located as `gen:NAME: record i`; they mix with
//! files; bad items follow the error policy.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::{sample, SynthFormat};
use feedline::format::generator::{GeneratorFormat, GeneratorSource, Sample};
use feedline::format::{OpenOptions, Registry};
use feedline::plan::ShardBy;
use feedline::Values;
use feedline_actors::{ErrorPolicy, Loader, LoaderBuilder};

/// `ids(base, n)` as a creator: samples `base .. base + n`.
fn ids(base: i64, n: i64) -> impl Fn() -> std::vec::IntoIter<Sample> + Send + Sync + 'static {
    move || (base..base + n).map(sample).collect::<Vec<_>>().into_iter()
}

/// (pass, seq, ids, origins as (source, record)) of every batch.
type Run = Vec<(u64, u64, Vec<i64>, Vec<(String, u64)>)>;

fn run(builder: LoaderBuilder) -> Run {
    let loader = builder.build().unwrap();
    loader
        .into_iter()
        .map(|d| {
            let d = d.unwrap();
            let ids = d.batch.i64("id").unwrap().iter().copied().collect();
            let origins = d
                .batch
                .origins()
                .iter()
                .map(|o| (o.source.name().to_string(), o.record))
                .collect();
            (d.pass, d.seq, ids, origins)
        })
        .collect()
}

fn ids_per_pass(out: &Run) -> BTreeMap<u64, Vec<i64>> {
    let mut per: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (p, _, ids, _) in out {
        per.entry(*p).or_default().extend(ids);
    }
    for v in per.values_mut() {
        v.sort();
    }
    per
}

#[test]
fn every_generated_instance_once_per_pass_with_its_provenance() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let out = run(Loader::builder()
        .generator("a", move || {
            c.fetch_add(1, Ordering::SeqCst);
            (0..500).map(sample)
        })
        .generator("b", ids(10_000, 77))
        .schema(SynthFormat::schema())
        .readers(2)
        .passes(3)
        .batch(16)
        .shuffle(64)
        .chunk_records(10)
        .seed(4));
    let per = ids_per_pass(&out);
    assert_eq!(per.len(), 3);
    let mut want: Vec<i64> = (0..500).chain(10_000..10_077).collect();
    want.sort();
    for ids in per.values() {
        assert_eq!(ids, &want);
    }
    // The creator runs once per pass (the schema was given).
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    for (_, _, ids, origins) in &out {
        for (id, (source, record)) in ids.iter().zip(origins) {
            if *id < 10_000 {
                assert_eq!((source.as_str(), *record), ("gen:a", *id as u64));
            } else {
                assert_eq!((source.as_str(), *record), ("gen:b", (*id - 10_000) as u64));
            }
        }
    }
    // Shuffled: not in generation order.
    let first: Vec<i64> = out
        .iter()
        .filter(|b| b.0 == 0)
        .flat_map(|b| b.2.clone())
        .collect();
    assert_ne!(first, {
        let mut s = first.clone();
        s.sort();
        s
    });
}

#[test]
fn generators_and_files_mix_in_one_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("part.jsonl");
    let text: String = (0..40)
        .map(|i| format!("{{\"id\": {}, \"x\": [1.5, 2.5, 3.5, 4.5]}}\n", 50_000 + i))
        .collect();
    std::fs::write(&path, text).unwrap();
    let out = run(Loader::builder()
        .files([path.to_str().unwrap()])
        .generator("g", ids(0, 100))
        .schema(SynthFormat::schema())
        .readers(2)
        .passes(2)
        .batch(8)
        .shuffle(30));
    let mut want: Vec<i64> = (0..100).chain(50_000..50_040).collect();
    want.sort();
    for ids in ids_per_pass(&out).values() {
        assert_eq!(ids, &want);
    }
    let sources: std::collections::BTreeSet<String> = out
        .iter()
        .flat_map(|b| b.3.iter().map(|(s, _)| s.clone()))
        .collect();
    assert!(sources.contains("gen:g"), "{sources:?}");
    assert!(
        sources.iter().any(|s| s.ends_with("part.jsonl")),
        "{sources:?}"
    );
}

#[test]
fn seed_shuffle_and_determinism_as_for_files() {
    let build = |seed: u64, shuffle: usize, readers: usize| {
        Loader::builder()
            .generator_shards("s", 3, |k| {
                (0..200).map(move |i| sample(k as i64 * 1000 + i))
            })
            .generator("t", ids(5000, 150))
            .schema(SynthFormat::schema())
            .readers(readers)
            .passes(2)
            .batch(10)
            .shuffle(shuffle)
            .chunk_records(16)
            .seed(seed)
            .deterministic(true)
    };
    let a = run(build(5, 50, 1));
    let b = run(build(5, 50, 3));
    let c = run(build(6, 50, 2));
    assert_eq!(a, b, "same seed: same batches whatever the reader count");
    assert_ne!(a, c, "another seed: another order");
    assert_eq!(ids_per_pass(&a), ids_per_pass(&c));
    // The two passes are shuffled differently.
    let pass = |r: &Run, p: u64| -> Vec<i64> {
        r.iter()
            .filter(|x| x.0 == p)
            .flat_map(|x| x.2.clone())
            .collect()
    };
    assert_ne!(pass(&a, 0), pass(&a, 1));
    // No shuffle, files in the given order: generation order.
    let plain = run(build(5, 0, 2).shuffle_files(false));
    let got = pass(&plain, 0);
    let want: Vec<i64> = (0..200)
        .chain(1000..1200)
        .chain(2000..2200)
        .chain(5000..5150)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn generators_shard_by_record_and_by_shard() {
    // One generator, two ranks: by record (fewer inputs than ranks).
    let ranks = |builder: &dyn Fn(usize) -> LoaderBuilder| -> Vec<Vec<i64>> {
        (0..2)
            .map(|rank| {
                let out = run(builder(rank).shard(rank, 2));
                ids_per_pass(&out).remove(&0).unwrap_or_default()
            })
            .collect()
    };
    let by_record = ranks(&|_| {
        Loader::builder()
            .generator("one", ids(0, 101))
            .schema(SynthFormat::schema())
            .batch(7)
            .shuffle(20)
    });
    assert_eq!(by_record[0].len() + by_record[1].len(), 101);
    let mut all: Vec<i64> = by_record.concat();
    all.sort();
    assert_eq!(all, (0..101).collect::<Vec<_>>());
    assert!(by_record[0].len().abs_diff(by_record[1].len()) <= 1);

    // Four generator shards, two ranks: by shard (whole sources per rank).
    let by_shard = ranks(&|_| {
        Loader::builder()
            .generator_shards("sh", 4, |k| {
                (0..25).map(move |i| sample(k as i64 * 100 + i))
            })
            .schema(SynthFormat::schema())
            .shard_by(ShardBy::File)
            .batch(7)
            .shuffle(20)
    });
    let mut all: Vec<i64> = by_shard.concat();
    all.sort();
    assert_eq!(
        all,
        (0..4)
            .flat_map(|k| k * 100..k * 100 + 25)
            .collect::<Vec<_>>()
    );
    for rank in &by_shard {
        let shards: std::collections::BTreeSet<i64> = rank.iter().map(|id| id / 100).collect();
        assert_eq!(rank.len(), shards.len() * 25, "whole shards per rank");
        assert_eq!(shards.len(), 2);
    }
}

#[test]
fn a_schema_is_inferred_from_a_generator() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let loader = Loader::builder()
        .generator("inf", move || {
            c.fetch_add(1, Ordering::SeqCst);
            (0..30).map(|i| {
                Sample::new().with("label", Values::I64(vec![i]), []).with(
                    "img",
                    Values::U8(vec![i as u8; 6]),
                    [2, 3],
                )
            })
        })
        .passes(2)
        .batch(10)
        .build()
        .unwrap();
    let s = loader.schema().clone();
    assert_eq!(s.field("img").unwrap().describe(), "[2, 3] u8");
    let batches: Vec<_> = loader.into_iter().map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 6);
    assert_eq!(batches[0].batch.u8("img").unwrap().shape(), &[10, 2, 3]);
    // Once for the schema, once per pass.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

fn with_bad_item(policy: ErrorPolicy) -> Loader {
    Loader::builder()
        .generator("bad", || {
            (0..50).map(|i| {
                if i == 7 {
                    Err(format!("sensor {i} unplugged"))
                } else {
                    Ok(sample(i))
                }
            })
        })
        .schema(SynthFormat::schema())
        .error_policy(policy)
        .batch(5)
        .shuffle(0)
        .build()
        .unwrap()
}

#[test]
fn a_failing_item_follows_the_error_policy() {
    let mut got = Vec::new();
    let mut error = None;
    for b in with_bad_item(ErrorPolicy::Fail) {
        match b {
            Ok(d) => got.extend(d.batch.i64("id").unwrap().iter().copied()),
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let error = error.expect("the pipeline fails");
    assert!(error.contains("gen:bad: record 7"), "{error}");
    assert!(error.contains("sensor 7 unplugged"), "{error}");

    let mut loader = with_bad_item(ErrorPolicy::skip());
    let mut ids: Vec<i64> = loader
        .iter()
        .flat_map(|b| {
            b.unwrap()
                .batch
                .i64("id")
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..50).filter(|&i| i != 7).collect::<Vec<_>>());
    let skipped = loader.stats_handle().skipped();
    assert_eq!(skipped.len(), 1);
    assert_eq!(
        (skipped[0].source.as_str(), skipped[0].record),
        ("gen:bad", 7)
    );
}

#[test]
fn a_sample_of_the_wrong_shape_names_field_expected_and_actual() {
    let loader = Loader::builder()
        .generator("shape", || {
            (0..10).map(|i| {
                let x = if i == 3 { vec![0.0; 5] } else { vec![0.0; 4] };
                let n = x.len();
                Sample::new()
                    .with("id", Values::I64(vec![i]), [])
                    .with("x", Values::F32(x), [n])
            })
        })
        .schema(SynthFormat::schema())
        .batch(2)
        .shuffle(0)
        .build()
        .unwrap();
    let error = loader
        .into_iter()
        .find_map(|b| b.err())
        .expect("the bad sample fails the pipeline")
        .to_string();
    assert_eq!(
        error,
        "gen:shape: record 3: field `x`: expected [4] f32, got [5] f32"
    );
}

#[test]
fn a_reader_that_panics_resumes_the_generator_exactly() {
    let panicked = Arc::new(AtomicBool::new(false));
    let p = panicked.clone();
    let out = run(Loader::builder()
        .generator("flaky", move || {
            let p = p.clone();
            (0..300).map(move |i| {
                if i == 123 && !p.swap(true, Ordering::SeqCst) {
                    panic!("generator bug at {i}");
                }
                sample(i)
            })
        })
        .schema(SynthFormat::schema())
        .chunk_records(10)
        .batch(16)
        .shuffle(40));
    assert!(panicked.load(Ordering::SeqCst));
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for id in out.iter().flat_map(|b| b.2.iter()) {
        *counts.entry(*id).or_default() += 1;
    }
    assert_eq!(counts.len(), 300);
    assert!(counts.values().all(|&c| c == 1));
}

#[test]
fn unknown_and_invalid_generator_names_are_clear_errors() {
    let mut reg = Registry::with_builtin();
    let mut gens = GeneratorFormat::new();
    gens.add(GeneratorSource::new("known", ids(0, 3))).unwrap();
    let dup = gens
        .add(GeneratorSource::new("known", ids(0, 3)))
        .unwrap_err();
    assert!(dup
        .to_string()
        .contains("two generator sources are named `known`"));
    let glob = gens
        .add(GeneratorSource::new("a*b", ids(0, 3)))
        .unwrap_err();
    assert!(glob.to_string().contains("not allowed"), "{glob}");
    gens.register(&mut reg);
    // A later generator format keeps the earlier as a fallback.
    let mut more = GeneratorFormat::new();
    more.add(GeneratorSource::new("later", ids(0, 2))).unwrap();
    more.register(&mut reg);
    for name in ["gen:known", "gen:later"] {
        assert!(
            reg.open(name, None, &OpenOptions::default()).is_ok(),
            "{name}"
        );
    }
    let e = reg
        .open("gen:nope", None, &OpenOptions::default())
        .err()
        .expect("unknown name");
    assert!(
        e.to_string().contains("no generator source named `nope`"),
        "{e}"
    );

    let e = Loader::builder()
        .generator("x y*", ids(0, 3))
        .schema(SynthFormat::schema())
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("not allowed"), "{e}");
    let e = Loader::builder()
        .generator("g", ids(0, 3))
        .format("jsonl")
        .schema(SynthFormat::schema())
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("FORMAT: prefix"), "{e}");
}

#[test]
fn start_record_skips_and_len_hint_counts() {
    let mut gens = GeneratorFormat::new();
    gens.add(GeneratorSource::new("n", ids(0, 10))).unwrap();
    let mut reg = Registry::empty();
    gens.register(&mut reg);
    let opts = OpenOptions {
        start_record: 4,
        ..OpenOptions::default()
    };
    let mut r = reg.open("gen:n", None, &opts).unwrap();
    assert_eq!(r.next_index(), 4);
    assert_eq!(r.len_hint(), Some(10));
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.location.to_string(), "gen:n: record 4");
    assert_eq!(rec.get("id").unwrap().values, Values::I64(vec![4]));
    let past = OpenOptions {
        start_record: 99,
        ..OpenOptions::default()
    };
    let mut r = reg.open("gen:n", None, &past).unwrap();
    assert!(r.next_record().unwrap().is_none());
    assert_eq!(r.len_hint(), Some(10));
}
