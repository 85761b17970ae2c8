//! Reader algebra: each decorator, threads ending on early drop, panics
//! turned into errors, and the single-thread file path (`files`, `batches`)
//! over a test-only in-memory format.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use feedline::batch_policy::BatchPolicy;
use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::plan::{PassPlan, Shard, ShardBy};
use feedline::reader::{batches, chain_all, compose_all, files, BatchesConfig, Reader, ReaderExt};
use feedline::shuffle::ShuffleConfig;
use feedline::{
    Batch, DType, Error, Location, Ragged, Record, Result, Schema, SourceId, Tensor, Values,
};
use proptest::prelude::*;

mod format_helpers;
use format_helpers::ShortChunks;

// ---------------------------------------------------------------- decorators

#[test]
fn closures_are_readers_read_again_each_pass() {
    let r = || vec![1, 2, 3];
    assert_eq!(r.read().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.read().collect::<Vec<_>>(), [1, 2, 3]);
    let boxed = (|| 0..2).boxed();
    assert_eq!(boxed.read().count(), 2);
}

#[test]
fn map_firstn_batch_multi_pass() {
    let r = (|| 0..10).map(|x| x * 10).firstn(7);
    assert_eq!(r.read().collect::<Vec<_>>(), [0, 10, 20, 30, 40, 50, 60]);
    let b = (|| 0..7).batch(3, false).unwrap();
    assert_eq!(
        b.read().collect::<Vec<_>>(),
        vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
    );
    let b = (|| 0..7).batch(3, true).unwrap();
    assert_eq!(b.read().count(), 2);
    assert!(matches!((|| 0..7).batch(0, true), Err(Error::Config(_))));
    let m = (|| 0..3).multi_pass(3);
    assert_eq!(m.read().collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2, 0, 1, 2]);
    assert_eq!((|| 0..3).multi_pass(0).read().count(), 0);
}

#[test]
fn chain_reads_each_source_lazily() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = {
        let reads = reads.clone();
        move || {
            reads.fetch_add(1, Ordering::SeqCst);
            vec![9, 9]
        }
    };
    let c = (|| vec![1, 2]).chain(counted);
    let mut it = c.read();
    assert_eq!(it.next(), Some(1));
    assert_eq!(
        reads.load(Ordering::SeqCst),
        0,
        "the second starts when the first ends"
    );
    assert_eq!(it.collect::<Vec<_>>(), [2, 9, 9]);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    let all = chain_all(vec![
        (|| 0..2).boxed(),
        (|| vec![5]).boxed(),
        (|| 7..9).boxed(),
    ]);
    assert_eq!(all.read().collect::<Vec<_>>(), [0, 1, 5, 7, 8]);
}

#[test]
fn compose_zips_and_checks_alignment() {
    let ok = (|| 0..3).compose(|| vec!["a", "b", "c"]);
    let got: Vec<(i32, &str)> = ok.read().collect::<Result<_>>().unwrap();
    assert_eq!(got, [(0, "a"), (1, "b"), (2, "c")]);

    let short = (|| 0..3).compose(|| 0..5);
    let got: Vec<_> = short.read().collect();
    assert_eq!(got.len(), 4);
    match &got[3] {
        Err(Error::NotAligned(m)) => assert!(m.contains("first reader ended after 3"), "{m}"),
        other => panic!("{other:?}"),
    }
    let long = (|| 0..5).compose(|| 0..1);
    let err = long.read().collect::<Result<Vec<_>>>().unwrap_err();
    assert!(
        err.to_string().contains("second reader ended after 1"),
        "{err}"
    );

    let all = compose_all(vec![(|| 0..3).boxed(), (|| 10..13).boxed()]);
    let rows: Vec<Vec<i32>> = all.read().collect::<Result<_>>().unwrap();
    assert_eq!(rows, [[0, 10], [1, 11], [2, 12]]);
    let bad = compose_all(vec![
        (|| 0..3).boxed(),
        (|| 0..2).boxed(),
        (|| 0..3).boxed(),
    ]);
    let err = bad.read().collect::<Result<Vec<_>>>().unwrap_err();
    assert!(err.to_string().contains("[1]"), "{err}");
}

