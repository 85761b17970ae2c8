//! The push handle: producers on plain threads (or actors) push instances
//! and ready-made batches; every one reaches exactly one device once; bad
//! shapes are refused at push time; a producer blocked on a full pipeline is
//! released by a consumer, by `close`, or by dropping the loader.

mod common;

use feedline_actors::{Batching, Feeding, Inputs, Order, Reading};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use common::{ids, sample, SynthFormat};
use feedline::format::generator::{append_sample, Sample};
use feedline::{collate_chunks, Batch, Chunk, DType, Origin, Schema, SourceId, Values};
use feedline_actors::{
    FeedHandle, Loader, LoaderBuilder, Pipeline, PipelineConfig, Pop, Popped, PushBatch, PushError,
    PushSample,
};

/// A ready-made batch of `ids`, collated under `schema`.
fn batch_of(schema: &Schema, ids: impl IntoIterator<Item = i64>) -> Batch {
    let mut chunk = Chunk::new(schema);
    for id in ids {
        let x = Values::F32(vec![id as f32; 4]);
        let dims: Vec<usize> = schema.field("x").unwrap().fixed_dims();
        let s = Sample::new()
            .with("id", Values::I64(vec![id]), [])
            .with("x", x, dims);
        append_sample(
            &mut chunk,
            &s,
            Origin::new(SourceId::intern("made"), id as u64),
        )
        .unwrap();
    }
    collate_chunks(schema, [&chunk]).unwrap()
}

/// A pipeline that is full after a handful of pushes.
fn tight() -> LoaderBuilder {
    Loader::builder()
        .schema(SynthFormat::schema())
        .capacity(1)
        .batch(1)
        .shuffle(0)
        .chunk_records(1)
        .chunks_in_flight(1)
}

/// Push `0..n` on a thread of its own; `progress` counts accepted pushes.
/// Returns the first error, if any.
fn producer(
    feed: FeedHandle,
    n: i64,
    progress: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Option<PushError<Sample>>> {
    std::thread::spawn(move || {
        for i in 0..n {
            if let Err(e) = feed.push(sample(i)) {
                return Some(e);
            }
            progress.fetch_add(1, Ordering::SeqCst);
        }
        None
    })
}

/// Wait (up to 10 s) until a push is held back by the full pipeline — the
/// event `PushStats::waiting` reports — and return how many were accepted then.
fn held_back(feed: &FeedHandle, progress: &AtomicU64) -> u64 {
    let t0 = Instant::now();
    while feed.stats().waiting == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "never held back");
        std::thread::yield_now();
    }
    progress.load(Ordering::SeqCst)
}

