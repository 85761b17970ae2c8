//! Batcher: fixed sizes, cost budgets (every batch within budget except a
//! lone over-budget instance), drop_last accounting, one warning per pass.

use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use feedline::batch_policy::{BatchPolicy, Batcher, CostFn};
use feedline::{Chunk, DType, Error, Instance, Origin, Ragged, RowRef, Schema, SourceId, Values};
use proptest::prelude::*;

fn schema() -> Schema {
    Schema::builder()
        .field("id", DType::I64, [])
        .ragged("tok", DType::I64, Ragged::Offsets)
        .build()
        .unwrap()
}

/// Rows whose `tok` field has the given lengths; ids 0, 1, ….
fn rows(lens: &[usize]) -> Vec<RowRef> {
    let schema = schema();
    let mut c = Chunk::new(&schema);
    for (i, &l) in lens.iter().enumerate() {
        let inst = Instance::new(
            &schema,
            vec![Values::I64(vec![i as i64]), Values::I64(vec![7; l])],
            Origin::new(SourceId::intern("mem"), i as u64),
        )
        .unwrap();
        c.push_instance(&inst);
    }
    let c = Arc::new(c);
    (0..lens.len()).map(|i| RowRef::new(c.clone(), i)).collect()
}

fn ids(batch: &[RowRef]) -> Vec<u64> {
    batch.iter().map(|r| r.origin().record).collect()
}

fn run(b: &mut Batcher, rows: Vec<RowRef>) -> Vec<Vec<RowRef>> {
    let mut out: Vec<Vec<RowRef>> = rows.into_iter().filter_map(|r| b.push(r)).collect();
    out.extend(b.flush());
    out
}

#[test]
fn fixed_batches_and_drop_last() {
    let mut b = Batcher::new(BatchPolicy::Fixed(3), false).unwrap();
    let out = run(&mut b, rows(&[0; 8]));
    let sizes: Vec<usize> = out.iter().map(Vec::len).collect();
    assert_eq!(sizes, [3, 3, 2]);
    assert_eq!(ids(&out[2]), [6, 7]);
    assert_eq!((b.batches(), b.dropped_rows()), (3, 0));

    let mut b = Batcher::new(BatchPolicy::Fixed(3), true).unwrap();
    let out = run(&mut b, rows(&[0; 8]));
    assert_eq!(out.len(), 2);
    assert_eq!(b.dropped_rows(), 2);
    // A complete last batch is not dropped; an empty flush is None.
    let out = run(&mut b, rows(&[0; 6]));
    assert_eq!(out.len(), 2);
    assert_eq!(b.dropped_rows(), 2);
    assert!(b.flush().is_none());
    assert_eq!(b.pending(), 0);
}

#[test]
fn zero_sizes_are_errors() {
    assert!(matches!(
        Batcher::new(BatchPolicy::Fixed(0), false),
        Err(Error::Config(_))
    ));
    let cost: CostFn = Arc::new(|_, _| 1);
    assert!(Batcher::new(BatchPolicy::Budget { max_cost: 0, cost }, false).is_err());
}

