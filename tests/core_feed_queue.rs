//! The feed queue's lanes: capacity and the half-empty room signal, lanes of
//! round-robin mode, end-of-pass markers per consumer, close and failure,
//! plain, asynchronous and parked consumers (a gone one loses nothing), and
//! stress tests — every batch exactly once, nothing hangs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use feedline::feed_queue::{Answer, FeedMode, FeedQueue, Item, PopNow, Popped, Pushed, Reply};
use feedline::Error;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A batch: (pass, seq).
type B = (u64, u64);
type Queue = FeedQueue<B, String>;

fn queue(consumers: usize, capacity: usize, round_robin: bool) -> Queue {
    let mode = if round_robin {
        FeedMode::RoundRobin
    } else {
        FeedMode::Shared
    };
    FeedQueue::new(mode.lanes(consumers), capacity).unwrap()
}

fn batch(pass: u64, seq: u64) -> Item<B> {
    Item::Batch((pass, seq))
}

fn seq(r: Option<Answer<B, String>>) -> u64 {
    match r {
        Some(Ok(Popped::Batch((_, s)))) => s,
        other => panic!("expected a batch, got {other:?}"),
    }
}

fn now_plus(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

/// Until `n` consumers are asleep in `pop` (an event, counted under the
/// queue's lock right before they wait), not for a while (issue 28, item
/// 18: a sleep let a loaded machine test the path with no sleeper).
fn until_asleep(q: &Queue, n: usize) {
    while q.sleepers() < n {
        thread::yield_now();
    }
}

/// `f` on a thread of its own that says on `done` when it ends (returns or
/// panics).
fn spawn_signalled<T: Send + 'static>(
    done: &std::sync::mpsc::Sender<()>,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    struct Signal(std::sync::mpsc::Sender<()>);
    impl Drop for Signal {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let signal = Signal(done.clone());
    thread::spawn(move || {
        let _signal = signal;
        f()
    })
}

/// Until every thread has sent on `done` (an event), failing the test if
/// that takes past `deadline` (a hang).
fn until_done(done: &std::sync::mpsc::Receiver<()>, threads: usize, deadline: Instant, what: &str) {
    for _ in 0..threads {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(done.recv_timeout(left).is_ok(), "{what}: hung");
    }
}

#[test]
fn capacity_must_be_positive_and_lanes_follow_the_mode() {
    assert!(matches!(
        Queue::new(FeedMode::Shared.lanes(1), 0),
        Err(Error::Config(_))
    ));
    let q = queue(3, 2, true);
    assert_eq!((q.capacity(), q.depth(), q.lanes().count()), (2, 0, 3));
    assert_eq!(queue(3, 2, false).lanes().count(), 1);
    let rr = FeedMode::RoundRobin.lanes(3);
    assert_eq!(
        (0..6).map(|k| rr.of_batch(k)).collect::<Vec<_>>(),
        [0, 1, 2, 0, 1, 2]
    );
    assert_eq!(rr.of_consumer(2), 2);
    let shared = FeedMode::Shared.lanes(3);
    assert_eq!((shared.of_batch(5), shared.of_consumer(2)), (0, 0));
    assert_eq!(FeedMode::RoundRobin.lanes(0).count(), 1);
    assert!(format!("{q:?}").contains("capacity: 2"));
}

#[test]
fn a_lane_holds_at_most_its_capacity_and_signals_room() {
    let q = queue(1, 2, false);
    let mut out: VecDeque<_> = (0..3).map(|i| (0, batch(0, i))).collect();
    let Ok(Pushed::Full(mut room)) = q.push(&mut out) else {
        panic!("the third batch must not fit");
    };
    assert_eq!(out.len(), 1);
    assert_eq!(q.gauge().now(), 2);
    assert!(matches!(room.try_recv(), Ok(None)), "no room yet");
    assert_eq!(seq(q.pop(0, None)), 0);
    assert!(matches!(room.try_recv(), Ok(Some(()))), "room after a pop");
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(q.pop(0, None)), 1);
    assert_eq!(seq(q.pop(0, None)), 2);
    assert!(q.gauge().mean() > 0.0);
}

