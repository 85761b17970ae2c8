//! FeedQueue: blocking, non-blocking and timed push/pop, close semantics,
//! and an 8 × 8 stress test with a close in the middle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use feedline::feed_queue::{
    Closed, FeedQueue, PopTimeoutError, PushTimeoutError, TryPopError, TryPushError,
};
use feedline::Error;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn capacity_must_be_positive() {
    assert!(matches!(FeedQueue::<u8>::new(0), Err(Error::Config(_))));
    let q = FeedQueue::<u8>::new(3).unwrap();
    assert_eq!(
        (q.capacity(), q.len(), q.is_empty(), q.is_closed()),
        (3, 0, true, false)
    );
}

#[test]
fn non_blocking_and_timed_forms() {
    let q = FeedQueue::new(2).unwrap();
    assert_eq!(q.try_pop(), Err(TryPopError::Empty));
    let t = Instant::now();
    assert_eq!(
        q.pop_timeout(Duration::from_millis(30)),
        Err(PopTimeoutError::Timeout)
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    q.try_push(1).unwrap();
    q.push_timeout(2, Duration::from_millis(5)).unwrap();
    assert_eq!(q.len(), 2);
    match q.try_push(3) {
        Err(e @ TryPushError::Full(_)) => {
            assert!(!e.is_closed());
            assert_eq!(format!("{e:?}"), "Full(..)");
            assert_eq!(e.to_string(), "the feed queue is full");
            assert_eq!(e.into_inner(), 3);
        }
        other => panic!("expected Full, got {other:?}"),
    }
    let t = Instant::now();
    match q.push_timeout(4, Duration::from_millis(30)) {
        Err(PushTimeoutError::Timeout(v)) => assert_eq!(v, 4),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert_eq!(q.try_pop(), Ok(1));
    assert_eq!(q.pop_timeout(Duration::from_millis(5)), Ok(2));
    // Huge timeouts do not overflow.
    q.push_timeout(5, Duration::MAX).unwrap();
    assert_eq!(q.pop_timeout(Duration::MAX), Ok(5));
}

#[test]
fn close_wakes_blocked_pushers_and_poppers() {
    let q = FeedQueue::new(1).unwrap();
    q.push(0u32).unwrap();
    let pusher = {
        let q = q.clone();
        thread::spawn(move || q.push(1))
    };
    let timed_pusher = {
        let q = q.clone();
        thread::spawn(move || q.push_timeout(2, Duration::from_secs(60)))
    };
    thread::sleep(Duration::from_millis(50));
    q.close();
    assert!(q.is_closed());
    assert_eq!(pusher.join().unwrap(), Err(Closed(1)));
    assert_eq!(
        timed_pusher.join().unwrap(),
        Err(PushTimeoutError::Closed(2))
    );
    // Pops drain what is left, then report the end.
    assert_eq!(q.pop(), Some(0));
    assert_eq!(q.pop(), None);
    assert_eq!(q.try_pop(), Err(TryPopError::Closed));
    assert_eq!(
        q.pop_timeout(Duration::from_secs(1)),
        Err(PopTimeoutError::Closed)
    );
    assert_eq!(q.try_push(9), Err(TryPushError::Closed(9)));
    assert_eq!(q.push(9).unwrap_err().into_inner(), 9);
    q.close(); // idempotent

    let q = FeedQueue::<u32>::new(4).unwrap();
    let poppers: Vec<_> = (0..3)
        .map(|i| {
            let q = q.clone();
            thread::spawn(move || {
                if i == 0 {
                    q.pop().ok_or(())
                } else {
                    q.pop_timeout(Duration::from_secs(60)).map_err(|_| ())
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(50));
    q.close();
    for p in poppers {
        assert_eq!(p.join().unwrap(), Err(()));
    }
}

#[test]
fn fifo_order_and_iter() {
    let q = FeedQueue::new(3).unwrap();
    let producer = {
        let q = q.clone();
        thread::spawn(move || {
            for i in 0..1000 {
                q.push(i).unwrap();
            }
            q.close();
        })
    };
    let got: Vec<i32> = q.iter().collect();
    producer.join().unwrap();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    assert!(format!("{q:?}").contains("closed: true"));
}

/// What a producer did: items pushed, and the item a failed push handed back.
struct Produced {
    pushed: Vec<(usize, u32)>,
    handed_back: Option<(usize, u32)>,
}

enum Done {
    Producer(Produced),
    Consumer(Vec<(usize, u32)>),
    Closer,
}

/// 8 producers and 8 consumers using all push/pop forms on a queue of random
/// capacity; a closer closes it once a random share of the items went
/// through. Every pushed item is popped exactly once, every failed push
/// handed its own item back, and every thread ends before a deadline.
#[test]
fn stress_8_producers_8_consumers_close_in_the_middle() {
    const PER_PRODUCER: u32 = 3_000;
    let mut rounds_closed_mid_stream = 0;
    for round in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(round);
        let cap = rng.gen_range(1..=32);
        let close_after = rng.gen_range(0..(8 * PER_PRODUCER as usize));
        let q = FeedQueue::<(usize, u32)>::new(cap).unwrap();
        let popped = Arc::new(AtomicUsize::new(0));
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let mut handles = Vec::new();
        for p in 0..8usize {
            let (q, done_tx) = (q.clone(), done_tx.clone());
            handles.push(thread::spawn(move || {
                let mut out = Produced {
                    pushed: Vec::new(),
                    handed_back: None,
                };
                for i in 0..PER_PRODUCER {
                    let item = (p, i);
                    let failed = match i % 3 {
                        0 => q.push(item).err().map(Closed::into_inner),
                        1 => loop {
                            match q.try_push(item) {
                                Ok(()) => break None,
                                Err(TryPushError::Full(_)) => thread::yield_now(),
                                Err(TryPushError::Closed(v)) => break Some(v),
                            }
                        },
                        _ => loop {
                            match q.push_timeout(item, Duration::from_micros(200)) {
                                Ok(()) => break None,
                                Err(PushTimeoutError::Timeout(_)) => {}
                                Err(PushTimeoutError::Closed(v)) => break Some(v),
                            }
                        },
                    };
                    match failed {
                        None => out.pushed.push(item),
                        Some(v) => {
                            out.handed_back = Some(v);
                            break;
                        }
                    }
                }
                done_tx.send(Done::Producer(out)).unwrap();
            }));
        }
        for c in 0..8usize {
            let (q, done_tx, popped) = (q.clone(), done_tx.clone(), popped.clone());
            handles.push(thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let item = match c % 3 {
                        0 => q.pop(),
                        1 => loop {
                            match q.try_pop() {
                                Ok(v) => break Some(v),
                                Err(TryPopError::Empty) => thread::yield_now(),
                                Err(TryPopError::Closed) => break None,
                            }
                        },
                        _ => loop {
                            match q.pop_timeout(Duration::from_micros(200)) {
                                Ok(v) => break Some(v),
                                Err(PopTimeoutError::Timeout) => {}
                                Err(PopTimeoutError::Closed) => break None,
                            }
                        },
                    };
                    match item {
                        Some(v) => {
                            got.push(v);
                            popped.fetch_add(1, Ordering::Relaxed);
                        }
                        None => break,
                    }
                }
                done_tx.send(Done::Consumer(got)).unwrap();
            }));
        }
        {
            let (q, done_tx, popped) = (q.clone(), done_tx.clone(), popped.clone());
            handles.push(thread::spawn(move || {
                let start = Instant::now();
                while popped.load(Ordering::Relaxed) < close_after
                    && start.elapsed() < Duration::from_secs(20)
                {
                    thread::sleep(Duration::from_micros(100));
                }
                q.close();
                done_tx.send(Done::Closer).unwrap();
            }));
        }
        drop(done_tx);

        let deadline = Instant::now() + Duration::from_secs(60);
        let mut produced = Vec::new();
        let mut consumed = Vec::new();
        for _ in 0..17 {
            let left = deadline.saturating_duration_since(Instant::now());
            match done_rx.recv_timeout(left) {
                Ok(Done::Producer(p)) => produced.push(p),
                Ok(Done::Consumer(c)) => consumed.extend(c),
                Ok(Done::Closer) => {}
                Err(e) => panic!("round {round} (capacity {cap}): threads still blocked: {e}"),
            }
        }
        for h in handles {
            h.join().unwrap();
        }

        let mut pushed: Vec<(usize, u32)> =
            produced.iter().flat_map(|p| p.pushed.clone()).collect();
        for p in &produced {
            if let Some((pp, i)) = p.handed_back {
                // The failed item is the producer's own next item, not pushed.
                assert_eq!(i as usize, p.pushed.len(), "round {round}");
                assert!(!p.pushed.contains(&(pp, i)));
            } else {
                assert_eq!(p.pushed.len(), PER_PRODUCER as usize);
            }
        }
        pushed.sort_unstable();
        consumed.sort_unstable();
        assert_eq!(
            pushed.len(),
            consumed.len(),
            "round {round} (capacity {cap}): pushed vs popped"
        );
        assert_eq!(
            pushed, consumed,
            "round {round}: every pushed item popped exactly once"
        );
        assert!(q.is_closed() && q.is_empty());
        if produced.iter().any(|p| p.handed_back.is_some()) {
            rounds_closed_mid_stream += 1;
        }
    }
    assert!(
        rounds_closed_mid_stream >= 6,
        "{rounds_closed_mid_stream} of 12"
    );
}