/// Wait (up to 5 s) for `progress` to pass `n`.
fn passes(progress: &AtomicU64, n: u64) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if progress.load(Ordering::SeqCst) > n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn every_pushed_instance_and_batch_reaches_exactly_one_device_once() {
    for round_robin in [false, true] {
        let (loader, feed) = Loader::builder()
            .schema(SynthFormat::schema())
            .devices(4)
            .round_robin(round_robin)
            .capacity(2)
            .batch(8)
            .shuffle(50)
            .chunk_records(16)
            .build_with_feed()
            .unwrap();
        let mut producers = Vec::new();
        for p in 0..3i64 {
            let feed = feed.clone();
            producers.push(std::thread::spawn(move || {
                for i in 0..300 {
                    feed.push(sample(p * 1000 + i)).unwrap();
                }
            }));
        }
        {
            let feed = feed.clone();
            let s = SynthFormat::schema();
            producers.push(std::thread::spawn(move || {
                for b in 0..20i64 {
                    let base = 9000 + b * 5;
                    feed.push_batch(batch_of(&s, base..base + 5)).unwrap();
                }
            }));
        }
        let stats_feed = feed.clone();
        drop(feed);
        let devices: Vec<_> = (0..4)
            .map(|d| {
                let it = loader.device_iter(d);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for b in it {
                        let b = b.unwrap();
                        if round_robin {
                            assert_eq!(b.seq % 4, d as u64, "round-robin lane");
                        }
                        got.push(b);
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let stats = stats_feed.stats();
        drop(stats_feed); // the last handle: the stream ends
        let mut count: HashMap<i64, usize> = HashMap::new();
        let mut seqs = Vec::new();
        for d in devices {
            for b in d.join().unwrap() {
                seqs.push(b.seq);
                for (id, origin) in ids(&b).into_iter().zip(b.batch.origins()) {
                    *count.entry(id).or_default() += 1;
                    if id < 9000 {
                        assert_eq!(&*origin.source.name(), "push");
                    } else {
                        assert_eq!(&*origin.source.name(), "made");
                        assert_eq!(origin.record, id as u64);
                    }
                }
            }
        }
        let want: Vec<i64> = (0..3)
            .flat_map(|p| p * 1000..p * 1000 + 300)
            .chain(9000..9100)
            .collect();
        assert_eq!(count.len(), want.len(), "round robin {round_robin}");
        assert!(want.iter().all(|id| count.get(id) == Some(&1)));
        seqs.sort();
        assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
        assert_eq!(
            (stats.instances, stats.batches, stats.batch_instances),
            (900, 20, 100)
        );
        assert_eq!(stats.refused, 0);
    }
}

#[test]
fn a_shape_mismatch_is_refused_naming_field_expected_and_actual() {
    let (mut loader, feed) = Loader::builder()
        .schema(SynthFormat::schema())
        .batch(4)
        .shuffle(0)
        .build_with_feed()
        .unwrap();
    let refused = |s: Sample| -> String {
        match feed.push(s) {
            Err(PushError::Invalid(e, back)) => {
                assert!(back.get("x").is_some() || back.get("id").is_some());
                e.to_string()
            }
            other => panic!("not refused: {other:?}"),
        }
    };
    let wrong_dims = sample(1).with("x", Values::F32(vec![0.0; 5]), [5]);
    let e = refused(wrong_dims);
    assert!(
        e.ends_with("field `x`: expected [4] f32, got [5] f32"),
        "{e}"
    );
    let same_count_other_dims = sample(2).with("x", Values::F32(vec![0.0; 4]), [2, 2]);
    let e = refused(same_count_other_dims);
    assert!(
        e.ends_with("field `x`: expected [4] f32, got [2, 2] f32"),
        "{e}"
    );
    let inconsistent = sample(3).with("x", Values::F32(vec![0.0; 3]), [4]);
    let e = refused(inconsistent);
    assert!(
        e.contains("field `x`: expected [4] f32, got [4] f32 holding 3 elements"),
        "{e}"
    );
    let e = refused(Sample::new().with("x", Values::F32(vec![0.0; 4]), [4]));
    assert!(
        e.contains("field `id`: expected [] i64, got no such field"),
        "{e}"
    );
    let e = refused(sample(4).with("x", Values::Bool(vec![true; 4]), [4]));
    assert!(
        e.contains("field `x`: expected [4] f32, got [4] bool"),
        "{e}"
    );
    let e = refused(sample(5).with("id", Values::I64(vec![1, 2]), [2]));
    assert!(e.contains("push: record"), "{e}");
    assert!(
        e.contains("field `id`: expected [] i64, got [2] i64"),
        "{e}"
    );

    // Batches: dims checked per field for the batch's size.
    let other = Schema::builder()
        .field("id", DType::I64, [])
        .field("x", DType::F32, [2, 2])
        .build()
        .unwrap();
    let e = feed.push_batch(batch_of(&other, 0..3)).unwrap_err();
    assert!(matches!(e, PushError::Invalid(..)));
    let text = e.to_string();
    assert!(
        text.contains("pushed batch 0: field `x`: expected [3, 4] f32, got [3, 2, 2] f32"),
        "{text}"
    );
    assert_eq!(e.into_inner().len(), 3, "the batch comes back");
    let missing = Schema::builder()
        .field("id", DType::I64, [])
        .build()
        .unwrap();
    let mut chunk = Chunk::new(&missing);
    append_sample(
        &mut chunk,
        &sample(1),
        Origin::new(SourceId::intern("m"), 0),
    )
    .unwrap();
    let text = feed
        .push_batch(collate_chunks(&missing, [&chunk]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("1 fields, the schema has 2 (id, x)"),
        "{text}"
    );

    // Nothing of the refused items was pushed: only the good ones arrive.
    for i in 100..106 {
        feed.push(sample(i)).unwrap();
    }
    feed.push_batch(batch_of(&SynthFormat::schema(), 200..202))
        .unwrap();
    assert_eq!(feed.stats().refused, 8);
    drop(feed);
    let mut got: Vec<i64> = loader.iter().flat_map(|b| ids(&b.unwrap())).collect();
    got.sort();
    assert_eq!(got, vec![100, 101, 102, 103, 104, 105, 200, 201]);
}

#[test]
fn a_blocked_producer_is_released_by_a_consumer_pop() {
    let (mut loader, feed) = tight().build_with_feed().unwrap();
    let progress = Arc::new(AtomicU64::new(0));
    let t = producer(feed.clone(), 40, progress.clone());
    let n = held_back(&feed, &progress);
    drop(feed);
    assert!(n < 40, "the producer should be held back, pushed {n}");
    let first = loader.iter().next().unwrap().unwrap();
    assert_eq!(ids(&first), vec![0]);
    assert!(passes(&progress, n), "a pop frees room for the producer");
    // Drain: the producer finishes, its handle drops, the stream ends.
    let rest: Vec<i64> = loader.iter().flat_map(|b| ids(&b.unwrap())).collect();
    assert!(t.join().unwrap().is_none());
    assert_eq!(rest, (1..40).collect::<Vec<_>>());
}

#[test]
fn a_blocked_producer_is_released_by_close() {
    let (mut loader, feed) = tight().build_with_feed().unwrap();
    let progress = Arc::new(AtomicU64::new(0));
    let t = producer(feed.clone(), 40, progress.clone());
    assert!(held_back(&feed, &progress) < 40);
    let t0 = Instant::now();
    feed.close();
    let err = t.join().unwrap().expect("the blocked push is refused");
    // Read after the producer ended: a credit may have come back between
    // the observation and the close.
    let n = progress.load(Ordering::SeqCst);
    // A hang detector, not a speed check (the release is the event).
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(matches!(err, PushError::Closed(_)), "{err:?}");
    assert_eq!(
        err.into_inner(),
        sample(n as i64),
        "the refused sample comes back"
    );
    assert!(feed.is_closed());
    assert!(matches!(feed.push(sample(99)), Err(PushError::Closed(_))));
    assert!(matches!(
        feed.try_push_batch(batch_of(&SynthFormat::schema(), 0..1)),
        Err(PushError::Closed(_))
    ));
    // Everything accepted before the close, then the end of data.
    let got: Vec<i64> = loader.iter().flat_map(|b| ids(&b.unwrap())).collect();
    assert_eq!(got, (0..n as i64).collect::<Vec<_>>());
}

#[test]
fn a_blocked_producer_is_released_by_dropping_the_loader() {
    let (loader, feed) = tight().build_with_feed().unwrap();
    let progress = Arc::new(AtomicU64::new(0));
    let t = producer(feed.clone(), 40, progress.clone());
    let batch_feed = feed.clone();
    let s = SynthFormat::schema();
    let batch_pusher = std::thread::spawn(move || {
        // Also held back, waiting for a credit.
        batch_feed.push_batch(batch_of(&s, 500..502))
    });
    held_back(&feed, &progress);
    let t0 = Instant::now();
    drop(loader);
    let err = t.join().unwrap().expect("the blocked push fails");
    // A hang detector, not a speed check (dropping the loader may wait
    // for its threads; the release is the event).
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert!(matches!(err, PushError::Stopped(..)), "{err:?}");
    assert!(err.to_string().contains("stopped"), "{err}");
    match batch_pusher.join().unwrap() {
        Ok(()) => {} // it got a credit before the loader went
        Err(e) => assert!(matches!(e, PushError::Stopped(..)), "{e:?}"),
    }
    // The consumers are gone: pushing is an error, never a hang.
    assert!(matches!(feed.push(sample(1)), Err(PushError::Stopped(..))));
    assert!(matches!(
        feed.try_push(sample(1)),
        Err(PushError::Stopped(..))
    ));
    assert!(feed.is_closed());
}

#[test]
fn try_push_and_push_timeout_do_not_block() {
    let (mut loader, feed) = tight().build_with_feed().unwrap();
    let mut accepted = 0;
    let t0 = Instant::now();
    // Fill the pipeline. `try_push` never waits; when it says `Full`, a timed
    // push either gets the room an acknowledgement still on its way frees, or
    // times out after the time asked — and hands the instance back.
    let mut timeouts = 0;
    while timeouts == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "never full");
        match feed.try_push(sample(accepted)) {
            Ok(()) => accepted += 1,
            Err(PushError::Full(s)) => {
                assert_eq!(s, sample(accepted));
                let t1 = Instant::now();
                match feed.push_timeout(sample(accepted), Duration::from_millis(80)) {
                    Ok(()) => accepted += 1,
                    Err(PushError::Timeout(d, s)) => {
                        assert!(t1.elapsed() >= Duration::from_millis(80));
                        assert_eq!(d, Duration::from_millis(80));
                        assert_eq!(s, sample(accepted));
                        timeouts += 1;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(accepted > 0);
    assert!(feed.stats().blocked >= Duration::from_millis(80));
    assert_eq!(feed.stats().waiting, 0, "no push waits any more");
    // Batches likewise: refused while full, handed back; a late credit lets one in.
    let mut batch_ids: Vec<i64> = Vec::new();
    let mut next_batch_id = 1000;
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never full for batches"
        );
        let b = batch_of(&SynthFormat::schema(), next_batch_id..next_batch_id + 1);
        match feed.try_push_batch(b) {
            Ok(()) => {
                batch_ids.push(next_batch_id);
                next_batch_id += 1;
                continue;
            }
            Err(PushError::Full(back)) => {
                assert_eq!(back.len(), 1, "the refused batch comes back whole");
            }
            Err(e) => panic!("{e}"),
        }
        let b = batch_of(&SynthFormat::schema(), next_batch_id..next_batch_id + 1);
        match feed.push_batch_timeout(b, Duration::from_millis(20)) {
            Ok(()) => {
                batch_ids.push(next_batch_id);
                next_batch_id += 1;
            }
            Err(PushError::Timeout(d, back)) => {
                assert_eq!(d, Duration::from_millis(20));
                assert_eq!(back.len(), 1);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    feed.close();
    let mut got: Vec<i64> = loader.iter().flat_map(|b| ids(&b.unwrap())).collect();
    got.sort_unstable();
    let mut want: Vec<i64> = (0..accepted).collect();
    want.extend(&batch_ids);
    assert_eq!(got, want, "exactly what was accepted, once");
}

#[test]
fn dropping_every_handle_ends_the_stream_and_push_mode_is_checked() {
    let (mut loader, feed) = Loader::builder()
        .schema(SynthFormat::schema())
        .batch(3)
        .build_with_feed()
        .unwrap();
    let second = feed.clone();
    feed.push(sample(1)).unwrap();
    drop(feed);
    second.push(sample(2)).unwrap();
    assert!(!second.is_closed());
    drop(second);
    let got: Vec<i64> = loader.iter().flat_map(|b| ids(&b.unwrap())).collect();
    assert_eq!(got.len(), 2);

    let e = Loader::builder().batch(3).build_with_feed().unwrap_err();
    assert!(e.to_string().contains("push mode needs a schema"), "{e}");
    let e = Loader::builder()
        .schema(SynthFormat::schema())
        .files(["a.jsonl"])
        .build_with_feed()
        .unwrap_err();
    assert!(e.to_string().contains("push mode reads no files"), "{e}");
    let e = Loader::builder()
        .schema(SynthFormat::schema())
        .push_source("p")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("build_with_feed"), "{e}");
}

#[test]
fn one_producer_in_deterministic_mode_gives_the_same_batches() {
    let run = || {
        let (loader, feed) = Loader::builder()
            .schema(SynthFormat::schema())
            .batch(7)
            .shuffle(40)
            .chunk_records(9)
            .seed(11)
            .deterministic(true)
            .build_with_feed()
            .unwrap();
        let t = std::thread::spawn(move || {
            for i in 0..200 {
                feed.push(sample(i)).unwrap();
                if i % 50 == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        let out: Vec<Vec<i64>> = loader.into_iter().map(|b| ids(&b.unwrap())).collect();
        t.join().unwrap();
        out
    };
    let a = run();
    let b = run();
    assert_eq!(a, b);
    let mut all: Vec<i64> = a.concat();
    assert_ne!(all, (0..200).collect::<Vec<_>>(), "shuffled");
    all.sort();
    assert_eq!(all, (0..200).collect::<Vec<_>>());
}

#[test]
fn actors_push_through_the_recipient_answered_when_there_is_room() {
    let sys = System::new();
    let (got, mut pipeline) = sys.block_on(async {
        let config = PipelineConfig {
            inputs: Inputs {
                schema: Some(SynthFormat::schema()),
                push: Some("actors".into()),
                ..Default::default()
            },
            reading: Reading {
                chunk_records: 2,
                chunks_in_flight: 1,
                ..Default::default()
            },
            order: Order {
                shuffle: 0,
                ..Default::default()
            },
            batching: Batching {
                batch: feedline::batch_policy::BatchPolicy::Fixed(4),
                ..Default::default()
            },
            feeding: Feeding {
                capacity: 1,
                ..Default::default()
            },
            ..PipelineConfig::default()
        };
        let mut pipeline = Pipeline::start(config).unwrap();
        let feed = pipeline.take_feed_handle().expect("push mode");
        assert!(pipeline.take_feed_handle().is_none());
        let samples = feed.recipient();
        let batches = feed.batch_recipient();
        let queue = pipeline.feed();
        let producer = async move {
            let bad = sample(0).with("x", Values::F32(vec![0.0; 2]), [2]);
            match samples.send(PushSample(bad)).await.unwrap() {
                Err(PushError::Invalid(e, _)) => {
                    assert!(e.to_string().contains("got [2] f32"), "{e}")
                }
                other => panic!("{other:?}"),
            }
            for i in 0..100 {
                samples.send(PushSample(sample(i))).await.unwrap().unwrap();
            }
            batches
                .send(PushBatch(batch_of(&SynthFormat::schema(), 1000..1004)))
                .await
                .unwrap()
                .unwrap();
            feed.close();
            let late = samples.send(PushSample(sample(7))).await.unwrap();
            assert!(matches!(late, Err(PushError::Closed(_))));
        };
        let consumer = async move {
            let mut got = Vec::new();
            loop {
                // A slow consumer: the producer's answers wait for room.
                actix::clock::sleep(Duration::from_millis(1)).await;
                match queue.send(Pop { consumer: 0 }).await.unwrap().unwrap() {
                    Popped::Batch(d) => got.extend(ids(&d)),
                    Popped::EndOfPass(_) => {}
                    Popped::EndOfData => break got,
                }
            }
        };
        let ((), got) = futures::join!(producer, consumer);
        let done = pipeline.finished().await;
        assert!(done.is_ok(), "{done:?}");
        (got, pipeline)
    });
    let mut got = got;
    got.sort();
    let want: Vec<i64> = (0..100).chain(1000..1004).collect();
    assert_eq!(got, want);
    assert!(pipeline.take_feed_handle().is_none());
    pipeline.join();
}

#[test]
fn ragged_and_bytes_fields_are_checked_at_push_time_too() {
    use feedline::{BatchField, Ragged};
    let schema = Schema::builder()
        .ragged("tokens", DType::I64, Ragged::Offsets)
        .ragged_with_dims("pts", DType::F32, [2], Ragged::Padded)
        .field("name", DType::Bytes, [])
        .build()
        .unwrap();
    let good = |i: i64| {
        let n = (i % 3) as usize;
        Sample::new()
            .with("tokens", Values::I64(vec![i; n + 1]), [n + 1])
            .with("pts", Values::F32(vec![i as f32; 2 * n]), [n, 2])
            .with_tensor(
                "name",
                feedline::Tensor::scalar(Values::Bytes(
                    [format!("n{i}").as_bytes()].into_iter().collect(),
                )),
            )
    };
    let (mut loader, feed) = Loader::builder()
        .schema(schema.clone())
        .batch(4)
        .shuffle(0)
        .build_with_feed()
        .unwrap();
    let e = feed
        .push(good(1).with("pts", Values::F32(vec![0.0; 3]), [3]))
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("field `pts`: expected [?, 2] f32, got [3] f32"),
        "{e}"
    );
    let e = feed
        .push(good(1).with("tokens", Values::I64(vec![1; 4]), [2, 2]))
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("field `tokens`: expected [?] i64, got [2, 2] i64"),
        "{e}"
    );
    let mut no_tokens = good(2);
    no_tokens.fields.retain(|(n, _)| n != "tokens");
    feed.push(no_tokens).unwrap(); // a ragged field may be missing: empty
    for i in 10..13 {
        feed.push(good(i)).unwrap();
    }

    // A ready-made batch in the schema's layouts is taken …
    let mut chunk = Chunk::new(&schema);
    for i in 20..23 {
        append_sample(
            &mut chunk,
            &good(i),
            Origin::new(SourceId::intern("made"), i as u64),
        )
        .unwrap();
    }
    let made = collate_chunks(&schema, [&chunk]).unwrap();
    feed.push_batch(made.clone()).unwrap();
    // … one whose parts do not fit is refused, naming the field.
    let tampered = |f: &dyn Fn(&mut Vec<BatchField>)| {
        let mut fields = made.fields().to_vec();
        f(&mut fields);
        let b = Batch::from_parts(&schema, fields, made.origins().to_vec()).unwrap();
        feed.push_batch(b).unwrap_err().to_string()
    };
    let e = tampered(&|fs| fs[0].offsets = Some(vec![0, 2, 1, 3]));
    assert!(
        e.contains("field `tokens`: offsets [0, 2, 1, 3] for 3 instances"),
        "{e}"
    );
    let e = tampered(&|fs| fs[0].offsets = Some(vec![0, 1, 2, 4]));
    assert!(
        e.contains("field `tokens`: expected [total] i64 with 4 offsets, got [6] i64 with offsets"),
        "{e}"
    );
    let e = tampered(&|fs| {
        fs[1].lengths = None;
        fs[1].offsets = Some(vec![0, 0, 1, 3]);
    });
    assert!(
        e.contains("field `pts`: expected [3, max, 2] f32 with 3 lengths"),
        "{e}"
    );
    let e = tampered(&|fs| fs[1].lengths = Some(vec![0, 1, 9]));
    assert!(
        e.contains("field `pts`: a length 9 beyond the padded extent 2"),
        "{e}"
    );
    let e = tampered(&|fs| fs[2].lengths = Some(vec![1, 1, 1]));
    assert!(
        e.contains("field `name`: expected [3] bytes, got [3] bytes with lengths"),
        "{e}"
    );

    drop(feed);
    let mut names = Vec::new();
    let mut tokens = 0;
    for b in loader.iter() {
        let b = b.unwrap();
        names.extend(
            b.batch
                .bytes("name")
                .unwrap()
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned()),
        );
        tokens += b.batch.i64("tokens").unwrap().len();
    }
    names.sort();
    assert_eq!(names, ["n10", "n11", "n12", "n2", "n20", "n21", "n22"]);
    // 0 (missing) + 2 + 3 + 1 + (3 + 1 + 2)
    assert_eq!(tokens, 12);
}
