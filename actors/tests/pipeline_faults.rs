//! Faults in the actor pipeline: panicking readers are replaced and their
//! file resumes where it stopped; the skip policy drops exactly the bad
//! records and says where they were; the fail policy stops with the place.

mod common;

use std::time::Duration;

use common::{all_ids, ids_per_pass, synth_loader, synth_registry, Fault, SynthFormat};
use feedline_actors::{ErrorPolicy, Loader};

fn builder(synth: SynthFormat, readers: usize, passes: u64) -> feedline_actors::LoaderBuilder {
    synth_loader(synth)
        .readers(readers)
        .passes(passes)
        .batch(10)
        .shuffle(25)
        .chunk_records(8)
}

#[test]
fn panicking_reader_is_replaced_and_nothing_is_lost_or_repeated() {
    let counts = [40, 90, 17, 64];
    for readers in [1, 2, 4] {
        for det in [false, true] {
            let synth = SynthFormat::with_files(&counts)
                .fault("f1", 50, Fault::Panic { times: 2 })
                .fault("f3", 3, Fault::Panic { times: 1 })
                .build();
            let loader = builder(synth, readers, 2)
                .deterministic(det)
                .build()
                .unwrap();
            let stats = loader.stats_handle();
            let (per_pass, err) = ids_per_pass(loader);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(per_pass.len(), 2);
            for (p, mut ids) in per_pass {
                ids.sort();
                assert_eq!(ids, all_ids(&counts, &[]), "pass {p}, readers {readers}");
            }
            assert_eq!(stats.snapshot().reader_restarts, 3);
        }
    }
}

#[test]
fn a_reader_that_always_panics_fails_the_pipeline_with_the_place() {
    let synth = SynthFormat::with_files(&[30, 30])
        .fault("f1", 12, Fault::Panic { times: 100 })
        .build();
    let loader = builder(synth, 2, 1).build().unwrap();
    let (_, err) = ids_per_pass(loader);
    let msg = err.expect("an error").to_string();
    assert!(msg.contains("synth:f1") || msg.contains("f1"), "{msg}");
    assert!(
        msg.contains("record 8") || msg.contains("record 12"),
        "{msg}"
    );
    assert!(msg.contains("panicked"), "{msg}");
}

#[test]
fn skip_policy_drops_exactly_the_bad_records_and_lists_them() {
    let counts = [40, 90, 17];
    let synth = SynthFormat::with_files(&counts)
        .fault("f0", 5, Fault::BadRecord)
        .fault("f1", 60, Fault::BadRestOfFile)
        .fault("f2", 16, Fault::BadRecord)
        .build();
    let loader = builder(synth, 2, 2)
        .error_policy(ErrorPolicy::skip())
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none(), "{err:?}");
    let mut lost: Vec<i64> = vec![5, 2_000_016];
    lost.extend((60..90).map(|i| 1_000_000 + i));
    for (_, mut ids) in per_pass {
        ids.sort();
        assert_eq!(ids, all_ids(&counts, &lost));
    }
    let skipped = stats.skipped();
    assert_eq!(skipped.len(), 6, "{skipped:?}"); // 3 places × 2 passes
    assert!(skipped.iter().any(|s| s.source == "synth:f1"
        && s.record == 60
        && s.rest_of_file
        && s.records == 30
        && s.offset == Some(6000)));
    // The unreadable rest of f1 loses the 30 records it held, not one.
    assert_eq!(stats.snapshot().bad_records, 2 * (1 + 30 + 1));
    assert!(skipped
        .iter()
        .any(|s| s.source == "synth:f0" && s.record == 5 && !s.rest_of_file));
}

#[test]
fn skip_policy_budget_fails_once_exceeded() {
    let mut synth = SynthFormat::with_files(&[100]);
    for r in [3, 9, 27, 50] {
        synth = synth.fault("f0", r, Fault::BadRecord);
    }
    let loader = builder(synth.build(), 1, 1)
        .error_policy(ErrorPolicy::Skip {
            max_bad: Some(3),
            max_bad_fraction: None,
        })
        .build()
        .unwrap();
    let (_, err) = ids_per_pass(loader);
    let msg = err.expect("budget exceeded").to_string();
    assert!(
        msg.contains("too many bad records: 4 skipped, budget 3 records"),
        "{msg}"
    );
    assert!(msg.contains("record 50"), "{msg}");
}

#[test]
fn fail_policy_gives_every_consumer_the_place() {
    let synth = SynthFormat::with_files(&[30, 30, 30])
        .fault("f2", 21, Fault::BadRecord)
        .build();
    let loader = builder(synth, 3, 1).devices(3).build().unwrap();
    let iters: Vec<_> = (0..3).map(|d| loader.device_iter(d)).collect();
    let handles: Vec<_> = iters
        .into_iter()
        .map(|it| {
            std::thread::spawn(move || {
                let mut last = None;
                for x in it {
                    if let Err(e) = x {
                        last = Some(e.to_string());
                    }
                }
                last
            })
        })
        .collect();
    for h in handles {
        let msg = h.join().unwrap().expect("every device sees the error");
        assert!(
            msg.contains("synth:f2: record 21, offset 2100: injected bad record"),
            "{msg}"
        );
    }
    drop(loader);
}

#[test]
fn missing_file_fails_with_its_name() {
    let synth = SynthFormat::with_files(&[10]).build();
    let mut specs = synth.specs();
    specs.push("synth:nope".into());
    let loader = Loader::builder()
        .registry(synth_registry(synth))
        .files(specs)
        .schema(SynthFormat::schema())
        .build()
        .unwrap();
    let (_, err) = ids_per_pass(loader);
    let msg = err.expect("missing file").to_string();
    assert!(msg.contains("nope"), "{msg}");
}

#[test]
fn slow_reads_still_deliver_everything() {
    let counts = [20, 20, 20];
    let synth = SynthFormat::with_files(&counts)
        .fault("f0", 3, Fault::Slow(Duration::from_millis(30)))
        .fault("f1", 9, Fault::Slow(Duration::from_millis(30)))
        .build();
    let loader = builder(synth, 2, 1).deterministic(true).build().unwrap();
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none());
    let mut ids = per_pass[&0].clone();
    ids.sort();
    assert_eq!(ids, all_ids(&counts, &[]));
}
