//! The skip policy's budgets: the fraction is judged on a pass's records at
//! its end (the same verdict with 1 or 8 readers), a skipped record is
//! counted once even when its file is retried, and the list of skipped
//! records is bounded.

mod common;

use common::{all_ids, ids_per_pass, synth_loader, Fault, SynthFormat};
use feedline_actors::{ErrorPolicy, PipelineError, MAX_SKIPPED_LISTED};

fn fraction(f: f64) -> ErrorPolicy {
    ErrorPolicy::Skip {
        max_bad: None,
        max_bad_fraction: Some(f),
    }
}

/// Files `counts`, records `bad` of f0 bad; read in order by `readers`.
fn run(
    counts: &[u64],
    bad: std::ops::Range<u64>,
    readers: usize,
    policy: ErrorPolicy,
) -> (
    std::collections::BTreeMap<u64, Vec<i64>>,
    Option<PipelineError>,
) {
    let mut synth = SynthFormat::with_files(counts);
    for r in bad {
        synth = synth.fault("f0", r, Fault::BadRecord);
    }
    let loader = synth_loader(synth.build())
        .readers(readers)
        .shuffle_files(false)
        .chunk_records(4)
        .batch(8)
        .passes(2)
        .error_policy(policy)
        .build()
        .unwrap();
    ids_per_pass(loader)
}

#[test]
fn the_fraction_verdict_does_not_depend_on_the_reader_count() {
    // f0 comes first with 5 bad of 40: early on, most records read are bad,
    // but over the pass 5 of 340 (1.5%) are, under the 5% budget.
    let counts = [40, 100, 100, 100];
    for readers in [1, 8] {
        let (per_pass, err) = run(&counts, 0..5, readers, fraction(0.05));
        assert!(err.is_none(), "{readers} readers: {err:?}");
        let lost: Vec<i64> = (0..5).collect();
        common::assert_exactly_once(&per_pass, &all_ids(&counts, &lost), 2);
    }
    // 30 bad of 80 (37.5%) is over a 10% budget, whatever the readers.
    for readers in [1, 8] {
        let (_, err) = run(&[40, 40], 0..30, readers, fraction(0.10));
        match err {
            Some(PipelineError::TooManyBad { bad, budget, .. }) => {
                assert_eq!(bad, 30, "{readers} readers");
                assert!(budget.contains("pass 0"), "{budget}");
            }
            other => panic!("{readers} readers: expected too many bad, got {other:?}"),
        }
    }
}

#[test]
fn a_skipped_record_is_counted_once_when_its_file_is_retried() {
    // Record 0 of f0 is bad and skipped; the reader then panics at record 2,
    // before sending anything more: its file resumes after the bad record.
    let synth = SynthFormat::with_files(&[20, 10])
        .fault("f0", 0, Fault::BadRecord)
        .fault("f0", 2, Fault::Panic { times: 1 })
        .build();
    let loader = synth_loader(synth)
        .readers(1)
        .shuffle_files(false)
        .chunk_records(8)
        .batch(4)
        .error_policy(ErrorPolicy::skip())
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none(), "{err:?}");
    common::assert_exactly_once(&per_pass, &all_ids(&[20, 10], &[0]), 1);
    let s = stats.snapshot();
    assert_eq!(s.reader_restarts, 1);
    assert_eq!(s.bad_records, 1, "{:?}", stats.skipped());
    assert_eq!(stats.skipped().len(), 1);
}

#[test]
fn the_skipped_list_keeps_the_first_records_and_the_count_all() {
    let n = MAX_SKIPPED_LISTED as u64 + 500;
    let mut synth = SynthFormat::with_files(&[n + 10]);
    for r in 0..n {
        synth = synth.fault("f0", r, Fault::BadRecord);
    }
    let loader = synth_loader(synth.build())
        .error_policy(ErrorPolicy::skip())
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none(), "{err:?}");
    let lost: Vec<i64> = (0..n as i64).collect();
    common::assert_exactly_once(&per_pass, &all_ids(&[n + 10], &lost), 1);
    assert_eq!(stats.snapshot().bad_records, n);
    let listed = stats.skipped();
    assert_eq!(listed.len(), MAX_SKIPPED_LISTED);
    assert!(listed.iter().enumerate().all(|(i, s)| s.record == i as u64));
}
