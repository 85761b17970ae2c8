//! What the stall watchdog sees of one reader incarnation: since when it is
//! inside a blocking open or read, the file and record it has reached, and
//! the fence the supervisor sets on a reader it gives up on.
//!
//! The reader holds `state` while it checks its fence and sends a chunk, so
//! the supervisor, holding it to fence a stuck reader, takes exactly the
//! record the reader reached: a fenced reader sends nothing more. Fencing
//! and taking a new task are atomic with respect to each other: the
//! watchdog fences only a reader still inside the very blocking call it
//! saw ([`fence_if_stuck`](ReaderWatch::fence_if_stuck), under the lock),
//! and a reader takes a task only unfenced, under the same lock
//! ([`take_task`](ReaderWatch::take_task)) — so a reader that finished its
//! file as the watchdog looked is not replaced, and a fenced one never
//! steals a task it would abandon.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};

use crate::messages::ReadTask;

/// The watch of one reader incarnation.
#[derive(Default, Debug)]
pub(crate) struct ReaderWatch {
    /// When (ns since the pipeline start) the current blocking open/read
    /// began; 0 when the reader is not inside one.
    busy_since: AtomicU64,
    state: Mutex<WatchState>,
}

/// A reader's place, under the watch's lock.
#[derive(Default, Debug)]
pub(crate) struct WatchState {
    /// Set by the watchdog: this incarnation must not send anything more.
    pub fenced: bool,
    /// The file being read, with `start_record` at the first record not sent.
    pub task: Option<ReadTask>,
}

impl ReaderWatch {
    /// The reader enters a blocking open or read at `now_ns`.
    pub fn enter(&self, now_ns: u64) {
        self.busy_since.store(now_ns.max(1), Relaxed);
    }

    /// The reader left it.
    pub fn leave(&self) {
        self.busy_since.store(0, Relaxed);
    }

    /// When the current blocking call began (0: none).
    pub fn busy_since(&self) -> u64 {
        self.busy_since.load(Relaxed)
    }

    /// The reader's place, locked.
    pub fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock()
    }

    /// The watchdog: fence the reader if it is still inside the blocking
    /// call that began at `since` (its task, at the first record not sent,
    /// is handed back to retry); `None` if it was fenced already or has
    /// moved on since the watchdog looked.
    pub fn fence_if_stuck(&self, since: u64) -> Option<Fenced> {
        let mut st = self.state.lock();
        if st.fenced || since == 0 || self.busy_since() != since {
            return None;
        }
        st.fenced = true;
        Some(Fenced {
            task: st.task.take(),
        })
    }

    /// The reader: take a task from `steal` as its current one, unless it is
    /// fenced (`Err`: then nothing is stolen).
    pub fn take_task(
        &self,
        steal: impl FnOnce() -> Option<ReadTask>,
    ) -> Result<Option<ReadTask>, Fenced> {
        let mut st = self.state.lock();
        if st.fenced {
            return Err(Fenced { task: None });
        }
        st.task = steal();
        Ok(st.task.clone())
    }
}

/// A fenced reader's task, taken from it by the watchdog.
#[derive(Debug)]
pub(crate) struct Fenced {
    /// The file it was on (`None`: it was opening none, or had none).
    pub task: Option<ReadTask>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use feedline::plan::{FileTask, RecordStride};
    use std::sync::mpsc::channel;
    use std::sync::Arc;

    fn task(file: &str) -> ReadTask {
        ReadTask {
            set: 0,
            task: FileTask {
                pass: 0,
                seq: 0,
                file: file.into(),
                file_index: 0,
                start_record: 0,
                stride: RecordStride::ALL,
            },
            start_record: 0,
            next_chunk: 0,
            attempts: 0,
        }
    }

    #[test]
    fn a_reader_that_moved_on_is_not_fenced() {
        let w = ReaderWatch::default();
        w.take_task(|| Some(task("a"))).unwrap();
        w.enter(10);
        let seen = w.busy_since();
        // The reader leaves the call (finishes its file) before the watchdog locks.
        w.leave();
        assert!(w.fence_if_stuck(seen).is_none());
        // A later call is not the one the watchdog saw either.
        w.enter(20);
        assert!(w.fence_if_stuck(seen).is_none());
        assert!(!w.lock().fenced);
        // Still inside the call it saw: fenced, its task handed back once.
        let f = w.fence_if_stuck(20).expect("fenced");
        assert_eq!(f.task.expect("its task").task.file, "a");
        assert!(w.fence_if_stuck(20).is_none());
    }

    #[test]
    fn a_fenced_reader_steals_nothing() {
        let w = ReaderWatch::default();
        w.enter(5);
        assert!(w.fence_if_stuck(5).is_some());
        let mut stolen = false;
        assert!(w
            .take_task(|| {
                stolen = true;
                Some(task("b"))
            })
            .is_err());
        assert!(!stolen, "a fenced reader stole a task");
    }

    #[test]
    fn fencing_waits_for_a_steal_in_progress() {
        // The reader is held inside its steal (a latch); the watchdog tries
        // to fence it then: it must wait, and then find the reader moved on.
        let w = Arc::new(ReaderWatch::default());
        w.enter(7);
        w.leave();
        let (inside_tx, inside_rx) = channel();
        let (release_tx, release_rx) = channel::<()>();
        let reader = {
            let w = w.clone();
            std::thread::spawn(move || {
                w.take_task(|| {
                    inside_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    Some(task("c"))
                })
            })
        };
        inside_rx.recv().unwrap();
        let (fenced_tx, fenced_rx) = channel();
        let watchdog = {
            let w = w.clone();
            std::thread::spawn(move || fenced_tx.send(w.fence_if_stuck(7)).unwrap())
        };
        // The watchdog cannot decide while the steal holds the lock.
        assert!(fenced_rx.try_recv().is_err());
        release_tx.send(()).unwrap();
        let taken = reader.join().unwrap().expect("not fenced");
        assert_eq!(taken.expect("a task").task.file, "c");
        watchdog.join().unwrap();
        assert!(
            fenced_rx.recv().unwrap().is_none(),
            "fenced after moving on"
        );
        assert_eq!(w.lock().task.as_ref().unwrap().task.file, "c");
    }
}
