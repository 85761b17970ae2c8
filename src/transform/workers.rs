//! [`Workers`]: the transform workers — a rayon pool of their own whose
//! threads are waited for when it is dropped. Rayon's own drop only asks
//! its threads to end; a stopped pipeline would return with them still
//! running (and, with a Python map, still holding on to the interpreter).
//! [`WorkerGate`]: how many of them may run a row at once, changed while
//! they run (an autotuner's workers: the pool is made at the most, the gate
//! lets the tuned number work).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// How long dropping the pool waits for a worker still inside a map call.
const GRACE: Duration = Duration::from_secs(2);

/// How many transform workers may run a row at once: a row task waits at
/// the gate (asleep, not spinning) while that many run, so at most
/// [`limit`](Self::limit) workers are busy whatever the pool's size. The
/// limit may change at any time; raising it wakes the waiting workers.
/// Which worker runs a row does not change its output (each row's RNG is
/// its own), so the batches do not depend on the limit.
#[derive(Debug)]
pub struct WorkerGate {
    limit: AtomicUsize,
    running: Mutex<usize>,
    room: Condvar,
    peak: AtomicUsize,
}

impl WorkerGate {
    /// A gate letting `limit` workers (at least 1) run at once.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(WorkerGate {
            limit: AtomicUsize::new(limit.max(1)),
            running: Mutex::new(0),
            room: Condvar::new(),
            peak: AtomicUsize::new(0),
        })
    }

    /// Let `limit` workers (at least 1) run at once from now on (those
    /// running over a lowered limit finish their rows).
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit.max(1), Ordering::Release);
        let _running = self.running.lock();
        self.room.notify_all();
    }

    /// The workers let run at once.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// The most workers that ran rows at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Wait for a turn: until fewer than the limit run.
    pub(crate) fn enter(self: &Arc<Self>) -> GateTurn {
        let mut running = self.running.lock();
        while *running >= self.limit() {
            self.room.wait(&mut running);
        }
        *running += 1;
        self.peak.fetch_max(*running, Ordering::Relaxed);
        GateTurn(self.clone())
    }
}

/// A worker's turn at the [`WorkerGate`], given back when dropped.
pub(crate) struct GateTurn(Arc<WorkerGate>);

impl Drop for GateTurn {
    fn drop(&mut self) {
        let mut running = self.0.running.lock();
        *running -= 1;
        self.0.room.notify_one();
    }
}

/// A rayon pool of named threads, joined (within [`GRACE`]) on drop.
pub(crate) struct Workers {
    pool: Option<rayon::ThreadPool>,
    /// Threads whose work loop has not ended (all `n` exist once `build`
    /// has returned).
    live: Arc<(Mutex<usize>, Condvar)>,
    /// The threads, spawned by us (rayon gives no handles of its own).
    threads: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

impl Workers {
    /// Start `n` workers named `{name}-{i}`.
    pub(crate) fn new(n: usize, name: &'static str) -> Result<Self> {
        let live = Arc::new((Mutex::new(n), Condvar::new()));
        let ended = live.clone();
        let threads = Arc::new(Mutex::new(Vec::with_capacity(n)));
        let spawned = threads.clone();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .spawn_handler(move |thread| {
                let handle = std::thread::Builder::new()
                    .name(format!("{name}-{}", thread.index()))
                    .spawn(move || thread.run())?;
                spawned.lock().push(handle);
                Ok(())
            })
            .exit_handler(move |_| {
                let (count, changed) = &*ended;
                *count.lock() -= 1;
                changed.notify_all();
            })
            .build()
            .map_err(|e| Error::Config(format!("transform workers: {e}")))?;
        Ok(Workers {
            pool: Some(pool),
            live,
            threads,
        })
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &rayon::ThreadPool {
        self.pool.as_ref().expect("the pool lives until drop")
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        drop(self.pool.take());
        let (count, changed) = &*self.live;
        let deadline = Instant::now() + GRACE;
        let mut left = count.lock();
        while *left > 0 {
            if changed.wait_until(&mut left, deadline).timed_out() {
                log::warn!(
                    "{} transform workers still inside a map call {GRACE:?} after the pipeline stopped; left to end by themselves",
                    *left
                );
                return;
            }
        }
        drop(left);
        // Every work loop has ended: the threads are on their way out.
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_lets_at_most_its_limit_run_and_a_raised_limit_wakes_the_waiting() {
        // Mutation (tried): `>=` → `>` in `enter`'s wait lets limit + 1 run.
        let w = Workers::new(6, "wtest-gate").unwrap();
        let gate = WorkerGate::new(2);
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let run = |gate: &Arc<WorkerGate>| {
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            for _ in 0..24 {
                let (gate, now, most, done) =
                    (gate.clone(), now.clone(), most.clone(), done_tx.clone());
                w.pool().spawn(move || {
                    let _turn = gate.enter();
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    now.fetch_sub(1, Ordering::SeqCst);
                    done.send(()).unwrap();
                });
            }
            for _ in 0..24 {
                done_rx.recv().unwrap();
            }
        };
        run(&gate);
        assert!(most.load(Ordering::SeqCst) <= 2, "more than the limit ran");
        assert_eq!(gate.peak(), most.load(Ordering::SeqCst));
        gate.set_limit(5);
        most.store(0, Ordering::SeqCst);
        run(&gate);
        assert!(most.load(Ordering::SeqCst) <= 5);
        assert!(gate.peak() <= 5);
    }

    /// Counts, as its thread ends, that the thread ended: a thread-local's
    /// destructor runs on the thread after its work loop, before it is gone
    /// (a join waits for it). It takes a while, so that a drop that does
    /// not join returns before it has counted.
    struct EndOfThread(Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for EndOfThread {
        fn drop(&mut self) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    thread_local! {
        static END: std::cell::RefCell<Option<EndOfThread>> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn dropping_the_workers_waits_for_every_thread() {
        // Several rounds: a thread still running after drop would show. (Not
        // by /proc/self/task: the kernel can list a joined thread there for a
        // moment after the join returns.)
        for round in 0..5 {
            let w = Workers::new(3, "wtest-drop").unwrap();
            let sum: u64 = w.pool().install(|| {
                use rayon::prelude::*;
                (0..1000u64).into_par_iter().sum()
            });
            assert_eq!(sum, 499_500);
            let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            w.pool().broadcast(|_| {
                END.with(|e| *e.borrow_mut() = Some(EndOfThread(ended.clone())));
            });
            drop(w);
            assert_eq!(
                ended.load(Ordering::SeqCst),
                3,
                "round {round}: a worker outlived the drop"
            );
        }
    }
}