#[test]
fn cache_reads_the_source_once() {
    let reads = Arc::new(AtomicUsize::new(0));
    let src = {
        let reads = reads.clone();
        move || {
            reads.fetch_add(1, Ordering::SeqCst);
            vec![3, 1, 2]
        }
    };
    let c = src.cache();
    // A pass dropped early is not kept.
    assert_eq!(c.read().next(), Some(3));
    assert!(!c.is_filled());
    for _ in 0..3 {
        assert_eq!(c.read().collect::<Vec<_>>(), [3, 1, 2]);
    }
    assert!(c.is_filled());
    assert_eq!(reads.load(Ordering::SeqCst), 2);

    // try_cache: a pass with an error is not kept.
    let fail_first = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicUsize::new(0));
    let src = {
        let (fail_first, reads) = (fail_first.clone(), reads.clone());
        move || {
            reads.fetch_add(1, Ordering::SeqCst);
            let fail = fail_first.swap(false, Ordering::SeqCst);
            vec![
                Ok(1),
                if fail {
                    Err(Error::Config("boom".into()))
                } else {
                    Ok(2)
                },
            ]
        }
    };
    let c = src.try_cache();
    assert!(c.read().any(|r| r.is_err()));
    assert!(!c.is_filled());
    assert_eq!(c.read().collect::<Result<Vec<_>>>().unwrap(), [1, 2]);
    assert_eq!(c.read().collect::<Result<Vec<_>>>().unwrap(), [1, 2]);
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[test]
fn shuffle_is_a_permutation_reproducible_and_new_each_pass() {
    let r = (|| 0..100u32).shuffle(30, 9);
    let p0: Vec<u32> = r.read().collect();
    let p1: Vec<u32> = r.read().collect();
    assert_ne!(p0, p1, "another pass, another order");
    assert_ne!(p0, (0..100).collect::<Vec<_>>());
    let mut s = p0.clone();
    s.sort_unstable();
    assert_eq!(s, (0..100).collect::<Vec<_>>());
    // Same seed: same orders pass by pass; start_pass resumes.
    let again = (|| 0..100u32).shuffle(30, 9);
    assert_eq!(again.read().collect::<Vec<_>>(), p0);
    let resumed = (|| 0..100u32).shuffle(30, 9).start_pass(1);
    assert_eq!(resumed.next_pass(), 1);
    assert_eq!(resumed.read().collect::<Vec<_>>(), p1);
    assert_eq!(r.read_pass(0).collect::<Vec<_>>(), p0);
    let other = (|| 0..100u32).shuffle(30, 10);
    assert_ne!(other.read().collect::<Vec<_>>(), p0);
    // 0 and 1: no shuffle.
    for buf in [0, 1] {
        let r = (|| 0..10).shuffle(buf, 1);
        assert_eq!(r.read().collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    }
    // Inside multi_pass, each inner pass is another shuffle pass.
    let m = (|| 0..50u32).shuffle(50, 3).multi_pass(2);
    let both: Vec<u32> = m.read().collect();
    assert_eq!(&both[..50], &p_of(3, 50, 0)[..]);
    assert_eq!(&both[50..], &p_of(3, 50, 1)[..]);
}

fn p_of(seed: u64, n: u32, pass: u64) -> Vec<u32> {
    (move || 0..n)
        .shuffle(n as usize, seed)
        .read_pass(pass)
        .collect()
}

/// Positions uniform with a pool as large as the pass: 20 seeds × 2,000
/// passes of 6 items; Pearson × (n-1)/n < 99.9% quantile of chi-square(25)
/// = 52.62 (see core_shuffle.rs for why the scaling).
#[test]
fn shuffle_positions_are_uniform() {
    let n = 6usize;
    for seed in 0..20u64 {
        let r = (move || 0..n).shuffle(n, seed);
        let mut table = vec![vec![0u32; n]; n];
        for _ in 0..2_000 {
            for (pos, x) in r.read().enumerate() {
                table[x][pos] += 1;
            }
        }
        let e = 2_000.0 / n as f64;
        let pearson: f64 = table
            .iter()
            .flatten()
            .map(|&o| (o as f64 - e).powi(2) / e)
            .sum();
        let stat = pearson * (n - 1) as f64 / n as f64;
        assert!(stat < 52.62, "seed {seed}: {stat:.1}");
    }
}

/// Sets a flag when dropped.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An endless source whose iterator sets `dropped` when it goes away.
fn endless(dropped: Arc<AtomicBool>) -> impl Fn() -> Box<dyn Iterator<Item = u64> + Send> {
    move || {
        let flag = DropFlag(dropped.clone());
        Box::new((0u64..).inspect(move |_| {
            let _keep = &flag;
        }))
    }
}

#[test]
fn buffered_keeps_order_and_ends_its_thread_on_early_drop() {
    let r = (|| 0..1000).buffered(8);
    assert_eq!(r.read().collect::<Vec<_>>(), (0..1000).collect::<Vec<_>>());
    let r0 = (|| 0..100).buffered(0);
    assert_eq!(r0.read().count(), 100);

    let dropped = Arc::new(AtomicBool::new(false));
    let r = endless(dropped.clone()).buffered(4);
    let first: Vec<u64> = r.read().take(10).collect(); // iterator dropped here
    assert_eq!(first, (0..10).collect::<Vec<_>>());
    assert!(
        dropped.load(Ordering::SeqCst),
        "the read-ahead thread has ended (its source iterator is gone) when the drop returns"
    );
    // And again: each pass has its own thread.
    dropped.store(false, Ordering::SeqCst);
    assert_eq!(r.read().nth(3), Some(3));
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn buffered_raises_a_source_panic_in_the_reader() {
    let r = (|| {
        (0..5).inspect(|&i| {
            if i == 3 {
                panic!("source broke at 3");
            }
        })
    })
    .buffered(2);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut seen = Vec::new();
        for x in r.read() {
            seen.push(x);
        }
        seen
    }));
    let payload = got.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"source broke at 3"));
}

