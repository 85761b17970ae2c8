//! The elastic merge and split of what remains of a pass: the remainders
//! of every old rank ([`Remainder`]: single records and unread file
//! suffixes) dealt among a new number of ranks ([`split_remainder`]),
//! every remaining record to exactly one.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{CheckpointError, CheckpointResult, RefList, SourceTable};
use crate::{Origin, SourceId};

/// Records of one source from `first` on in steps of `step` (below `end`
/// when known): a rank's share of an unread file suffix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progression {
    /// The source (index into the checkpoint's source table).
    pub source: u32,
    /// The first record.
    pub first: u64,
    /// The step between records (≥ 1).
    pub step: u64,
    /// The end (exclusive), when known.
    pub end: Option<u64>,
}

impl Progression {
    /// The `k`-th member.
    fn nth(&self, k: u64) -> u64 {
        self.first + k * self.step
    }

    /// The members of `self` with position ≡ `part` (mod `parts`).
    fn split(&self, part: u64, parts: u64) -> Progression {
        Progression {
            source: self.source,
            first: self.nth(part),
            step: self.step * parts,
            end: self.end,
        }
    }

    /// The members, when the end is known or `len` bounds the source.
    pub fn members(&self, len: u64) -> impl Iterator<Item = u64> {
        let end = self.end.unwrap_or(len).min(len);
        (self.first..end).step_by(self.step as usize)
    }
}

/// What remains of a pass on one rank (or of a merged job): single records
/// (pool, partial batch, pending batches), in a fixed order, and unread
/// file suffixes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remainder {
    /// Single records.
    pub records: RefList,
    /// Unread suffixes.
    pub suffixes: Vec<Progression>,
}

/// Merge the remainders of all old ranks (their source tables unified into
/// `table`) and split them among `world` new ranks: the single records are
/// permuted by `seed` and dealt round-robin (counts differ by at most one),
/// each suffix is split by stride. Pure and deterministic for (remainders,
/// world, seed); every remaining record goes to exactly one new rank.
pub fn split_remainder(
    remainders: &[(Vec<String>, Remainder)],
    world: u32,
    seed: u64,
) -> CheckpointResult<(Vec<String>, Vec<Remainder>)> {
    if world == 0 {
        return Err(CheckpointError::Merge("the new world size is 0".into()));
    }
    let mut table = SourceTable::default();
    let mut singles: Vec<Origin> = Vec::new();
    let mut suffixes: Vec<(SourceId, Progression)> = Vec::new();
    for (names, rem) in remainders {
        singles.extend(rem.records.decode(names)?);
        for p in &rem.suffixes {
            let name = names
                .get(p.source as usize)
                .ok_or(CheckpointError::BadSourceIndex {
                    index: p.source,
                    sources: names.len(),
                })?;
            if p.step == 0 {
                return Err(CheckpointError::Merge(format!(
                    "{name}: suffix with step 0"
                )));
            }
            suffixes.push((SourceId::intern(name), p.clone()));
        }
    }
    let mut seen = BTreeSet::new();
    for o in &singles {
        if !seen.insert((o.source.name(), o.record)) {
            return Err(CheckpointError::Merge(format!(
                "{}: record {} is held by two checkpoints",
                o.source, o.record
            )));
        }
    }
    // A canonical order first, so the result does not depend on the order
    // the checkpoints were given in.
    singles.sort_by_key(|o| (o.source.name(), o.record));
    suffixes.sort_by_key(|(source, p)| (source.name(), p.first, p.step));
    singles.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut shares = vec![Vec::new(); world as usize];
    for (i, o) in singles.into_iter().enumerate() {
        shares[i % world as usize].push(o);
    }
    let mut out: Vec<Remainder> = shares
        .iter()
        .map(|s| Remainder {
            records: RefList::encode(s, &mut table),
            suffixes: Vec::new(),
        })
        .collect();
    for (source, p) in &suffixes {
        let index = table.index(*source);
        for (rank, rem) in out.iter_mut().enumerate() {
            let mut part = p.split(rank as u64, world as u64);
            part.source = index;
            rem.suffixes.push(part);
        }
    }
    Ok((table.into_names(), out))
}
