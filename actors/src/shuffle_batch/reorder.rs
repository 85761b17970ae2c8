//! The reorder window of deterministic mode: chunks are taken in a fixed
//! order — per file set, the plan's file order, each file's chunks in
//! sequence — whatever reader delivered them when. A chunk that comes early
//! is held; the held chunks' bytes are bounded by the window: past it, an
//! early chunk's acknowledgement is withheld, so its reader stops reading
//! until the chunks before it came. Which set's next chunk comes next is the
//! caller's decision (the file-set mix); this part only knows each set's
//! next `(file, chunk)`.
//!
//! Generic over the chunk `T` and its acknowledgement `A`, so it is tested
//! without actors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A chunk's place in the deterministic order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct ChunkKey {
    /// The file set.
    pub set: usize,
    /// The file's position in its set's order for the pass.
    pub file: usize,
    /// The chunk's index within the file.
    pub chunk: u64,
}

struct Held<T, A> {
    item: T,
    bytes: usize,
    last: bool,
    /// Set while the acknowledgement is withheld (outside the window).
    ack: Option<A>,
}

/// The reorder window; see the [module docs](self).
pub(crate) struct ReorderWindow<T, A> {
    /// Bytes of early chunks held before their acknowledgements are withheld.
    window: usize,
    /// Per set: the next `(file, chunk)` to take.
    next: Vec<(usize, u64)>,
    held: BTreeMap<ChunkKey, Held<T, A>>,
    held_bytes: usize,
}

/// A held chunk, as [`ReorderWindow::state`] describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct HeldState<P> {
    /// Its place.
    pub key: ChunkKey,
    /// The file's last chunk.
    pub last: bool,
    /// Its bytes (counted against the window).
    pub bytes: usize,
    /// Its acknowledgement is withheld.
    pub withheld: bool,
    /// What the caller says of it (e.g. the records it holds).
    pub item: P,
}

/// The window's state as a plain value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ReorderState<P> {
    /// The window in bytes.
    pub window: usize,
    /// Per set: the next `(file, chunk)` to take.
    pub next: Vec<(usize, u64)>,
    /// The held chunks, in order.
    pub held: Vec<HeldState<P>>,
    /// Their bytes.
    pub held_bytes: usize,
}

impl<T, A> ReorderWindow<T, A> {
    /// A window of `window` bytes for `sets` file sets, at the start of a pass.
    pub fn new(sets: usize, window: usize) -> Self {
        ReorderWindow {
            window,
            next: vec![(0, 0); sets.max(1)],
            held: BTreeMap::new(),
            held_bytes: 0,
        }
    }

    /// Per set: the next `(file, chunk)` to take.
    pub fn next(&self) -> &[(usize, u64)] {
        &self.next
    }

    /// Set `set`'s next `(file, chunk)` to take (a resumed draw).
    pub fn set_next(&mut self, set: usize, next: (usize, u64)) {
        self.next[set] = next;
    }

    /// True if `key` is the next chunk of its set.
    pub fn is_next(&self, key: ChunkKey) -> bool {
        self.next.get(key.set) == Some(&(key.file, key.chunk))
    }

    /// The next chunk of `set` was taken (it came in order): move past it.
    pub fn advance(&mut self, set: usize, last: bool) {
        let next = &mut self.next[set];
        *next = if last {
            (next.0 + 1, 0)
        } else {
            (next.0, next.1 + 1)
        };
    }

    /// Hold a chunk that came early. Its acknowledgement is returned, to be
    /// sent now, while the held bytes stay within the window; past it, the
    /// acknowledgement is withheld until [`pop_next`](Self::pop_next) or
    /// [`release`](Self::release) give it back.
    pub fn hold(&mut self, key: ChunkKey, item: T, bytes: usize, last: bool, ack: A) -> Option<A> {
        let (ack, now) = if self.held_bytes + bytes > self.window {
            (Some(ack), None)
        } else {
            (None, Some(ack))
        };
        self.held_bytes += bytes;
        self.held.insert(
            key,
            Held {
                item,
                bytes,
                last,
                ack,
            },
        );
        now
    }

    /// The held chunk that is next for `set`, if it is here: taken out and
    /// moved past, with its acknowledgement if that was withheld (send it).
    pub fn pop_next(&mut self, set: usize) -> Option<(T, Option<A>)> {
        let (file, chunk) = *self.next.get(set)?;
        let h = self.held.remove(&ChunkKey { set, file, chunk })?;
        self.held_bytes -= h.bytes;
        self.advance(set, h.last);
        Some((h.item, h.ack))
    }

    /// The withheld acknowledgements that fit in the window now, in order
    /// (up to the first that does not fit).
    pub fn release(&mut self) -> Vec<A> {
        let mut budget = self.window.saturating_sub(self.held_bytes);
        let mut out = Vec::new();
        for h in self.held.values_mut() {
            if h.ack.is_some() {
                if h.bytes > budget {
                    break;
                }
                budget -= h.bytes;
                out.extend(h.ack.take());
            }
        }
        out
    }

