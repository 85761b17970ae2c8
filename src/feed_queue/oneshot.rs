//! A one-shot channel: one value, sent once, awaited as a future or polled.
//!
//! The feed queue answers a parked pop on one, and signals a producer that
//! a full lane has room on another. What it adds to a plain channel is the
//! hand-back: [`Sender::send`] returns the value when the receiver has gone
//! or closed, so the queue puts a batch back instead of losing it; and
//! [`Receiver::cancel`] closes the receiver and returns what was already
//! sent — after it, no send can succeed, so nothing is in between.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// The sender went away without sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the sender went away without sending")]
pub struct Canceled;

struct Slot<T> {
    value: Option<T>,
    /// The sender sent or was dropped.
    sender_done: bool,
    /// The receiver was closed or dropped: sends fail.
    receiver_closed: bool,
    waker: Option<Waker>,
}

/// A new channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        sender_done: false,
        receiver_closed: false,
        waker: None,
    }));
    (Sender { slot: slot.clone() }, Receiver { slot })
}

/// The sending half.
pub struct Sender<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Sender<T> {
    /// Send `value`; it comes back if the receiver has gone or closed.
    pub fn send(self, value: T) -> Result<(), T> {
        let mut s = self.slot.lock();
        if s.receiver_closed {
            return Err(value);
        }
        s.value = Some(value);
        s.sender_done = true;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        Ok(())
    }

    /// True once the receiver has gone or closed (a send would fail).
    pub fn is_canceled(&self) -> bool {
        self.slot.lock().receiver_closed
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = self.slot.lock();
        if !s.sender_done {
            s.sender_done = true;
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sender(..)")
    }
}

/// The receiving half: a future of the value (`Err(Canceled)` if the sender
/// went away without sending).
pub struct Receiver<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Receiver<T> {
    /// The value if it was sent (`Ok(None)`: not yet).
    pub fn try_recv(&mut self) -> Result<Option<T>, Canceled> {
        let mut s = self.slot.lock();
        match s.value.take() {
            Some(v) => Ok(Some(v)),
            None if s.sender_done => Err(Canceled),
            None => Ok(None),
        }
    }

    /// Refuse every later send (a value already sent stays to be taken).
    pub fn close(&mut self) {
        self.slot.lock().receiver_closed = true;
    }

    /// Give up: close, and return the value if it was already sent — after
    /// this call no send succeeds, so a value is either returned here or
    /// handed back to its sender.
    pub fn cancel(self) -> Option<T> {
        let mut s = self.slot.lock();
        s.receiver_closed = true;
        s.value.take()
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.slot.lock().receiver_closed = true;
    }
}

impl<T> Future for Receiver<T> {
    type Output = Result<T, Canceled>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.lock();
        if let Some(v) = s.value.take() {
            return Poll::Ready(Ok(v));
        }
        if s.sender_done {
            return Poll::Ready(Err(Canceled));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receiver(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_sent_is_received_once() {
        let (tx, mut rx) = channel();
        assert_eq!(rx.try_recv(), Ok(None));
        assert!(!tx.is_canceled());
        tx.send(5).unwrap();
        assert_eq!(rx.try_recv(), Ok(Some(5)));
        assert_eq!(rx.try_recv(), Err(Canceled));
    }

    #[test]
    fn a_send_to_a_closed_or_dropped_receiver_hands_the_value_back() {
        let (tx, rx) = channel();
        drop(rx);
        assert!(tx.is_canceled());
        assert_eq!(tx.send(1), Err(1));
        let (tx, mut rx) = channel::<u8>();
        rx.close();
        assert_eq!(tx.send(2), Err(2));
    }

    #[test]
    fn cancel_returns_what_was_sent_and_refuses_the_rest() {
        let (tx, rx) = channel();
        tx.send(3).unwrap();
        assert_eq!(rx.cancel(), Some(3));
        let (tx, rx) = channel::<u8>();
        assert_eq!(rx.cancel(), None);
        assert_eq!(tx.send(4), Err(4));
    }

    #[test]
    fn a_dropped_sender_cancels_the_future() {
        let (tx, mut rx) = channel::<u8>();
        drop(tx);
        assert_eq!(rx.try_recv(), Err(Canceled));
    }
}