#[test]
fn token_policy_errors() {
    let s = schema();
    let e = BatchPolicy::tokens("nope", 10, &s).unwrap_err();
    assert!(e.to_string().contains("no field `nope`"), "{e}");
    let e = BatchPolicy::tokens("id", 10, &s).unwrap_err();
    assert!(e.to_string().contains("not ragged"), "{e}");
    let e = BatchPolicy::tokens("tok", 0, &s).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

#[test]
fn token_budget_example() {
    let p = BatchPolicy::tokens("tok", 10, &schema()).unwrap();
    let rs = rows(&[4, 4, 3, 10, 12, 1, 9, 0, 2]);
    assert_eq!(p.cost_of(&rs[4]), 12);
    let mut b = Batcher::new(p, false).unwrap();
    let out = run(&mut b, rs);
    let got: Vec<Vec<u64>> = out.iter().map(|x| ids(x)).collect();
    // 4+4 (3 does not fit) | 3 (10 does not fit) | 10 (full) | 12 alone | 1+9 (full) | 0+2
    assert_eq!(
        got,
        vec![
            vec![0, 1],
            vec![2],
            vec![3],
            vec![4],
            vec![5, 6],
            vec![7, 8]
        ]
    );
    assert_eq!(b.oversize_batches(), 1);
}

proptest! {
    #[test]
    fn budget_batches_stay_within_budget(
        lens in prop::collection::vec(0usize..30, 0..200),
        max in 1u64..40,
        drop_last in any::<bool>(),
    ) {
        let policy = BatchPolicy::tokens("tok", max, &schema()).unwrap();
        let mut b = Batcher::new(policy, drop_last).unwrap();
        let out = run(&mut b, rows(&lens));
        let mut delivered = Vec::new();
        let mut lone = 0;
        for batch in &out {
            prop_assert!(!batch.is_empty());
            let cost: u64 = batch.iter().map(|r| lens[r.index] as u64).sum();
            if cost > max {
                prop_assert_eq!(batch.len(), 1, "only a lone instance may exceed the budget");
                lone += 1;
            }
            delivered.extend(ids(batch));
        }
        let over = lens.iter().filter(|&&l| l as u64 > max).count() as u64;
        prop_assert_eq!(lone, over);
        prop_assert_eq!(b.oversize_batches(), over);
        // Order kept; only a tail is dropped.
        let n = delivered.len() as u64;
        prop_assert_eq!(&delivered, &(0..n).collect::<Vec<_>>());
        prop_assert_eq!(n + b.dropped_rows(), lens.len() as u64);
        if !drop_last {
            prop_assert_eq!(b.dropped_rows(), 0);
        }
        // Greedy: no batch could have taken the next batch's first row.
        for w in out.windows(2) {
            let cost: u64 = w[0].iter().map(|r| lens[r.index] as u64).sum();
            let next = lens[w[1][0].index] as u64;
            prop_assert!(cost >= max || cost + next > max);
        }
    }

    #[test]
    fn fixed_batches_deliver_every_row_once(n in 0usize..300, size in 1usize..40, drop_last in any::<bool>()) {
        let mut b = Batcher::new(BatchPolicy::Fixed(size), drop_last).unwrap();
        let out = run(&mut b, rows(&vec![0; n]));
        let all: Vec<u64> = out.iter().flat_map(|x| ids(x)).collect();
        prop_assert!(out.iter().all(|x| x.len() == size || (!drop_last && x.len() < size)));
        prop_assert_eq!(all.len() as u64 + b.dropped_rows(), n as u64);
        prop_assert_eq!(b.dropped_rows(), if drop_last { (n % size) as u64 } else { 0 });
    }
}

#[test]
fn budget_drop_last_keeps_only_a_full_last_batch() {
    let p = BatchPolicy::tokens("tok", 10, &schema()).unwrap();
    let mut b = Batcher::new(p.clone(), true).unwrap();
    let out = run(&mut b, rows(&[6, 6, 3]));
    assert_eq!(out.len(), 1); // [6] then [6, 3] is partial (9 < 10): dropped
    assert_eq!(b.dropped_rows(), 2);
    let mut b = Batcher::new(p, true).unwrap();
    let out = run(&mut b, rows(&[6, 6, 4]));
    assert_eq!(out.len(), 2); // [6, 4] reached the budget
                              // A pending lone oversize instance is a complete batch: kept.
    let mut b = Batcher::new(BatchPolicy::tokens("tok", 10, &schema()).unwrap(), true).unwrap();
    let mut rs = rows(&[5, 20]).into_iter();
    assert!(b.push(rs.next().unwrap()).is_none());
    assert_eq!(ids(&b.push(rs.next().unwrap()).unwrap()), [0]);
    assert_eq!(ids(&b.flush().unwrap()), [1]);
    assert_eq!(b.dropped_rows(), 0);
}

/// A logger that keeps (thread, level, message) of every record.
struct Keep;
type Records = Mutex<Vec<(ThreadId, log::Level, String)>>;
fn records() -> &'static Records {
    static R: OnceLock<Records> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}
impl log::Log for Keep {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        records().lock().unwrap().push((
            std::thread::current().id(),
            r.level(),
            r.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

#[test]
fn oversize_is_warned_once_per_pass() {
    static LOGGER: Keep = Keep;
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    let me = std::thread::current().id();
    let warnings = || {
        records()
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, l, _)| *t == me && *l == log::Level::Warn)
            .map(|(_, _, m)| m.clone())
            .collect::<Vec<_>>()
    };
    let p = BatchPolicy::tokens("tok", 5, &schema()).unwrap();
    let mut b = Batcher::new(p, false).unwrap();
    let out = run(&mut b, rows(&[9, 1, 8, 7, 2, 6]));
    assert_eq!(out.len(), 6);
    assert_eq!(b.oversize_batches(), 4);
    let w = warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("mem: record 0") && w[0].contains("costs 9"),
        "{}",
        w[0]
    );
    run(&mut b, rows(&[9, 9]));
    assert_eq!(warnings().len(), 2);
    assert_eq!(b.oversize_batches(), 6);
}