/// Items whose work has finished, and a wait for one (an event, not a
/// duration: issue 28, item 18).
#[derive(Default)]
struct Finished(std::sync::Mutex<HashSet<u64>>, std::sync::Condvar);

impl Finished {
    fn mark(&self, x: u64) {
        self.0.lock().unwrap().insert(x);
        self.1.notify_all();
    }

    fn wait_for(&self, x: u64) {
        let mut done = self.0.lock().unwrap();
        while !done.contains(&x) {
            done = self.1.wait(done).unwrap();
        }
    }
}

#[test]
fn xmap_ordered_and_unordered() {
    // Every 7th item finishes only after the item behind it: the workers'
    // results come out of order, for sure.
    let f = || {
        let finished = Arc::new(Finished::default());
        move |x: u64| {
            if x % 7 == 0 {
                finished.wait_for(x + 1);
            }
            finished.mark(x);
            x * x
        }
    };
    let ordered = (|| 0..500u64).xmap(f(), 3, 4, true).unwrap();
    let got: Vec<u64> = ordered.read().collect::<Result<_>>().unwrap();
    assert_eq!(got, (0..500).map(|x| x * x).collect::<Vec<_>>());
    let unordered = (|| 0..500u64).xmap(f(), 3, 0, false).unwrap();
    let mut got: Vec<u64> = unordered.read().collect::<Result<_>>().unwrap();
    got.sort_unstable();
    assert_eq!(got, (0..500).map(|x| x * x).collect::<Vec<_>>());
    // Read again: a new pass with new threads.
    assert_eq!(ordered.read().count(), 500);
    assert!(matches!(
        (|| 0..1).xmap(|x| x, 0, 1, true),
        Err(Error::Config(_))
    ));
}

