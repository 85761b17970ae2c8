//! What the stall watchdog sees of one reader incarnation: since when it is
//! inside a blocking open or read, the file and record it has reached, and
//! the fence the supervisor sets on a reader it gives up on.
//!
//! The reader holds `state` while it checks its fence and sends a chunk, so
//! the supervisor, holding it to fence a stuck reader, takes exactly the
//! record the reader reached: a fenced reader sends nothing more.

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
}
