//! The file tasks of one file set that its readers steal: retries first,
//! then the pass's files (two `crossbeam_deque::Injector`s). The file queue
//! fills them; readers take from them; no actor owns them.

use crossbeam_deque::{Injector, Steal};

use crate::messages::ReadTask;

/// One file set's task queues.
#[derive(Default)]
pub(crate) struct TaskQueues {
    /// Files to resume after a failed reader.
    pub retries: Injector<ReadTask>,
    /// The pass's files.
    pub tasks: Injector<ReadTask>,
}

impl TaskQueues {
    /// Take a task: a retry if there is one, else a file of the pass.
    pub fn steal(&self) -> Option<ReadTask> {
        for q in [&self.retries, &self.tasks] {
            loop {
                match q.steal() {
                    Steal::Success(t) => return Some(t),
                    Steal::Empty => break,
                    Steal::Retry => continue,
                }
            }
        }
        None
    }

    /// True while a task waits.
    pub fn has_work(&self) -> bool {
        !self.tasks.is_empty() || !self.retries.is_empty()
    }

    /// Drop every task (shutdown).
    pub fn clear(&self) {
        while self.steal().is_some() {}
    }
}
