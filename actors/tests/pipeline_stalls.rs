//! A reader hung in I/O: the watchdog reports it (file, how long) and, by
//! policy, gives its file to a fresh reader from the record it had reached,
//! or fails the pass with a clear error. A consumer waiting with a timeout is
//! told which stage is stuck. Nothing is lost or repeated, nothing hangs.

mod common;

use std::time::{Duration, Instant};

use common::{all_ids, block_at, Gate, Hooked, SynthFormat};
use feedline_actors::{Loader, LoaderBuilder, PipelineError, StallPolicy};

/// A loader of `specs` through a [`Hooked`] registry: batches of 10, a
/// pool of 30, chunks of 8 records.
fn hooked(registry: feedline::format::Registry, specs: Vec<String>) -> LoaderBuilder {
    Loader::builder()
        .registry(registry)
        .files(specs)
        .schema(SynthFormat::schema())
        .batch(10)
        .shuffle(30)
        .chunk_records(8)
}

fn ids(loader: Loader) -> Result<Vec<i64>, PipelineError> {
    let mut v = Vec::new();
    for d in loader {
        v.extend(common::ids(&d?));
    }
    v.sort();
    Ok(v)
}

#[test]
fn a_hung_reader_is_replaced_and_its_file_resumes_where_it_stopped() {
    for det in [false, true] {
        let counts = [60u64, 90, 40];
        // The first reader of f1 hangs at record 35 until the test lets it
        // go — after the whole pass was delivered without it.
        let synth = SynthFormat::with_files(&counts).build();
        let specs = synth.specs();
        let gate = Gate::default();
        let held = gate.clone();
        let registry = Hooked::registry(synth, move |o| {
            (o.file == "f1" && o.earlier == 0).then(|| block_at(35, held.clone(), || {}))
        });
        let mut loader = hooked(registry, specs)
            .readers(2)
            .deterministic(det)
            .stall_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let stats = loader.stats_handle();
        let mut got = Vec::new();
        loop {
            match loader.next_timeout(Duration::from_secs(30)) {
                None => break,
                Some(Ok(d)) => got.extend(common::ids(&d)),
                Some(Err(e)) => panic!("det {det}: {e}"),
            }
        }
        got.sort();
        assert_eq!(got, all_ids(&counts, &[]), "deterministic {det}");
        let snap = stats.snapshot();
        // A heavily loaded machine may see another slow read as a stall too: still exactly once.
        assert!(snap.reader_stalls >= 1);
        assert!(snap.reader_restarts >= 1);
        gate.open();
        drop(loader);
    }
}

#[test]
fn stall_policy_fail_names_the_file_and_record() {
    // The first reader of f0 is held at record 20 until the test ends; the
    // time-out is long enough that no read merely slowed by a loaded
    // machine counts as a stall first.
    let synth = SynthFormat::with_files(&[50, 50]).build();
    let specs = synth.specs();
    let gate = Gate::default();
    let held = gate.clone();
    let registry = Hooked::registry(synth, move |o| {
        (o.file == "f0" && o.earlier == 0).then(|| block_at(20, held.clone(), || {}))
    });
    let loader = hooked(registry, specs)
        .readers(1)
        .stall_timeout(Duration::from_secs(1))
        .on_stall(StallPolicy::Fail)
        .build()
        .unwrap();
    let err = ids(loader).expect_err("the pass fails");
    gate.open();
    let msg = err.to_string();
    assert!(matches!(err, PipelineError::ReaderStuck { .. }), "{msg}");
    assert!(
        msg.contains("synth:f0") && msg.contains("record 16"),
        "{msg}"
    );
}

/// One reader of one file of 40 records, held at `record` until the gate
/// opens; no watchdog. Returns once the reader is held (an event, whatever
/// the machine's load).
fn hanging_at(record: u64) -> (Loader, Gate) {
    let synth = SynthFormat::with_files(&[40]).build();
    let specs = synth.specs();
    let gate = Gate::default();
    let held = gate.clone();
    let (reached_tx, reached_rx) = std::sync::mpsc::channel();
    let reached_tx = std::sync::Mutex::new(Some(reached_tx));
    let registry = Hooked::registry(synth, move |o| {
        if o.file != "f0" {
            return None;
        }
        let tx = reached_tx.lock().unwrap().take()?;
        Some(block_at(record, held.clone(), move || {
            let _ = tx.send(());
        }))
    });
    let loader = hooked(registry, specs)
        .readers(1)
        .no_stall_timeout()
        .build()
        .unwrap();
    reached_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the reader reached the record");
    (loader, gate)
}

