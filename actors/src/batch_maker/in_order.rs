//! [`InOrder`]: things started in one order and finished in any, handed
//! out in the order they were started — the batch maker's release of
//! batches made side by side, in number order. A plain value, no actix.

use std::collections::VecDeque;

/// Tickets handed out in order; each is finished with a value, and the
/// values come out in ticket order, each once the ones before it have.
#[derive(Debug)]
pub(crate) struct InOrder<T> {
    /// The ticket of `slots[0]`.
    first: u64,
    /// One slot per ticket not yet handed out: its value once finished.
    slots: VecDeque<Option<T>>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder {
            first: 0,
            slots: VecDeque::new(),
        }
    }
}

impl<T> InOrder<T> {
    /// A ticket for something started now, to [`finish`](Self::finish) later.
    pub fn start(&mut self) -> u64 {
        self.slots.push_back(None);
        self.first + self.slots.len() as u64 - 1
    }

    /// Something started and finished at once.
    pub fn done_now(&mut self, value: T) {
        let t = self.start();
        self.finish(t, value);
    }

    /// Ticket `ticket` is finished with `value`. A ticket not handed out,
    /// or finished already, is a bug of the caller's: refused (`false`).
    pub fn finish(&mut self, ticket: u64, value: T) -> bool {
        let Some(i) = ticket.checked_sub(self.first) else {
            return false;
        };
        match self.slots.get_mut(i as usize) {
            Some(slot @ None) => {
                *slot = Some(value);
                true
            }
            _ => false,
        }
    }

    /// The value of the oldest ticket, if it is finished.
    pub fn pop(&mut self) -> Option<T> {
        if !matches!(self.slots.front(), Some(Some(_))) {
            return None;
        }
        self.first += 1;
        self.slots.pop_front().flatten()
    }

    /// True when every ticket was popped.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::SeedableRng;

    #[test]
    fn values_come_out_in_ticket_order_whatever_the_finishing_order() {
        for seed in 0..50u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut q = InOrder::default();
            let mut tickets: Vec<u64> = (0..40).map(|_| q.start()).collect();
            assert_eq!(tickets, (0..40).collect::<Vec<_>>());
            tickets.shuffle(&mut rng);
            let mut out = Vec::new();
            for t in tickets {
                assert!(q.finish(t, t * 10));
                while let Some(v) = q.pop() {
                    out.push(v);
                }
            }
            assert_eq!(
                out,
                (0..40).map(|t| t * 10).collect::<Vec<_>>(),
                "seed {seed}"
            );
            assert!(q.is_empty());
        }
    }

    #[test]
    fn an_unfinished_ticket_holds_back_the_later_ones() {
        let mut q = InOrder::default();
        let a = q.start();
        q.done_now("b");
        assert_eq!(q.pop(), None, "b waits for a");
        assert!(q.finish(a, "a"));
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.pop(), Some("b"));
        assert_eq!(q.pop(), None);
        // Tickets go on from where they were.
        assert_eq!(q.start(), 2);
    }

    #[test]
    fn a_ticket_is_finished_once() {
        let mut q = InOrder::default();
        let a = q.start();
        assert!(q.finish(a, 1));
        assert!(!q.finish(a, 2), "finished twice");
        assert!(!q.finish(a + 1, 3), "never handed out");
        assert_eq!(q.pop(), Some(1));
        assert!(!q.finish(a, 4), "already handed out");
    }
}
