//! Snapshots of the deterministic draw: what a resumed run needs
//! to draw from batch `seq` of a pass on exactly what the uninterrupted run
//! drew, without drawing the pass again from its start. It owns where each
//! chunk in the pool came from ([`DrawTracker`]: file, chunk, first record),
//! the snapshot made of the pool's exact state ([`DrawTracker::capture`],
//! every [`SNAPSHOT_EVERY`] batches) and the pool made again from one
//! ([`restore`]: each pooled chunk read again as its reader read it, the
//! rows, slots, byte accounting and random stream as they were).
//!
//! Snapshots are taken only where the draw depends on nothing else
//! (deterministic mode, one file set, no record transform, no equalize
//! quota, no bad-record fraction judged per pass: the stage's settings say
//! so with a `snapshot_every` of 0 otherwise).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::checkpoint::{ChunkRef, DrawSnapshot};
use feedline::plan::PassPlan;
use feedline::shuffle::{PoolParts, ShuffleBuffer, ShuffleConfig};
use feedline::Chunk;

use crate::settings::ReaderSettings;

/// Where a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    /// The file's position in the pass's order.
    pub file: usize,
    /// The chunk's index in the file.
    pub chunk: u64,
    /// The record its reading started at.
    pub start: u64,
    /// The record after it.
    pub end: u64,
    /// The file's last chunk.
    pub last: bool,
}

/// A chunk taken from a reader, with its place.
#[derive(Clone, Debug)]
pub(crate) struct Taken {
    /// The instances.
    pub chunk: Arc<Chunk>,
    /// Where they came from.
    pub place: Place,
}

/// What the stage knows of its draw's inputs: the place of every chunk in
/// the pool, and where reading goes on after the chunks taken into it.
#[derive(Debug, Default)]
pub(crate) struct DrawTracker {
    /// By the chunk's address (the pool holds it, so it is unique).
    places: HashMap<usize, Place>,
    /// (file, chunk, first record) of the next chunk after those accepted.
    next: (usize, u64, Option<u64>),
}

/// The shuffle stage's draw as it stands before batch `seq` of `pass`:
/// what a snapshot of it is made of.
pub(crate) struct DrawState<'a> {
    /// The pass drawn.
    pub pass: u64,
    /// The number of the next batch (the snapshot is taken before it).
    pub seq: u64,
    /// The pool.
    pub buffer: &'a ShuffleBuffer,
    /// Chunks taken but not yet in the pool, in order.
    pub pending: &'a VecDeque<Taken>,
    /// The pass's records so far.
    pub pass_records: u64,
    /// The pass's rows into and out of the batcher.
    pub batcher_rows: [u64; 2],
}

fn key(chunk: &Arc<Chunk>) -> usize {
    Arc::as_ptr(chunk) as usize
}

impl DrawTracker {
    /// A chunk goes into the pool (or, empty, is passed over).
    pub fn accepted(&mut self, t: &Taken) {
        let p = t.place;
        self.next = if p.last {
            (p.file + 1, 0, None)
        } else {
            (p.file, p.chunk + 1, Some(p.end))
        };
        if !t.chunk.is_empty() {
            self.places.insert(key(&t.chunk), p);
        }
    }

    /// A new pass: reading starts at its first file.
    pub fn start_pass(&mut self) {
        self.places.clear();
        self.next = (0, 0, None);
    }

    /// The snapshot of the draw as it stands (`draw`): `None` when a
    /// pooled chunk's place is unknown.
    pub fn capture(&mut self, draw: DrawState<'_>) -> Option<DrawSnapshot> {
        let DrawState {
            pass,
            seq,
            buffer,
            pending,
            pass_records,
            batcher_rows,
        } = draw;
        let parts = buffer.parts();
        let mut chunks = Vec::with_capacity(parts.chunks.len());
        let mut live = HashMap::with_capacity(self.places.len());
        for slot in &parts.chunks {
            chunks.push(match slot {
                None => None,
                Some((c, bytes)) => {
                    let p = *self.places.get(&key(c))?;
                    live.insert(key(c), p);
                    Some(ChunkRef {
                        file: p.file as u64,
                        chunk: p.chunk,
                        start: p.start,
                        rows: c.len() as u64,
                        bytes: *bytes as u64,
                    })
                }
            });
        }
        // Chunks drawn to the end are gone: forget them.
        self.places = live;
        let (next_file, next_chunk, next_record) = match pending.front() {
            Some(t) => (t.place.file, t.place.chunk, Some(t.place.start)),
            None => self.next,
        };
        let c = parts.capacities;
        Some(DrawSnapshot {
            pass,
            seq,
            chunks,
            row_slots: parts.rows.iter().map(|r| r.0).collect(),
            row_records: (parts.rows.iter())
                .map(|&(slot, row)| {
                    let (c, _) = parts.chunks[slot as usize].as_ref()?;
                    Some(c.origins().get(row as usize)?.record)
                })
                .collect::<Option<_>>()?,
            free_slots: parts.free_slots,
            capacities: [c[0] as u64, c[1] as u64, c[2] as u64],
            word_pos: u64::try_from(parts.word_pos).ok()?,
            next_file: next_file as u64,
            next_chunk,
            next_record,
            pass_records,
            batcher_rows,
        })
    }
}