/// Nothing was lost: the rest of the pass arrives after the hang.
fn assert_the_rest_arrives(mut loader: Loader, gate: Gate) {
    gate.open();
    let mut n = 0;
    while let Some(d) = loader.next_timeout(Duration::from_secs(30)) {
        n += d.unwrap().batch.len();
    }
    assert_eq!(n, 40);
}

#[test]
fn a_pop_timeout_says_which_stage_is_stuck() {
    let (mut loader, gate) = hanging_at(0);
    let err = loader
        .next_timeout(Duration::from_millis(150))
        .expect("an item")
        .expect_err("times out");
    let msg = err.to_string();
    assert!(msg.contains("timed out after"), "{msg}");
    assert!(msg.contains("feed queue holds 0 batches"), "{msg}");
    assert!(
        msg.contains("reader 0 has been reading synth:f0 at record 0 for"),
        "{msg}"
    );
    assert_the_rest_arrives(loader, gate);
}

#[test]
fn a_pop_timeout_says_when_the_shuffle_stage_last_received_a_chunk() {
    // Chunks of 8: records 0..16 arrive, then the reader hangs at record 20
    // and the pool (30) has not started drawing.
    let (mut loader, gate) = hanging_at(20);
    let stats = loader.stats_handle();
    let t0 = Instant::now();
    while stats.snapshot().shuffle_batch.records < 16 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no chunk came");
        std::thread::sleep(Duration::from_millis(1));
    }
    let err = loader
        .next_timeout(Duration::from_millis(50))
        .expect("an item")
        .expect_err("times out");
    let msg = err.to_string();
    assert!(
        msg.contains("the shuffle stage last received a chunk"),
        "{msg}"
    );
    assert_the_rest_arrives(loader, gate);
}

#[test]
fn a_reader_fenced_as_it_finishes_its_file_is_replaced_once_and_loses_nothing() {
    for det in [false, true] {
        let counts = [24u64, 40, 16];
        let synth = SynthFormat::with_files(&counts).build();
        let specs = synth.specs();
        // The first reader of f0 is held in its last read (the one that
        // finds the end of the file) until the file's next opening — the
        // fresh reader the watchdog gives it to — lets it go.
        let gate = Gate::default();
        let registry = Hooked::registry(synth, move |o| match (o.file, o.earlier) {
            ("f0", 0) => Some(block_at(o.records, gate.clone(), || {})),
            ("f0", _) => {
                gate.open();
                None
            }
            _ => None,
        });
        let loader = hooked(registry, specs)
            .readers(2)
            .passes(2)
            .deterministic(det)
            // Long enough that no reader merely slowed by a loaded machine
            // is fenced too: the count below is exact.
            .stall_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let stats = loader.stats_handle();
        let mut per_pass = std::collections::BTreeMap::new();
        let mut loader = loader;
        loop {
            match loader.next_timeout(Duration::from_secs(30)) {
                None => break,
                Some(Ok(d)) => per_pass
                    .entry(d.pass)
                    .or_insert_with(Vec::new)
                    .extend(common::ids(&d)),
                Some(Err(e)) => panic!("det {det}: {e}"),
            }
        }
        common::assert_exactly_once(&per_pass, &all_ids(&counts, &[]), 2);
        let s = stats.snapshot();
        assert_eq!(s.reader_stalls, 1, "det {det}: one reader fenced");
    }
}

#[test]
fn a_stalled_first_input_fails_start_up_instead_of_hanging() {
    for infer in [true, false] {
        let synth = SynthFormat::with_files(&[10, 10]).build();
        let specs = synth.specs();
        // Every open blocks until the gate opens.
        let gate = Gate::default();
        let shut = gate.clone();
        let registry = Hooked::registry(synth, move |_| {
            shut.wait();
            None
        });
        let mut b = Loader::builder()
            .registry(registry)
            .files(specs)
            .stall_timeout(Duration::from_millis(200));
        if !infer {
            // The schema is given; equalizing ranks counts the records.
            b = b
                .schema(SynthFormat::schema())
                .shard(0, 2)
                .equalize(feedline::plan::Equalize::Drop)
                .batch(2);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(b.build().map(drop));
        });
        let built = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("hang: start-up never ended");
        gate.open();
        match built {
            Err(PipelineError::ReaderStuck { file, .. }) => {
                assert!(file.starts_with("synth:f0"), "{file}");
                let what = if infer {
                    "inferring the schema"
                } else {
                    "counting its records"
                };
                assert!(file.contains(what), "{file}");
            }
            other => panic!("infer {infer}: expected a stall error, got {other:?}"),
        }
    }
}
