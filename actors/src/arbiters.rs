//! The arbiters (OS threads) a pipeline starts — one per reader incarnation,
//! one for the shuffle stage, one per trainer — kept to stop and join them
//! at the end (`System::stop` does not join arbiters).

use std::sync::Arc;

use actix::prelude::*;
use parking_lot::Mutex;

/// The arbiters of one pipeline; cheap to clone (shared).
#[derive(Clone, Default)]
pub(crate) struct Arbiters(Arc<Mutex<Vec<Arbiter>>>);

impl Arbiters {
    /// Start a new arbiter (an OS thread) and keep it.
    pub fn new_arbiter(&self) -> ArbiterHandle {
        let a = Arbiter::new();
        let h = a.handle();
        self.0.lock().push(a);
        h
    }

    /// Stop every arbiter and wait for its thread (not from one of them) —
    /// at most a grace period: a reader blocked in I/O that the watchdog
    /// abandoned cannot be interrupted; its thread is left to end by itself.
    pub fn stop_and_join(&self) {
        let all: Vec<Arbiter> = self.0.lock().drain(..).collect();
        if all.is_empty() {
            return;
        }
        for a in &all {
            a.stop();
        }
        let n = all.len();
        let (tx, rx) = std::sync::mpsc::channel();
        let joiner = std::thread::Builder::new()
            .name("feedline-join".into())
            .spawn(move || {
                for a in all {
                    let _ = a.join();
                }
                let _ = tx.send(());
            });
        let Ok(joiner) = joiner else { return };
        if rx.recv_timeout(std::time::Duration::from_secs(2)).is_ok() {
            // The joiner has sent its last word; wait for its own exit too, so
            // that no thread of the pipeline outlives `stop_and_join`.
            let _ = joiner.join();
        } else {
            log::warn!("not all of {n} pipeline threads ended within 2 s (a reader blocked in I/O?); leaving them to end by themselves");
        }
    }
}