    /// The end of a pass: every chunk still held, in order, with its
    /// withheld acknowledgement (chunks out of order at the end of a pass
    /// are taken as they are; the caller says so); the next pass starts at
    /// every set's first file.
    pub fn end_pass(&mut self) -> Vec<(ChunkKey, T, Option<A>)> {
        self.held_bytes = 0;
        self.next.iter_mut().for_each(|n| *n = (0, 0));
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(k, h)| (k, h.item, h.ack))
            .collect()
    }

    /// Drop every held chunk and its acknowledgement (shutdown).
    pub fn clear(&mut self) {
        self.held.clear();
        self.held_bytes = 0;
    }

    /// The state, each held chunk described by `describe`.
    pub fn state<P>(&self, describe: impl Fn(&T) -> P) -> ReorderState<P> {
        ReorderState {
            window: self.window,
            next: self.next.clone(),
            held: (self.held.iter())
                .map(|(k, h)| HeldState {
                    key: *k,
                    last: h.last,
                    bytes: h.bytes,
                    withheld: h.ack.is_some(),
                    item: describe(&h.item),
                })
                .collect(),
            held_bytes: self.held_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(set: usize, file: usize, chunk: u64) -> ChunkKey {
        ChunkKey { set, file, chunk }
    }

    /// Chunks named by their key, acknowledgements by the same name.
    type Window = ReorderWindow<&'static str, &'static str>;

    #[test]
    fn chunks_are_taken_in_order_whatever_order_they_come_in() {
        let mut w = Window::new(1, 1000);
        // File 0 has chunks 0, 1 (last); file 1 has chunk 0 (last).
        assert_eq!(w.hold(key(0, 1, 0), "f1c0", 10, true, "a"), Some("a"));
        assert_eq!(w.hold(key(0, 0, 1), "f0c1", 10, true, "b"), Some("b"));
        assert!(w.pop_next(0).is_none(), "file 0 chunk 0 has not come");
        assert!(w.is_next(key(0, 0, 0)));
        w.advance(0, false); // f0c0 came in order and was taken
        assert_eq!(w.pop_next(0), Some(("f0c1", None)));
        assert_eq!(w.pop_next(0), Some(("f1c0", None)));
        assert!(w.pop_next(0).is_none());
        assert_eq!((w.state(|_| ()).held.len(), w.next()), (0, &[(2, 0)][..]));
    }

    #[test]
    fn acknowledgements_are_withheld_past_the_window_and_released_as_it_empties() {
        let mut w = Window::new(1, 25);
        assert_eq!(w.hold(key(0, 0, 1), "c1", 10, false, "a1"), Some("a1"));
        assert_eq!(w.hold(key(0, 0, 2), "c2", 10, false, "a2"), Some("a2"));
        // 30 bytes held would be past the 25-byte window: withheld.
        assert_eq!(w.hold(key(0, 0, 3), "c3", 10, false, "a3"), None);
        assert_eq!(w.hold(key(0, 0, 4), "c4", 10, true, "a4"), None);
        assert!(w.release().is_empty(), "nothing left the window");
        let s = w.state(|c| c.to_string());
        assert_eq!(s.held_bytes, 40);
        assert_eq!(
            s.held.iter().map(|h| h.withheld).collect::<Vec<_>>(),
            [false, false, true, true]
        );
        w.advance(0, false); // chunk 0 came in order
        assert_eq!(w.pop_next(0), Some(("c1", None)));
        // 30 bytes held, past the window: nothing released.
        assert!(w.release().is_empty());
        assert_eq!(w.pop_next(0), Some(("c2", None)));
        // 20 bytes held, 5 free: c3 (10) does not fit yet.
        assert!(w.release().is_empty());
        // c3 is next: it comes out with its withheld acknowledgement.
        assert_eq!(w.pop_next(0), Some(("c3", Some("a3"))));
        // 10 held, 15 free: c4's acknowledgement is released.
        assert_eq!(w.release(), ["a4"]);
        assert_eq!(w.pop_next(0), Some(("c4", None)));
    }

    #[test]
    fn sets_keep_their_own_order() {
        let mut w = Window::new(2, 100);
        w.hold(key(1, 0, 0), "s1", 1, true, "a");
        w.hold(key(0, 0, 0), "s0", 1, true, "b");
        assert_eq!(w.pop_next(1), Some(("s1", None)));
        assert_eq!(w.pop_next(0), Some(("s0", None)));
        assert_eq!(w.next(), [(1, 0), (1, 0)]);
        assert!(w.pop_next(5).is_none(), "no such set");
    }

    #[test]
    fn the_end_of_a_pass_gives_back_everything_held_in_order_and_restarts() {
        let mut w = Window::new(1, 10);
        w.hold(key(0, 2, 0), "late", 8, true, "a");
        w.hold(key(0, 1, 0), "early", 8, true, "b");
        let all = w.end_pass();
        assert_eq!(
            all,
            vec![
                (key(0, 1, 0), "early", Some("b")),
                (key(0, 2, 0), "late", None)
            ]
        );
        assert_eq!((w.state(|_| ()).held.len(), w.next()), (0, &[(0, 0)][..]));
        assert!(w.is_next(key(0, 0, 0)));
    }

    #[test]
    fn the_state_is_a_plain_value() {
        let mut w = Window::new(2, 15);
        w.advance(1, true);
        w.hold(key(0, 0, 1), "x", 10, false, "a");
        w.hold(key(1, 1, 2), "y", 10, true, "b");
        let s = w.state(|c| c.to_string());
        assert_eq!(s.next, [(0, 0), (1, 0)]);
        assert_eq!(s.held_bytes, 20);
        assert_eq!(
            s.held,
            [
                HeldState {
                    key: key(0, 0, 1),
                    last: false,
                    bytes: 10,
                    withheld: false,
                    item: "x".to_string()
                },
                HeldState {
                    key: key(1, 1, 2),
                    last: true,
                    bytes: 10,
                    withheld: true,
                    item: "y".to_string()
                }
            ]
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            serde_json::from_str::<ReorderState<String>>(&json).unwrap(),
            s
        );
    }
}