#[test]
fn a_waiting_producer_is_woken_when_its_lane_is_half_empty() {
    let q = queue(1, 4, false);
    let mut out: VecDeque<_> = (0..6).map(|i| (0, batch(0, i))).collect();
    let Ok(Pushed::Full(mut room)) = q.push(&mut out) else {
        panic!("capacity 4");
    };
    assert_eq!(seq(q.pop(0, None)), 0);
    assert!(matches!(room.try_recv(), Ok(None)), "3 of 4 left: not yet");
    assert_eq!(seq(q.pop(0, None)), 1);
    assert!(matches!(room.try_recv(), Ok(Some(()))), "2 of 4 left");
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    for i in 2..6 {
        assert_eq!(seq(q.pop(0, None)), i);
    }
}

#[test]
fn room_that_parked_pops_make_during_a_push_is_filled_at_once() {
    let q = queue(2, 2, false);
    let parked: Vec<_> = (0..2)
        .map(|c| match q.pop_async(c) {
            PopNow::Later(rx) => rx,
            PopNow::Ready(_) => panic!("the lane is empty"),
        })
        .collect();
    let mut out: VecDeque<_> = (0..5).map(|i| (0, batch(0, i))).collect();
    let Ok(Pushed::Full(_)) = q.push(&mut out) else {
        panic!("5 batches, 2 parked pops, capacity 2");
    };
    assert_eq!(out.len(), 1, "the parked pops' room was filled");
    for (i, mut rx) in parked.into_iter().enumerate() {
        assert_eq!(seq(rx.try_recv().expect("answered")), i as u64);
    }
    assert_eq!(seq(q.pop(0, now_plus(0))), 2);
    assert_eq!(seq(q.pop(1, now_plus(0))), 3);
}

