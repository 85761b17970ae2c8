//! The pass plan of a service that cuts each pass into groups, each read by
//! ordinary Loaders elsewhere (`feedline.ray`'s `Service`, its Python side
//! in `python/pysrc/feedline/ray.py`): [`group_plan`] gives every rank an
//! equal share of the pass's records, cut into groups of parts, each part
//! one Loader over some files (as rank `shard` of `shards`) of whose
//! records the group keeps a range per file. The files are taken in the
//! Loader's own file order of `(seed, pass)` ([`PassPlan::order`]), so a
//! service and a Loader with the same seed shuffle the files alike.

use feedline::plan::{pass_rng, PassPlan};
use rand::RngCore;

use crate::error::PipelineError;

/// RNG domain of the parts' seeds (the other domains: `feedline::plan`).
const DOMAIN_GROUP_PART_SEED: u64 = 0x5241_5950; // "RAYP"

/// One part of a group: one Loader over the files `ids` (indices into
/// the service's files), as rank `shard` of `shards`, of
/// whose records the group keeps, per file, those in `ranges` (`None`: all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPart {
    /// The files, indices into the service's files, in reading order.
    pub ids: Vec<usize>,
    /// The Loader's rank.
    pub shard: u64,
    /// The Loader's world size.
    pub shards: u64,
    /// Per file, the records `[lo, hi)` kept, or `None` for all.
    pub ranges: Vec<Option<(u64, u64)>>,
    /// The Loader's seed.
    pub seed: u64,
}

/// The plan of one pass: `groups[g]` is group g's parts, `records[g]` its
/// records; `by_record` when there are more groups than files (every
/// group reads every file and keeps every so many records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlan {
    /// Per group, its parts.
    pub groups: Vec<Vec<GroupPart>>,
    /// Per group, its records.
    pub records: Vec<u64>,
    /// More groups than files: the files are shared by record.
    pub by_record: bool,
}

/// The seed of part `part` of group `group` in pass `pass` (63 bits: a
/// Python int the Loader takes).
fn part_seed(seed: u64, pass: u64, group: usize, part: usize) -> u64 {
    let mut rng = pass_rng(seed, DOMAIN_GROUP_PART_SEED, pass);
    rng.set_stream(((group as u64) << 32) ^ part as u64);
    rng.next_u64() >> 1
}

/// A file of a rank's share: (file id, the range kept or `None` for all,
/// the records kept).
type Piece = (usize, Option<(u64, u64)>, u64);

/// The groups (of `groups`) of rank `rank` of `world`: g with g % world == rank.
fn rank_groups(groups: usize, rank: usize, world: usize) -> impl Iterator<Item = usize> {
    (rank..groups).step_by(world)
}