#[test]
fn xmap_turns_panics_into_errors() {
    let r = (|| 0..20u32)
        .xmap(
            |x| {
                if x == 5 || x == 12 {
                    panic!("bad item {x}");
                }
                x + 1
            },
            2,
            2,
            true,
        )
        .unwrap();
    let got: Vec<Result<u32>> = r.read().collect();
    assert_eq!(got.len(), 20);
    for (i, g) in got.iter().enumerate() {
        match g {
            Ok(v) => assert_eq!(*v as usize, i + 1),
            Err(Error::WorkerPanic(m)) => {
                assert!(i == 5 || i == 12);
                assert!(m.contains(&format!("bad item {i}")), "{m}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    // A panicking source: the items before it, then one error, then the end.
    let r = (|| {
        (0..10u32).inspect(|&i| {
            if i == 4 {
                panic!("source died");
            }
        })
    })
    .xmap(|x| x, 2, 1, true)
    .unwrap();
    let got: Vec<Result<u32>> = r.read().collect();
    assert_eq!(got.len(), 5);
    assert_eq!(
        got[..4]
            .iter()
            .map(|r| *r.as_ref().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    let err = got[4].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("source died") && err.contains("after 4 items"),
        "{err}"
    );
}

static XMAP_LIVE_WORKERS: AtomicUsize = AtomicUsize::new(0);
struct LiveGuard;
impl LiveGuard {
    fn new() -> Self {
        XMAP_LIVE_WORKERS.fetch_add(1, Ordering::SeqCst);
        LiveGuard
    }
}
impl Drop for LiveGuard {
    fn drop(&mut self) {
        XMAP_LIVE_WORKERS.fetch_sub(1, Ordering::SeqCst);
    }
}
thread_local! {
    static WORKER: LiveGuard = LiveGuard::new();
}

#[test]
fn xmap_early_drop_ends_feeder_and_workers() {
    let dropped = Arc::new(AtomicBool::new(false));
    for ordered in [true, false] {
        dropped.store(false, Ordering::SeqCst);
        let r = endless(dropped.clone())
            .xmap(
                |x| {
                    WORKER.with(|_| {}); // counts this worker thread until it exits
                    x + 1
                },
                3,
                5,
                ordered,
            )
            .unwrap();
        let mut it = r.read();
        for _ in 0..50 {
            it.next().unwrap().unwrap();
        }
        assert!(XMAP_LIVE_WORKERS.load(Ordering::SeqCst) >= 1);
        drop(it);
        assert!(dropped.load(Ordering::SeqCst), "the feeder has ended");
        assert_eq!(
            XMAP_LIVE_WORKERS.load(Ordering::SeqCst),
            0,
            "every worker thread has exited"
        );
    }
}

#[test]
fn xmap_keeps_memory_bounded_behind_a_slow_item() {
    // Item 0 is slow; with ordered output, the feeder may run at most
    // buffer + workers items ahead of the consumer.
    let fed = Arc::new(AtomicUsize::new(0));
    let src = {
        let fed = fed.clone();
        move || {
            let fed = fed.clone();
            (0..1000u32).inspect(move |_| {
                fed.fetch_add(1, Ordering::SeqCst);
            })
        }
    };
    // Item 0 finishes only once the four items behind it have (an event,
    // not a duration): by then the feeder has had all the time it takes
    // to run ahead.
    let finished = Arc::new(Finished::default());
    let r = src
        .xmap(
            move |x| {
                if x == 0 {
                    let mut others = finished.0.lock().unwrap();
                    while others.len() < 4 {
                        others = finished.1.wait(others).unwrap();
                    }
                } else {
                    finished.mark(u64::from(x));
                }
                x
            },
            2,
            3,
            true,
        )
        .unwrap();
    let mut it = r.read();
    assert_eq!(it.next().unwrap().unwrap(), 0);
    let ahead = fed.load(Ordering::SeqCst);
    assert!(
        ahead <= 2 + 3 + 1,
        "fed {ahead} items while item 0 was slow"
    );
    drop(it);
}

// ------------------------------------------------------- the test-only format

/// `mem:NAME-N` has N records; `mem:bad-N-B` fails (skippably) at record B;
/// `mem:cut-N-B` fails for good at record B. Record i of file k has
/// `id = k * 1_000_000 + i`, `x = [i, k]`, `tok` of length i % 5.
struct MemFormat;

struct MemReader {
    source: SourceId,
    file: u64,
    n: u64,
    next: u64,
    bad: Option<u64>,
    cut: bool,
    dead: bool,
}

fn file_number(name: &str) -> u64 {
    // Stable per name: sum of bytes times position.
    name.bytes()
        .enumerate()
        .map(|(i, b)| (i as u64 + 1) * b as u64)
        .sum()
}

impl Format for MemFormat {
    fn name(&self) -> &str {
        "mem"
    }
    fn extensions(&self) -> &[&str] {
        &["mem"]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        let name = path.to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('-').collect();
        let num = |s: &str| {
            s.parse::<u64>().map_err(|_| Error::BadFile {
                path: path.to_path_buf(),
                what: format!("`{s}` is not a number"),
            })
        };
        let n = num(parts.get(1).copied().unwrap_or("x"))?;
        let bad = match parts.get(2) {
            Some(b) => Some(num(b)?),
            None => None,
        };
        Ok(Box::new(MemReader {
            source: SourceId::intern(&name),
            file: file_number(&name),
            n,
            next: opts.start_record.min(n),
            bad,
            cut: parts[0] == "cut",
            dead: false,
        }))
    }
}

impl RecordReader for MemReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.dead || self.next >= self.n {
            return Ok(None);
        }
        let i = self.next;
        self.next += 1;
        let location = Location::new(self.source, i, Some(i * 100));
        if Some(i) == self.bad {
            self.dead = self.cut;
            return Err(Error::corrupt(location, "bad test record"));
        }
        Ok(Some(Record {
            fields: vec![
                (
                    "id".into(),
                    Tensor::scalar(Values::I64(vec![(self.file * 1_000_000 + i) as i64])),
                ),
                (
                    "x".into(),
                    Tensor::vector(Values::F32(vec![i as f32, self.file as f32])),
                ),
                (
                    "tok".into(),
                    Tensor::vector(Values::I64(vec![1; (i % 5) as usize])),
                ),
            ],
            location,
        }))
    }
    fn next_index(&self) -> u64 {
        self.next
    }
    fn can_continue(&self) -> bool {
        !self.dead
    }
}

fn registry() -> Registry {
    let mut r = Registry::empty();
    r.register(Arc::new(MemFormat));
    r
}

fn schema() -> Schema {
    Schema::builder()
        .field("id", DType::I64, [])
        .field("x", DType::F32, [2])
        .ragged("tok", DType::I64, Ragged::Offsets)
        .build()
        .unwrap()
}

fn specs(sizes: &[u64]) -> Vec<String> {
    sizes
        .iter()
        .enumerate()
        .map(|(k, n)| format!("mem:f{k}-{n}"))
        .collect()
}

/// All (file spec, record) pairs of the files.
fn all_records(specs: &[String]) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for s in specs {
        let n: u64 = s.rsplit('-').next().unwrap().parse().unwrap();
        let name = s.trim_start_matches("mem:");
        v.extend((0..n).map(|i| (name.to_string(), i)));
    }
    v.sort();
    v
}

fn batch_origins(b: &Batch) -> Vec<(String, u64)> {
    b.origins()
        .iter()
        .map(|o| (o.source.name().to_string(), o.record))
        .collect()
}

// ------------------------------------------------------------ files, batches

#[test]
fn files_reads_tasks_in_order_and_changes_order_per_pass() {
    let files_ = specs(&[3, 0, 5, 2]);
    let plan = PassPlan::new(files_.clone()).seed(1);
    let r = files(registry(), plan.clone(), schema(), OpenOptions::default())
        .chunk_size(2, 1 << 20)
        .unwrap();
    for pass in 0..3 {
        let got: Vec<(String, u64)> = r
            .read()
            .map(|i| {
                let o = i.unwrap().origin();
                (o.source.name().to_string(), o.record)
            })
            .collect();
        let expected: Vec<(String, u64)> = plan
            .tasks(pass)
            .iter()
            .flat_map(|t| {
                let n: u64 = t.file.rsplit('-').next().unwrap().parse().unwrap();
                let name = t.file.trim_start_matches("mem:").to_string();
                (0..n).map(move |i| (name.clone(), i))
            })
            .collect();
        assert_eq!(got, expected, "pass {pass}");
    }
    assert_eq!(r.next_pass(), 3);
    // Values come through conformed to the schema.
    let inst = r.read_pass(0).next().unwrap().unwrap();
    assert_eq!(inst.get("x").unwrap().as_f32().unwrap()[0], 0.0);
}

#[test]
fn files_honours_start_record_and_stride_and_chunks_match_instances() {
    let files_ = specs(&[10, 7, 4]);
    let plan = PassPlan::new(files_.clone())
        .seed(4)
        .shard(Shard::new(0, 5).unwrap())
        .shard_by(ShardBy::Record);
    let mut union = Vec::new();
    for rank in 0..5 {
        let p = plan.for_rank(rank).unwrap();
        let r = files(registry(), p, schema(), OpenOptions::default())
            .chunk_size(3, 1 << 20)
            .unwrap();
        let inst: Vec<(String, u64)> = r
            .read()
            .map(|i| {
                let o = i.unwrap().origin();
                (o.source.name().to_string(), o.record)
            })
            .collect();
        let chunks = r.chunks();
        let from_chunks: Vec<(String, u64)> = chunks
            .read_pass(0)
            .flat_map(|c| {
                let c = c.unwrap();
                c.origins()
                    .iter()
                    .map(|o| (o.source.name().to_string(), o.record))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(inst, from_chunks);
        union.extend(inst);
    }
    union.sort();
    assert_eq!(
        union,
        all_records(&files_),
        "the ranks partition the records"
    );

    // start_record: a re-queued task skips what was delivered.
    let opts = OpenOptions {
        start_record: 6,
        ..Default::default()
    };
    let r = files(registry(), PassPlan::new(specs(&[10])), schema(), opts);
    let recs: Vec<u64> = r.read().map(|i| i.unwrap().origin().record).collect();
    assert_eq!(recs, [6, 7, 8, 9]);
}

#[test]
fn files_reports_errors_in_place_and_goes_on() {
    let plan = PassPlan::new(vec![
        "mem:bad-6-2".into(),
        "mem:nonsense".into(),
        "mem:cut-6-3".into(),
        "mem:f-2".into(),
    ])
    .shuffle_files(false);
    let r = files(registry(), plan, schema(), OpenOptions::default())
        .chunk_size(4, 1 << 20)
        .unwrap();
    let got: Vec<std::result::Result<(String, u64), String>> = r
        .read()
        .map(|i| {
            i.map(|i| (i.origin().source.name().to_string(), i.origin().record))
                .map_err(|e| e.to_string())
        })
        .collect();
    let ok = |f: &str, i: u64| Ok((f.to_string(), i));
    assert_eq!(
        got,
        vec![
            ok("bad-6-2", 0),
            ok("bad-6-2", 1),
            Err("bad-6-2: record 2, offset 200: bad test record".into()),
            ok("bad-6-2", 3),
            ok("bad-6-2", 4),
            ok("bad-6-2", 5),
            Err("nonsense: `x` is not a number".into()),
            ok("cut-6-3", 0),
            ok("cut-6-3", 1),
            ok("cut-6-3", 2),
            Err("cut-6-3: record 3, offset 300: bad test record".into()),
            ok("f-2", 0),
            ok("f-2", 1),
        ]
    );
    // Collecting into a Result stops at the first error.
    let err = r.read().collect::<Result<Vec<_>>>().unwrap_err();
    assert!(err.location().is_some_and(|l| l.record == 2));
}

fn cfg(pool: usize, batch: usize, drop_last: bool, seed: u64) -> BatchesConfig {
    BatchesConfig {
        shuffle: ShuffleConfig {
            pool_size: pool,
            seed,
            ..Default::default()
        },
        policy: BatchPolicy::Fixed(batch),
        drop_last,
        chunk_rows: 4,
        chunk_bytes: 1 << 20,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn batches_deliver_each_instance_exactly_once(
        sizes in prop::collection::vec(0u64..40, 1..8),
        pool in 0usize..100,
        batch in 1usize..17,
        world in 1usize..5,
        drop_last in any::<bool>(),
        by in prop_oneof![Just(ShardBy::Auto), Just(ShardBy::Record)],
        seed in any::<u64>(),
        pass in 0u64..3,
        max_bytes in prop_oneof![Just(usize::MAX), 64usize..4096],
    ) {
        let files_ = specs(&sizes);
        let plan = PassPlan::new(files_.clone()).seed(seed).shard_by(by)
            .shard(Shard::new(0, world).unwrap());
        let mut seen = Vec::new();
        let mut dropped = 0;
        for rank in 0..world {
            let mut c = cfg(pool, batch, drop_last, seed);
            c.shuffle.max_bytes = max_bytes;
            let r = batches(registry(), plan.for_rank(rank).unwrap(), schema(),
                OpenOptions::default(), c).unwrap().start_pass(pass);
            for b in r.read() {
                let b = b.unwrap();
                prop_assert!(b.origins().len() == batch || (!drop_last && b.origins().len() < batch));
                let ids = b.i64("id").unwrap();
                prop_assert_eq!(ids.shape(), &[b.origins().len()]);
                seen.extend(batch_origins(&b));
            }
            dropped += r.dropped_rows();
        }
        let mut all = all_records(&files_);
        seen.sort();
        if !drop_last {
            prop_assert_eq!(seen, all);
        } else {
            // No duplicates; what is missing is what was dropped.
            let set: HashSet<_> = seen.iter().cloned().collect();
            prop_assert_eq!(set.len(), seen.len());
            all.retain(|x| !set.contains(x));
            prop_assert_eq!(all.len() as u64, dropped);
            prop_assert!(seen.iter().all(|x| all_records(&files_).contains(x)));
        }
    }
}

#[test]
fn batches_same_seed_same_batches_other_seed_other() {
    let files_ = specs(&[30, 17, 25, 9]);
    let run = |seed: u64, pass: u64| -> Vec<Vec<(String, u64)>> {
        let plan = PassPlan::new(files_.clone()).seed(seed);
        let r = batches(
            registry(),
            plan,
            schema(),
            OpenOptions::default(),
            cfg(20, 8, false, seed),
        )
        .unwrap()
        .start_pass(pass);
        r.read().map(|b| batch_origins(&b.unwrap())).collect()
    };
    assert_eq!(run(1, 0), run(1, 0));
    assert_ne!(run(1, 0), run(2, 0));
    assert_ne!(run(1, 0), run(1, 1));
    // The reader's own pass counter: read k is pass k.
    let plan = PassPlan::new(files_.clone()).seed(1);
    let r = batches(
        registry(),
        plan,
        schema(),
        OpenOptions::default(),
        cfg(20, 8, false, 1),
    )
    .unwrap();
    let p0: Vec<_> = r.read().map(|b| batch_origins(&b.unwrap())).collect();
    let p1: Vec<_> = r.read().map(|b| batch_origins(&b.unwrap())).collect();
    assert_eq!((p0, p1), (run(1, 0), run(1, 1)));
    assert_eq!(r.next_pass(), 2);
}

#[test]
fn batches_with_a_token_budget() {
    let files_ = specs(&[40, 33]);
    let s = schema();
    let mut c = cfg(16, 1, false, 5);
    c.policy = BatchPolicy::tokens("tok", 9, &s).unwrap();
    let r = batches(
        registry(),
        PassPlan::new(files_.clone()),
        s,
        OpenOptions::default(),
        c,
    )
    .unwrap();
    let mut seen = Vec::new();
    for b in r.read() {
        let b = b.unwrap();
        let offsets = b.fields()[2].offsets.clone().unwrap();
        assert!(
            *offsets.last().unwrap() <= 9,
            "tokens per batch within budget"
        );
        seen.extend(batch_origins(&b));
    }
    seen.sort();
    assert_eq!(seen, all_records(&files_));
    assert_eq!(r.oversize_batches(), 0);
    // A budget of 0 is refused.
    let mut c = cfg(16, 1, false, 5);
    c.policy = BatchPolicy::Fixed(0);
    assert!(batches(
        registry(),
        PassPlan::new(files_),
        schema(),
        OpenOptions::default(),
        c
    )
    .is_err());
}

#[test]
fn batches_reports_read_errors_and_keeps_the_rest() {
    let plan = PassPlan::new(vec!["mem:bad-9-4".into(), "mem:g-5".into()]);
    let r = batches(
        registry(),
        plan,
        schema(),
        OpenOptions::default(),
        cfg(0, 4, false, 0),
    )
    .unwrap();
    let mut errors = Vec::new();
    let mut n = 0;
    for b in r.read() {
        match b {
            Ok(b) => n += b.origins().len(),
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert_eq!(n, 13);
    assert_eq!(errors, ["bad-9-4: record 4, offset 400: bad test record"]);
}

#[test]
fn batches_pool_zero_is_file_order() {
    let files_ = specs(&[5, 6]);
    let plan = PassPlan::new(files_.clone()).shuffle_files(false);
    let r = batches(
        registry(),
        plan,
        schema(),
        OpenOptions::default(),
        cfg(0, 4, false, 0),
    )
    .unwrap();
    let got: Vec<(String, u64)> = r.read().flat_map(|b| batch_origins(&b.unwrap())).collect();
    let mut by_file: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (f, i) in &got {
        by_file
            .entry(if f.starts_with("f0") { 0 } else { 1 })
            .or_default()
            .push(*i);
    }
    assert_eq!(by_file[&0], (0..5).collect::<Vec<_>>());
    assert_eq!(by_file[&1], (0..6).collect::<Vec<_>>());
    assert!(got[..5].iter().all(|(f, _)| f.starts_with("f0")));
}

/// A registry with the test format and a short-chunk view of it (`short:`).
fn short_registry(pattern: Vec<usize>) -> Registry {
    let mut r = registry();
    r.register(Arc::new(ShortChunks {
        name: "short",
        inner: Arc::new(MemFormat),
        pattern,
    }));
    r
}

#[test]
fn the_single_thread_path_reads_on_after_short_chunks() {
    let sizes = [20, 1, 7, 33];
    let plain = specs(&sizes);
    let short: Vec<String> = plain.iter().map(|s| s.replace("mem:", "short:")).collect();
    let reg = short_registry(vec![3, 1, 2]);
    // Instances, in file order: every record of every file, once.
    let plan = PassPlan::new(short.clone()).shuffle_files(false);
    let r = files(reg.clone(), plan, schema(), OpenOptions::default())
        .chunk_size(16, 1 << 20)
        .unwrap();
    let mut got: Vec<(String, u64)> = r
        .read()
        .map(|i| {
            let o = i.unwrap().origin();
            (o.source.name().to_string(), o.record)
        })
        .collect();
    assert_eq!(got.len(), 61);
    got.sort();
    assert_eq!(got, all_records(&plain));
    // Chunks: each one short, none empty, together every record.
    let plan = PassPlan::new(short.clone()).shuffle_files(false);
    let chunks = files(reg.clone(), plan, schema(), OpenOptions::default())
        .chunk_size(16, 1 << 20)
        .unwrap()
        .chunks();
    let lens: Vec<usize> = chunks.read().map(|c| c.unwrap().len()).collect();
    assert!(lens.iter().all(|&n| (1..=3).contains(&n)), "{lens:?}");
    assert_eq!(lens.iter().sum::<usize>(), 61);
    // Batches through the shuffle buffer: the same multiset.
    let plan = PassPlan::new(short).shuffle_files(false);
    let r = batches(
        reg,
        plan,
        schema(),
        OpenOptions::default(),
        cfg(8, 5, false, 3),
    )
    .unwrap();
    let mut got: Vec<(String, u64)> = r.read().flat_map(|b| batch_origins(&b.unwrap())).collect();
    got.sort();
    assert_eq!(got, all_records(&plain));
}

#[test]
fn a_chunk_budget_of_zero_is_an_error_not_an_empty_file() {
    let plan = PassPlan::new(specs(&[5]));
    for (rows, bytes) in [(0, 1 << 20), (4, 0), (0, 0)] {
        let e = files(registry(), plan.clone(), schema(), OpenOptions::default())
            .chunk_size(rows, bytes)
            .expect_err("an error");
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert!(
            e.to_string().contains("at least 1 record and 1 byte"),
            "{e}"
        );
        let mut c = cfg(0, 4, false, 0);
        c.chunk_rows = rows;
        c.chunk_bytes = bytes;
        let e = batches(
            registry(),
            plan.clone(),
            schema(),
            OpenOptions::default(),
            c,
        )
        .expect_err("an error");
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        // The format's read_chunk refuses it too (the default method here).
        let mut r = registry()
            .open("mem:f0-5", None, &OpenOptions::default())
            .unwrap();
        let mut chunk = feedline::Chunk::new(&schema());
        let e = r.read_chunk(&mut chunk, rows, bytes).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert_eq!(r.next_index(), 0, "nothing read");
    }
    let o = OpenOptions {
        max_record_bytes: 0,
        ..OpenOptions::default()
    };
    let e = registry()
        .open("mem:f0-5", None, &o)
        .err()
        .expect("an error");
    assert!(
        e.to_string()
            .contains("max_record_bytes must be at least 1"),
        "{e}"
    );
    let e = batches(registry(), plan, schema(), o, cfg(0, 4, false, 0)).expect_err("an error");
    assert!(matches!(e, Error::Config(_)), "{e:?}");
}
