//! Provenance: where an instance came from. [`SourceId`] (an interned
//! file path or generator name), [`Origin`] (a source and a record index)
//! and [`Location`] (an origin plus the byte offset of the record's frame,
//! as errors report it), and [`Segment`] (a piece of a document in a
//! packed row: its origin and which of its tokens).
//!
//! This module depends on nothing else in the crate, so that the error type
//! and the data model can both use it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

/// An interned source name (a file path or a generator's name): a small
/// `Copy` id, so provenance costs 16 bytes per instance.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(u32);

struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

fn interner() -> &'static RwLock<Interner> {
    static I: OnceLock<RwLock<Interner>> = OnceLock::new();
    I.get_or_init(|| {
        RwLock::new(Interner {
            names: Vec::new(),
            ids: HashMap::new(),
        })
    })
}

impl SourceId {
    /// The id of `name`, interning it on first use.
    pub fn intern(name: &str) -> SourceId {
        if let Some(&id) = interner().read().expect("interner lock").ids.get(name) {
            return SourceId(id);
        }
        let mut w = interner().write().expect("interner lock");
        if let Some(&id) = w.ids.get(name) {
            return SourceId(id);
        }
        let id = w.names.len() as u32;
        let name: Arc<str> = Arc::from(name);
        w.names.push(name.clone());
        w.ids.insert(name, id);
        SourceId(id)
    }

    /// The source's name.
    pub fn name(self) -> Arc<str> {
        interner().read().expect("interner lock").names[self.0 as usize].clone()
    }
}

impl fmt::Debug for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.name())
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Provenance of an instance: its source and 0-based record index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    /// File path or generator name.
    pub source: SourceId,
    /// 0-based index of the record in its source.
    pub record: u64,
}

impl Origin {
    /// The origin of record `record` of `source`.
    pub fn new(source: SourceId, record: u64) -> Self {
        Origin { source, record }
    }

    /// As a [`Location`] without byte offset.
    pub fn location(self) -> Location {
        Location::new(self.source, self.record, None)
    }
}

/// Where a record came from: its source (file path or generator name), its
/// 0-based index in that source, and — for byte-oriented formats — the byte
/// offset of its frame in the (decompressed) stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file or source the record belongs to.
    pub source: SourceId,
    /// 0-based record index within the source.
    pub record: u64,
    /// Byte offset of the record's frame in the (decompressed) stream, when the format has one.
    pub offset: Option<u64>,
}

impl Location {
    /// A location with an offset.
    pub fn new(source: SourceId, record: u64, offset: Option<u64>) -> Self {
        Location {
            source,
            record,
            offset,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: record {}", self.source.name(), self.record)?;
        if let Some(offset) = self.offset {
            write!(f, ", offset {offset}")?;
        }
        Ok(())
    }
}

/// A piece of a document in a packed row ([`crate::pack`]): the document, the piece's first
/// token in it and its length, and the document's length as packed (after
/// truncation) — all its tokens are delivered once pieces covering
/// `[0, doc_tokens)` are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The row of its batch.
    pub row: u32,
    /// The document.
    pub origin: Origin,
    /// Its first token's index in the document.
    pub start: u64,
    /// Its tokens.
    pub len: u32,
    /// The document's tokens as packed.
    pub doc_tokens: u64,
}
