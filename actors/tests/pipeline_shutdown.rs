//! Shutdown: dropping the loader mid-pass, an early `break`, a panicking
//! trainer — every thread ends within a second, nothing hangs. One test
//! binary, tests serialized: they count the process's threads.

mod common;

use feedline_actors::{Feeding, Inputs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{block_at, synth_loader, synth_registry, Fault, Gate, Hooked, SynthFormat};
use feedline_actors::{
    Delivered, FeedMode, Loader, Pipeline, PipelineConfig, PipelineError, TrainStep,
};

static SERIAL: Mutex<()> = Mutex::new(());

/// Threads of pipelines: actix arbiters and the loader's system thread (the
/// test harness's own threads come and go and are not counted).
fn threads() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("actix-rt") || name.starts_with("feedline"))
        .count()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Wait for the thread count to fall back to `n` (the event; the 30 s bound
/// only detects a hang, on however loaded a machine).
fn threads_back_to(n: usize) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30) {
        if threads() <= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    threads() <= n
}

fn big_loader(readers: usize) -> Loader {
    synth_loader(SynthFormat::with_files(&[5000, 5000, 5000, 5000]).build())
        .readers(readers)
        .passes(3)
        .batch(32)
        .shuffle(100)
        .build()
        .unwrap()
}

#[test]
fn dropping_the_loader_mid_pass_ends_every_thread() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for readers in [1, 4, 8] {
        let before = threads();
        let mut loader = big_loader(readers);
        for _ in 0..5 {
            loader.iter().next().unwrap().unwrap();
        }
        assert!(threads() > before);
        drop(loader);
        assert!(
            threads_back_to(before),
            "threads left: {} > {before}",
            threads()
        );
    }
}

#[test]
fn early_break_ends_every_thread() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = threads();
    let fds_before = fds();
    for (i, b) in big_loader(3).into_iter().enumerate() {
        b.unwrap();
        if i == 10 {
            break;
        }
    }
    assert!(
        threads_back_to(before),
        "threads left: {} > {before}",
        threads()
    );
    assert!(
        fds() <= fds_before,
        "file handles leaked: {} > {fds_before}",
        fds()
    );
}

#[test]
fn dropping_the_loader_before_reading_anything() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = threads();
    drop(big_loader(2));
    assert!(threads_back_to(before));
}

#[test]
fn the_loader_drops_cleanly_after_an_error() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = threads();
    let synth = SynthFormat::with_files(&[100, 100])
        .fault("f1", 40, Fault::BadRecord)
        .build();
    let loader = synth_loader(synth).build().unwrap();
    let errors = loader.into_iter().filter(|r| r.is_err()).count();
    assert_eq!(errors, 1);
    assert!(threads_back_to(before));
}

struct PanickyStep {
    panic_at: u64,
    seen: u64,
}

impl TrainStep for PanickyStep {
    fn step(&mut self, _device: usize, _batch: &Delivered) -> Result<(), String> {
        self.seen += 1;
        if self.seen == self.panic_at {
            panic!("the model exploded");
        }
        Ok(())
    }
}

#[test]
fn a_panicking_trainer_stops_the_pipeline_with_its_message() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = threads();
    let synth = SynthFormat::with_files(&[2000, 2000]).build();
    let config = PipelineConfig {
        inputs: Inputs {
            files: synth.specs(),
            registry: synth_registry(synth),
            schema: Some(SynthFormat::schema()),
            ..Default::default()
        },
        feeding: Feeding {
            // Round-robin: device 0 surely gets its 3rd batch (8 of the 16 are its).
            feed: FeedMode::RoundRobin,
            ..Default::default()
        },
        ..PipelineConfig::default()
    };
    let sys = actix::System::new();
    let result = sys.block_on(async move {
        let steps = vec![
            PanickyStep {
                panic_at: 3,
                seen: 0,
            },
            PanickyStep {
                panic_at: u64::MAX,
                seen: 0,
            },
        ];
        let mut p = Pipeline::start_with_trainers(config, steps).unwrap();
        let r = p.finished().await;
        p.stop();
        let arbiters = p;
        // Join off the system thread's executor: the arbiters are other threads.
        arbiters.join();
        r
    });
    drop(sys);
    match result {
        Err(PipelineError::Panicked { stage, message, .. }) => {
            assert_eq!(&*stage, "trainer of device 0");
            assert!(message.contains("exploded"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        threads_back_to(before),
        "threads left: {} > {before}",
        threads()
    );
}

#[test]
fn dropping_the_loader_while_a_reader_is_blocked_in_a_read_returns_and_the_thread_ends_after() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = threads();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let gate = Gate::default();
    let synth = SynthFormat::with_files(&[50, 50]).build();
    let specs = synth.specs();
    // The reader of f1 blocks in its read of record 7 until the gate opens.
    let held = gate.clone();
    let entered_tx = Mutex::new(entered_tx);
    let registry = Hooked::registry(synth, move |o| {
        (o.file == "f1").then(|| {
            let entered = entered_tx.lock().unwrap().clone();
            block_at(7, held.clone(), move || {
                let _ = entered.send(());
            })
        })
    });
    let mut loader = Loader::builder()
        .registry(registry)
        .files(specs)
        .schema(SynthFormat::schema())
        .readers(2)
        .batch(4)
        .shuffle(0)
        .chunk_records(2)
        .no_stall_timeout()
        .build()
        .unwrap();
    // The reader of f1 is inside its blocked read (the event), and the
    // consumer has had a batch.
    entered
        .recv_timeout(Duration::from_secs(30))
        .expect("the reader reached the blocked read");
    loader.iter().next().unwrap().unwrap();
    // Dropping returns although that read does not (the join's grace
    // period ends; the thread is left to end by itself).
    let (dropped_tx, dropped) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(loader);
        let _ = dropped_tx.send(());
    });
    dropped
        .recv_timeout(Duration::from_secs(30))
        .expect("drop returned while a read was blocked");
    dropper.join().unwrap();
    // The read returns: its thread sees the pipeline gone and ends.
    gate.open();
    assert!(
        threads_back_to(before),
        "threads left after the blocked read returned: {} > {before}",
        threads()
    );
}