/// Pass `pass`'s plan for `world` ranks in `groups` groups (group g is
/// rank g % world's) of files with `counts` records each.
///
/// The files are taken in the Loader's file order of `(seed, pass)`
/// (`PassPlan::order`; as given when `shuffle` is false), end to end, N
/// records in all. With at most as many groups as files, rank r's share
/// is the records `[N*r/world, N*(r+1)/world)` of them; its files (the
/// first and last maybe in part, each part read by both neighbours) are
/// cut into its groups, contiguous, of nearly equal numbers of files (the
/// first groups one more). With more groups than files, every group reads
/// every file (one part a file) and keeps the records at the places c (in
/// the same order) with `c % (world * groups of its rank) == g`: rank r
/// gets every c with `c % world == r`.
pub fn group_plan(
    counts: &[u64],
    seed: u64,
    pass: u64,
    groups: usize,
    world: usize,
    shuffle: bool,
) -> Result<GroupPlan, PipelineError> {
    let bad = |m: String| Err(PipelineError::config(m));
    if world == 0 {
        return bad("world_size must be at least 1".into());
    }
    if groups < world {
        return bad(format!(
            "world_size={world} ranks need at least as many groups, not groups={groups}"
        ));
    }
    let nf = counts.len();
    let order = PassPlan::new(vec![String::new(); nf])
        .seed(seed)
        .shuffle_files(shuffle)
        .order(pass);
    let n: Vec<u64> = order.iter().map(|&i| counts[i]).collect();
    let mut ends = Vec::with_capacity(nf);
    let mut total = 0u64;
    for &c in &n {
        total = total
            .checked_add(c)
            .ok_or_else(|| PipelineError::Config("the record counts overflow".into()))?;
        ends.push(total);
    }
    let starts: Vec<u64> = ends.iter().zip(&n).map(|(e, c)| e - c).collect();
    let mut specs: Vec<Vec<GroupPart>> = vec![Vec::new(); groups];
    let mut records = vec![0u64; groups];
    if groups <= nf {
        let w = world as u128;
        for r in 0..world {
            let lo_r = (u128::from(total) * r as u128 / w) as u64;
            let hi_r = (u128::from(total) * (r as u128 + 1) / w) as u64;
            let mut pieces: Vec<Piece> = Vec::new();
            if hi_r > lo_r {
                let k0 = ends.partition_point(|&e| e <= lo_r);
                let k1 = starts.partition_point(|&s| s < hi_r);
                for k in k0..k1 {
                    let lo = lo_r.max(starts[k]) - starts[k];
                    let hi = hi_r.min(ends[k]) - starts[k];
                    if hi > lo {
                        let whole = lo == 0 && hi == n[k];
                        pieces.push((order[k], (!whole).then_some((lo, hi)), hi - lo));
                    }
                }
            }
            // np.array_split: the first len % k groups one piece more
            let mine: Vec<usize> = rank_groups(groups, r, world).collect();
            let (each, extra) = (pieces.len() / mine.len(), pieces.len() % mine.len());
            let mut at = 0;
            for (j, &g) in mine.iter().enumerate() {
                let take = each + usize::from(j < extra);
                let part = &pieces[at..at + take];
                at += take;
                if !part.is_empty() {
                    specs[g] = vec![GroupPart {
                        ids: part.iter().map(|p| p.0).collect(),
                        shard: 0,
                        shards: 1,
                        ranges: part.iter().map(|p| p.1).collect(),
                        seed: part_seed(seed, pass, g, 0),
                    }];
                }
                records[g] = part.iter().map(|p| p.2).sum();
            }
        }
    } else {
        for (g, (spec, kept_g)) in specs.iter_mut().zip(&mut records).enumerate() {
            let stride = (world * rank_groups(groups, g % world, world).count()) as i128;
            let gi = g as i128;
            for k in 0..nf {
                let (s, m) = (i128::from(starts[k]), i128::from(n[k]));
                let kept = (s + m - 1 - gi).div_euclid(stride) - (s - 1 - gi).div_euclid(stride);
                if kept > 0 {
                    let seed = part_seed(seed, pass, g, spec.len());
                    spec.push(GroupPart {
                        ids: vec![order[k]],
                        shard: (gi - s).rem_euclid(stride) as u64,
                        shards: stride as u64,
                        ranges: vec![None],
                        seed,
                    });
                    *kept_g += kept as u64;
                }
            }
        }
    }
    Ok(GroupPlan {
        groups: specs,
        records,
        by_record: groups > nf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every (file, record) the plan's groups keep, with the rank that
    /// keeps it; the Loader of a part as rank `shard` of `shards` reads
    /// record i of each file when `(i + k) % shards == shard`, k the
    /// file's place among the part's files (`PassPlan::tasks` by record).
    fn kept(plan: &GroupPlan, counts: &[u64], world: usize) -> Vec<((usize, u64), usize)> {
        let mut out = Vec::new();
        for (g, parts) in plan.groups.iter().enumerate() {
            let mut n = 0;
            for p in parts {
                for (k, (&f, rg)) in p.ids.iter().zip(&p.ranges).enumerate() {
                    for i in 0..counts[f] {
                        let mine = p.shards == 1 || (i + k as u64) % p.shards == p.shard;
                        let inside = rg.is_none_or(|(lo, hi)| lo <= i && i < hi);
                        if mine && inside {
                            out.push(((f, i), g % world));
                            n += 1;
                        }
                    }
                }
            }
            assert_eq!(n, plan.records[g], "group {g}'s record count");
        }
        out
    }

    #[test]
    fn every_record_once_and_equal_shares() {
        let counts: Vec<u64> = (0..12).map(|f| 20 + 3 * f).collect();
        for (nf, world, groups) in [
            (12, 1, 12),
            (12, 2, 12),
            (12, 4, 8),
            (12, 3, 5),
            (3, 2, 4),
            (2, 4, 8),
            (5, 2, 7),
        ] {
            let c = &counts[..nf];
            let total_c: u64 = c.iter().sum();
            for pass in 0..3 {
                let plan = group_plan(c, 5, pass, groups, world, true).unwrap();
                assert_eq!(plan.by_record, groups > nf);
                let got = kept(&plan, c, world);
                let mut once: HashMap<(usize, u64), usize> = HashMap::new();
                for (rec, rank) in &got {
                    assert!(
                        once.insert(*rec, *rank).is_none(),
                        "{rec:?} twice ({nf}, {world}, {groups})"
                    );
                }
                assert_eq!(once.len() as u64, total_c);
                let mut share = vec![0u64; world];
                for r in once.values() {
                    share[*r] += 1;
                }
                let (lo, hi) = (share.iter().min().unwrap(), share.iter().max().unwrap());
                assert!(hi - lo <= 1, "shares {share:?}");
            }
        }
    }

    #[test]
    fn the_file_order_is_the_loaders_and_a_function_of_seed_and_pass() {
        let counts = vec![1u64; 9];
        let files: Vec<String> = (0..9).map(|i| i.to_string()).collect();
        for (seed, pass) in [(5, 0), (5, 1), (7, 0)] {
            let plan = group_plan(&counts, seed, pass, 9, 1, true).unwrap();
            let order: Vec<usize> = plan.groups.iter().map(|g| g[0].ids[0]).collect();
            assert_eq!(order, PassPlan::new(files.clone()).seed(seed).order(pass));
            assert_eq!(plan, group_plan(&counts, seed, pass, 9, 1, true).unwrap());
        }
        let plain = group_plan(&counts, 5, 0, 9, 1, false).unwrap();
        let order: Vec<usize> = plain.groups.iter().map(|g| g[0].ids[0]).collect();
        assert_eq!(order, (0..9).collect::<Vec<_>>());
        assert_ne!(
            group_plan(&counts, 5, 0, 9, 1, true).unwrap(),
            group_plan(&counts, 5, 1, 9, 1, true).unwrap()
        );
    }

    #[test]
    fn fewer_groups_than_ranks_is_refused() {
        let e = group_plan(&[3, 4], 0, 0, 1, 2, true).unwrap_err();
        assert!(
            e.to_string().contains("need at least as many groups"),
            "{e}"
        );
    }
}
