//! A reader that panics mid-file is replaced and its file resumes where it
//! stopped — also under record sharding, where each rank keeps every
//! `world_size`-th record of every file: the ranks of a job together get
//! every record of each pass exactly once, none twice within a rank or
//! across ranks, with panics in several files at records of either rank,
//! for several world sizes, reader counts and seeds.

mod common;

use std::collections::BTreeMap;

use common::{all_ids, ids_per_pass, synth_loader, Fault, SynthFormat};
use feedline::plan::ShardBy;

#[test]
fn restarted_readers_under_record_sharding_lose_and_repeat_nothing_across_ranks() {
    let counts = [37, 52, 29];
    for world in [2usize, 3] {
        for (readers, seed) in [(1, 0u64), (2, 3), (3, 8)] {
            let mut union: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
            for rank in 0..world {
                let synth = SynthFormat::with_files(&counts)
                    // Records of rank 0 and of the others, first reading
                    // and a retried one (times: 2 panics twice).
                    .fault("f0", 10, Fault::Panic { times: 1 })
                    .fault("f1", 21, Fault::Panic { times: 2 })
                    .fault("f2", 5, Fault::Panic { times: 1 })
                    .build();
                let loader = synth_loader(synth)
                    .shard(rank, world)
                    .shard_by(ShardBy::Record)
                    .shard_from_env(false)
                    .readers(readers)
                    .passes(2)
                    .seed(seed)
                    .batch(5)
                    .shuffle(12)
                    .chunk_records(4)
                    .build()
                    .unwrap();
                let (per_pass, err) = ids_per_pass(loader);
                let what = format!("world {world} rank {rank} readers {readers} seed {seed}");
                assert!(err.is_none(), "{what}: {err:?}");
                for (pass, ids) in per_pass {
                    let mut sorted = ids.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    assert_eq!(
                        sorted.len(),
                        ids.len(),
                        "{what}: an id twice in pass {pass}"
                    );
                    union.entry(pass).or_default().extend(ids);
                }
            }
            assert_eq!(union.len(), 2);
            // Together exactly the records of the pass: none lost, none on
            // two ranks.
            for (pass, mut ids) in union {
                ids.sort_unstable();
                assert_eq!(
                    ids,
                    all_ids(&counts, &[]),
                    "world {world} readers {readers} seed {seed} pass {pass}"
                );
            }
        }
    }
}