/// The pool of snapshot `s` made again — the records of its rows read
/// again (each file opened once, framed past the records between), each
/// pooled chunk made of its rows' records only, in the same slots, with the
/// same byte accounting and the random stream at the same position — and
/// the tracker that goes on from it. An error says what does not match (a
/// file shorter, a record of another index): the caller then draws the
/// pass from its start instead.
pub(crate) fn restore(
    reader: &ReaderSettings,
    plan: &PassPlan,
    shuffle: ShuffleConfig,
    s: &DrawSnapshot,
) -> Result<(ShuffleBuffer, DrawTracker), String> {
    let tasks = plan.tasks(s.pass);
    let mut tracker = DrawTracker {
        places: HashMap::new(),
        next: (s.next_file as usize, s.next_chunk, s.next_record),
    };
    if s.row_slots.len() != s.row_records.len() {
        return Err(format!(
            "the snapshot's pool has {} row slots but {} row records",
            s.row_slots.len(),
            s.row_records.len()
        ));
    }
    // Per slot, the records of its rows, ascending.
    let mut wanted: Vec<Vec<u64>> = vec![Vec::new(); s.chunks.len()];
    for (&slot, &record) in s.row_slots.iter().zip(&s.row_records) {
        let w = (wanted.get_mut(slot as usize)).ok_or_else(|| {
            format!(
                "a row of the snapshot's pool names slot {slot}, the pool has {} slots",
                s.chunks.len()
            )
        })?;
        w.push(record);
    }
    // Every record to read: (file, record, slot), each file read once in order.
    let mut reads: Vec<(u64, u64, usize)> = Vec::new();
    for (slot, w) in wanted.iter_mut().enumerate() {
        w.sort_unstable();
        w.dedup();
        if let Some(c) = &s.chunks[slot] {
            reads.extend(w.iter().map(|&r| (c.file, r, slot)));
        }
    }
    reads.sort_unstable();
    let mut chunks: Vec<Option<Chunk>> = (s.chunks.iter())
        .zip(&wanted)
        .map(|(c, w)| {
            c.as_ref()
                .map(|_| Chunk::with_budget(&reader.schema, w.len(), 0))
        })
        .collect();
    let mut open: Option<(u64, Box<dyn feedline::format::RecordReader>)> = None;
    for (file, record, slot) in reads {
        let task = (tasks.get(file as usize)).ok_or_else(|| {
            format!(
                "the snapshot names file #{file} of pass {}, the pass has {} files",
                s.pass,
                tasks.len()
            )
        })?;
        let reader = match &mut open {
            Some((f, r)) if *f == file && r.next_index() <= record => {
                r.skip_to(record).map_err(|e| e.to_string())?;
                r
            }
            _ => {
                let r = reader
                    .open_file(&task.file, record, s.pass, task.stride)
                    .map_err(|e| e.to_string())?;
                &mut open.insert((file, r)).1
            }
        };
        let chunk = chunks[slot].as_mut().expect("a slot with rows has a chunk");
        let n = (reader.read_chunk(chunk, 1, usize::MAX)).map_err(|e| e.to_string())?;
        let got = chunk.origins().last().map(|o| o.record);
        if n != 1 || got != Some(record) {
            return Err(format!(
                "{}: record {record} of the snapshot's pool read as {got:?}",
                task.file
            ));
        }
    }
    let mut places = HashMap::new();
    let chunks: Vec<Option<(Arc<Chunk>, usize)>> = (chunks.into_iter())
        .zip(&s.chunks)
        .map(|(chunk, c)| {
            let (chunk, c) = (Arc::new(chunk?), c.as_ref()?);
            let place = Place {
                file: c.file as usize,
                chunk: c.chunk,
                start: c.start,
                end: c.start,
                last: false,
            };
            places.insert(key(&chunk), place);
            Some((chunk, c.bytes as usize))
        })
        .collect();
    tracker.places = places;
    // Each row: its record's place in its slot's chunk.
    let rows = (s.row_slots.iter().zip(&s.row_records))
        .map(|(&slot, record)| {
            let i = wanted[slot as usize].binary_search(record).unwrap_or(0);
            (slot, i as u32)
        })
        .collect();
    let [a, b, c] = s.capacities;
    let parts = PoolParts {
        chunks,
        rows,
        free_slots: s.free_slots.clone(),
        capacities: [a as usize, b as usize, c as usize],
        word_pos: s.word_pos as u128,
    };
    let buffer = ShuffleBuffer::restore(shuffle, s.pass, parts)?;
    Ok((buffer, tracker))
}
