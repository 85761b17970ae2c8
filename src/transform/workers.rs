//! [`Workers`]: the transform workers — a rayon pool of their own whose
//! threads are waited for when it is dropped. Rayon's own drop only asks
//! its threads to end; a stopped pipeline would return with them still
//! running (and, with a Python map, still holding on to the interpreter).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// How long dropping the pool waits for a worker still inside a map call.
const GRACE: Duration = Duration::from_secs(2);

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

    fn transform_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                    .filter(|n| n.starts_with("wtest-drop-"))
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn dropping_the_workers_waits_for_every_thread() {
        // Several rounds: a thread still exiting after drop would show.
        for _ in 0..20 {
            let w = Workers::new(3, "wtest-drop").unwrap();
            let sum: u64 = w.pool().install(|| {
                use rayon::prelude::*;
                (0..1000u64).into_par_iter().sum()
            });
            assert_eq!(sum, 499_500);
            drop(w);
            assert_eq!(transform_threads(), 0, "a worker outlived the drop");
        }
    }
}