#[test]
fn a_timed_out_pop_takes_nothing() {
    let q = queue(1, 2, false);
    let t = Instant::now();
    assert!(q.pop(0, now_plus(30)).is_none());
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert!(q.pop(0, Some(Instant::now())).is_none(), "a deadline now");
    let mut out = VecDeque::from([(0, batch(0, 7))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(q.pop(0, now_plus(1000))), 7);
}

#[test]
fn a_sleeping_consumer_is_woken_by_a_push_from_another_thread() {
    let q = queue(1, 2, false);
    let q2 = q.clone();
    let consumer = thread::spawn(move || seq(q2.pop(0, now_plus(5000))));
    until_asleep(&q, 1);
    let mut out = VecDeque::from([(0, batch(0, 3))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(consumer.join().expect("consumer"), 3);
}

#[test]
fn every_consumer_gets_each_end_of_pass_marker_once_in_shared_mode() {
    let q = queue(2, 4, false);
    let mut out = VecDeque::from([(0, batch(0, 0)), (0, Item::EndOfPass(0)), (0, batch(1, 0))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(q.pop(0, None)), 0);
    assert!(matches!(q.pop(1, None), Some(Ok(Popped::EndOfPass(0)))));
    // Consumer 0 gets its marker before the next pass's batch.
    assert!(matches!(q.pop(0, None), Some(Ok(Popped::EndOfPass(0)))));
    assert!(matches!(q.pop(0, None), Some(Ok(Popped::Batch((1, _))))));
    q.close();
    assert!(matches!(q.pop(1, None), Some(Ok(Popped::EndOfData))));
    assert!(matches!(q.pop(0, None), Some(Ok(Popped::EndOfData))));
}

#[test]
fn round_robin_lanes_are_separate_and_a_full_one_holds_back_only_its_own() {
    let q = queue(2, 1, true);
    let mut out = VecDeque::from([
        (0, batch(0, 0)),
        (1, batch(0, 1)),
        (0, batch(0, 2)),
        (1, batch(0, 3)),
        (0, batch(0, 4)),
    ]);
    let Ok(Pushed::Full(_)) = q.push(&mut out) else {
        panic!("each lane holds one batch");
    };
    let left: Vec<u64> = out
        .iter()
        .map(|(_, i)| match i {
            Item::Batch((_, s)) => *s,
            Item::EndOfPass(_) => u64::MAX,
        })
        .collect();
    assert_eq!(left, [2, 3, 4]);
    assert_eq!(seq(q.pop(1, None)), 1);
    assert!(q.pop(1, now_plus(10)).is_none());
    // Lane 1 has room, lane 0 not: batch 3 goes in past 2.
    let Ok(Pushed::Full(_)) = q.push(&mut out) else {
        panic!("lane 0 is still full");
    };
    assert_eq!(out.len(), 2);
    assert_eq!(seq(q.pop(1, None)), 3);
    assert_eq!(seq(q.pop(0, None)), 0);
    let Ok(Pushed::Full(_)) = q.push(&mut out) else {
        panic!("lane 0 takes one");
    };
    assert_eq!(seq(q.pop(0, None)), 2);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(q.pop(0, None)), 4);
}

#[test]
fn close_wakes_sleeping_consumers_and_refuses_later_pushes() {
    let q = queue(3, 4, false);
    let mut out = VecDeque::from([(0, batch(0, 0))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(q.pop(0, None)), 0);
    let sleepers: Vec<_> = (0..3)
        .map(|c| {
            let q = q.clone();
            thread::spawn(move || {
                if c == 0 {
                    q.pop(c, None)
                } else {
                    q.pop(c, now_plus(60_000))
                }
            })
        })
        .collect();
    until_asleep(&q, 3);
    q.close();
    q.close(); // idempotent
    for s in sleepers {
        assert!(matches!(s.join().unwrap(), Some(Ok(Popped::EndOfData))));
    }
    let mut out = VecDeque::from([(0, batch(0, 1))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::Closed)));
    assert_eq!(out.len(), 1, "a refused item stays with the producer");
    assert!(matches!(q.pop(1, None), Some(Ok(Popped::EndOfData))));
}

#[test]
fn a_closed_queue_is_drained_before_the_end_of_data() {
    let q = queue(1, 8, false);
    let mut out: VecDeque<_> = (0..3).map(|i| (0, batch(0, i))).collect();
    out.push_back((0, Item::EndOfPass(0)));
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    q.close();
    assert_eq!(seq(q.pop(0, None)), 0);
    assert_eq!(seq(q.pop(0, None)), 1);
    assert_eq!(seq(q.pop(0, None)), 2);
    assert!(matches!(q.pop(0, None), Some(Ok(Popped::EndOfPass(0)))));
    assert!(matches!(q.pop(0, None), Some(Ok(Popped::EndOfData))));
}

#[test]
fn a_failure_wakes_sleepers_and_waiting_producers() {
    let q = queue(1, 1, false);
    let mut out = VecDeque::from([(0, batch(0, 0)), (0, batch(0, 1))]);
    let Ok(Pushed::Full(room)) = q.push(&mut out) else {
        panic!("capacity 1");
    };
    assert_eq!(seq(q.pop(0, None)), 0);
    let q2 = q.clone();
    let sleeper = thread::spawn(move || q2.pop(0, now_plus(5000)));
    until_asleep(&q, 1);
    q.fail("stopped".into());
    q.fail("a second failure".into());
    assert!(matches!(
        sleeper.join().expect("sleeper"),
        Some(Err(e)) if e == "stopped"
    ));
    // The producer's signal fired (room) or was cancelled: either way it
    // learns of the failure on its next push.
    let _ = futures::executor::block_on(room);
    assert!(matches!(q.push(&mut out), Err(e) if e == "stopped"));
    assert_eq!(q.failure().as_deref(), Some("stopped"));
}

#[test]
fn an_async_pop_is_answered_by_a_push_and_a_given_up_one_loses_nothing() {
    let q = queue(1, 2, false);
    let PopNow::Later(rx) = q.pop_async(0) else {
        panic!("the lane is empty");
    };
    drop(rx);
    let mut out = VecDeque::from([(0, batch(0, 1))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    let PopNow::Ready(r) = q.pop_async(0) else {
        panic!("the batch was put back");
    };
    assert_eq!(seq(Some(r)), 1);
    let PopNow::Later(mut rx) = q.pop_async(0) else {
        panic!("the lane is empty again");
    };
    let mut out = VecDeque::from([(0, batch(0, 2))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(rx.try_recv().expect("not cancelled")), 2);
    // Given up after it was answered: the caller gets the batch.
    let PopNow::Later(rx) = q.pop_async(0) else {
        panic!("the lane is empty again");
    };
    let mut out = VecDeque::from([(0, batch(0, 3))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(rx.cancel()), 3);
    // Given up before: nothing, and nothing is lost.
    let PopNow::Later(rx) = q.pop_async(0) else {
        panic!("the lane is empty again");
    };
    assert!(rx.cancel().is_none());
    let mut out = VecDeque::from([(0, batch(0, 4))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert_eq!(seq(q.pop(0, now_plus(0))), 4);
}

/// A reply of an embedder that records what it was sent, or is gone.
struct Recorded {
    gone: bool,
    got: Arc<Mutex<Vec<Answer<B, String>>>>,
}

impl Reply<B, String> for Recorded {
    fn send(self: Box<Self>, answer: Answer<B, String>) -> Result<(), Answer<B, String>> {
        if self.gone {
            return Err(answer);
        }
        self.got.lock().unwrap().push(answer);
        Ok(())
    }
}

#[test]
fn a_parked_reply_is_answered_by_a_push_and_one_whose_consumer_went_loses_nothing() {
    let q = queue(1, 2, false);
    let got = Arc::new(Mutex::new(Vec::new()));
    let reply = |gone| {
        Box::new(Recorded {
            gone,
            got: got.clone(),
        })
    };
    // Parked on an empty lane; its consumer is gone when the batch comes.
    q.pop_or_park(0, reply(true));
    let mut out = VecDeque::from([(0, batch(0, 5)), (0, Item::EndOfPass(0))]);
    assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
    assert!(got.lock().unwrap().is_empty());
    // A live one takes the batch that was put back, then the marker.
    q.pop_or_park(0, reply(false));
    q.pop_or_park(0, reply(false));
    q.pop_or_park(0, reply(false));
    q.close();
    let got = got.lock().unwrap();
    assert!(matches!(got[0], Ok(Popped::Batch((0, 5)))));
    assert!(matches!(got[1], Ok(Popped::EndOfPass(0))));
    assert!(matches!(got[2], Ok(Popped::EndOfData)));
}

#[test]
fn fifo_within_a_lane_with_a_producer_waiting_for_room() {
    let q = queue(1, 3, false);
    let producer = {
        let q = q.clone();
        thread::spawn(move || {
            let mut out: VecDeque<_> = (0..1000).map(|i| (0, batch(0, i))).collect();
            while !out.is_empty() {
                if let Pushed::Full(room) = q.push(&mut out).unwrap() {
                    let _ = futures::executor::block_on(room);
                }
            }
            q.close();
        })
    };
    let got: Vec<u64> = std::iter::from_fn(|| match q.pop(0, None) {
        Some(Ok(Popped::Batch((_, s)))) => Some(s),
        _ => None,
    })
    .collect();
    producer.join().unwrap();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
}

/// Producer and consumers of every kind at random speeds, consumers that
/// give up (time-outs, cancelled async pops): every batch of every pass
/// reaches exactly one consumer once, each consumer gets each pass's marker
/// once and in order, and nothing hangs.
#[test]
fn random_stress_exactly_once_and_no_hang() {
    const PASSES: u64 = 3;
    const BATCHES: u64 = 60;
    for seed in 0..24u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let consumers = rng.gen_range(1..=3usize);
        let round_robin = rng.gen_bool(0.5);
        let capacity = rng.gen_range(1..=5usize);
        let flush = rng.gen_range(1..=6usize);
        let q = queue(consumers, capacity, round_robin);
        let lanes = q.lanes();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let producer = {
            let q = q.clone();
            spawn_signalled(&done_tx, move || {
                let mut out = VecDeque::new();
                let drain = |out: &mut VecDeque<(usize, Item<B>)>| {
                    while !out.is_empty() {
                        match q.push(out).expect("not failed") {
                            Pushed::All | Pushed::Closed => {}
                            Pushed::Full(room) => {
                                let _ = futures::executor::block_on(room);
                            }
                        }
                    }
                };
                for pass in 0..PASSES {
                    for k in 0..BATCHES {
                        out.push_back((lanes.of_batch(k), batch(pass, k)));
                        if out.len() >= flush {
                            drain(&mut out);
                        }
                    }
                    for lane in 0..lanes.count() {
                        out.push_back((lane, Item::EndOfPass(pass)));
                    }
                    drain(&mut out);
                }
                q.close();
            })
        };
        let handles: Vec<_> = (0..consumers)
            .map(|c| {
                let q = q.clone();
                let mut rng = ChaCha8Rng::seed_from_u64(seed * 100 + c as u64);
                spawn_signalled(&done_tx, move || {
                    let mut got = Vec::new();
                    let mut markers = Vec::new();
                    loop {
                        let r = match rng.gen_range(0..3) {
                            0 => q.pop(c, None),
                            1 => q.pop(c, now_plus(rng.gen_range(0..3))),
                            _ => match q.pop_async(c) {
                                PopNow::Ready(r) => Some(r),
                                PopNow::Later(rx) if rng.gen_bool(0.3) => {
                                    if rng.gen_bool(0.2) {
                                        thread::yield_now();
                                    }
                                    rx.cancel()
                                }
                                PopNow::Later(rx) => futures::executor::block_on(rx).ok(),
                            },
                        };
                        match r {
                            None => {}
                            Some(Ok(Popped::Batch(b))) => got.push(b),
                            Some(Ok(Popped::EndOfPass(p))) => markers.push(p),
                            Some(Ok(Popped::EndOfData)) => return (got, markers),
                            Some(Err(e)) => panic!("{e}"),
                        }
                        if rng.gen_bool(0.1) {
                            thread::yield_now(); // jitter: another interleaving, not a wait
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        until_done(
            &done_rx,
            1 + consumers,
            deadline,
            &format!("seed {seed} ({consumers} consumers, round robin {round_robin}, capacity {capacity}, flush {flush})"),
        );
        producer.join().expect("producer");
        let mut all = Vec::new();
        for (c, h) in handles.into_iter().enumerate() {
            let (got, markers) = h.join().expect("consumer");
            assert_eq!(
                markers,
                (0..PASSES).collect::<Vec<_>>(),
                "seed {seed} consumer {c}"
            );
            // A consumer's batches come pass by pass.
            assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "seed {seed}");
            if round_robin {
                assert!(got.iter().all(|&(_, k)| k as usize % consumers == c));
            }
            all.extend(got);
        }
        all.sort_unstable();
        let want: Vec<_> = (0..PASSES)
            .flat_map(|p| (0..BATCHES).map(move |k| (p, k)))
            .collect();
        assert_eq!(all, want, "seed {seed}: every batch exactly once");
    }
}

/// What a producer did: batches that went in, and those still with it when
/// the queue failed.
struct Produced {
    accepted: Vec<B>,
    handed_back: Vec<B>,
}

/// 8 producers and 8 consumers using every pop form on one shared lane of
/// random capacity; in some rounds a failer fails the queue once a random
/// share of the batches went through. Every batch that went in is popped at
/// most once (exactly once when nothing failed), every consumer ends (with
/// the end of data or the failure), every producer is released.
#[test]
fn stress_8_producers_8_consumers_fail_in_the_middle() {
    const PER_PRODUCER: u64 = 2_000;
    let mut rounds_failed_mid_stream = 0;
    for round in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(round);
        let cap = rng.gen_range(1..=32);
        let fail_after = (round % 2 == 1).then(|| rng.gen_range(0..8 * PER_PRODUCER as usize));
        // Failed by a consumer (or at once for 0): see below.
        let q = queue(8, cap, false);
        let popped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (made_tx, made_rx) = std::sync::mpsc::channel();
        let (took_tx, took_rx) = std::sync::mpsc::channel();
        let producers: Vec<_> = (0..8u64)
            .map(|p| {
                let q = q.clone();
                let flush = rng.gen_range(1..=8usize);
                spawn_signalled(&made_tx, move || {
                    let mut done = Produced {
                        accepted: Vec::new(),
                        handed_back: Vec::new(),
                    };
                    let mut out = VecDeque::new();
                    for i in 0..PER_PRODUCER {
                        out.push_back((0, batch(p, i)));
                        if out.len() < flush && i + 1 < PER_PRODUCER {
                            continue;
                        }
                        let before: Vec<B> = out.iter().map(item_batch).collect();
                        loop {
                            match q.push(&mut out) {
                                Ok(Pushed::Full(room)) => {
                                    let _ = futures::executor::block_on(room);
                                }
                                Ok(_) => break,
                                Err(_) => {
                                    done.handed_back = out.iter().map(item_batch).collect();
                                    let n = before.len() - out.len();
                                    done.accepted.extend_from_slice(&before[..n]);
                                    return done;
                                }
                            }
                        }
                        done.accepted.extend(before);
                    }
                    done
                })
            })
            .collect();
        let consumers: Vec<_> = (0..8usize)
            .map(|c| {
                let (q, popped) = (q.clone(), popped.clone());
                spawn_signalled(&took_tx, move || {
                    let mut got = Vec::new();
                    loop {
                        let r = match c % 3 {
                            0 => q.pop(c, None),
                            1 => q.pop(c, now_plus(1)),
                            _ => match q.pop_async(c) {
                                PopNow::Ready(r) => Some(r),
                                PopNow::Later(rx) => futures::executor::block_on(rx).ok(),
                            },
                        };
                        match r {
                            None => {}
                            Some(Ok(Popped::Batch(b))) => {
                                got.push(b);
                                let n =
                                    1 + popped.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                // The consumer that pops the `fail_after`-th
                                // batch fails the queue: while the producers
                                // still hold batches, however threads run.
                                if Some(n) == fail_after {
                                    q.fail("failed mid-stream".into());
                                }
                            }
                            Some(Ok(Popped::EndOfPass(_))) => panic!("no markers pushed"),
                            Some(Ok(Popped::EndOfData)) => return (got, false),
                            Some(Err(_)) => return (got, true),
                        }
                    }
                })
            })
            .collect();
        if fail_after == Some(0) {
            q.fail("failed mid-stream".into());
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        until_done(
            &made_rx,
            producers.len(),
            deadline,
            &format!("round {round}: a producer"),
        );
        let mut produced = Vec::new();
        for p in producers {
            produced.push(p.join().unwrap());
        }
        q.close();
        until_done(
            &took_rx,
            consumers.len(),
            deadline,
            &format!("round {round}: a consumer"),
        );
        let mut consumed = Vec::new();
        let mut saw_failure = false;
        for c in consumers {
            let (got, failed) = c.join().unwrap();
            consumed.extend(got);
            saw_failure |= failed;
        }
        let mut accepted: Vec<B> = produced.iter().flat_map(|p| p.accepted.clone()).collect();
        accepted.sort_unstable();
        consumed.sort_unstable();
        let n = consumed.len();
        consumed.dedup();
        assert_eq!(consumed.len(), n, "round {round}: a batch popped twice");
        assert!(
            consumed.iter().all(|b| accepted.binary_search(b).is_ok()),
            "round {round}: a batch popped that never went in"
        );
        for p in &produced {
            assert!(p.handed_back.iter().all(|b| !p.accepted.contains(b)));
        }
        if fail_after.is_none() {
            assert!(!saw_failure);
            assert_eq!(
                consumed, accepted,
                "round {round}: every batch exactly once"
            );
            assert_eq!(accepted.len(), 8 * PER_PRODUCER as usize);
        } else if produced.iter().any(|p| !p.handed_back.is_empty()) {
            rounds_failed_mid_stream += 1;
        }
    }
    assert!(
        rounds_failed_mid_stream >= 3,
        "{rounds_failed_mid_stream} of 6 failing rounds failed mid-stream"
    );
}

fn item_batch((_, item): &(usize, Item<B>)) -> B {
    match item {
        Item::Batch(b) => *b,
        Item::EndOfPass(_) => unreachable!("no markers pushed"),
    }
}
