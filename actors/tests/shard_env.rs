//! The Loader reads `RANK`/`WORLD_SIZE` when `.shard()` is not called, with
//! `.shard_from_env(false)` to opt out; invalid values are clear errors.
//! One test in its own binary (its own process): it sets the environment.

mod common;

use common::{all_ids, ids, synth_loader, SynthFormat};
use feedline_actors::{LoaderBuilder, PipelineError, ShardBy};

const COUNTS: [u64; 4] = [10, 20, 30, 40];

fn builder() -> LoaderBuilder {
    synth_loader(SynthFormat::with_files(&COUNTS).build())
        .shard_by(ShardBy::File)
        .batch(7)
}

fn ids_of(b: LoaderBuilder) -> Vec<i64> {
    let mut out: Vec<i64> = b
        .build()
        .unwrap()
        .into_iter()
        .flat_map(|d| ids(&d.unwrap()))
        .collect();
    out.sort();
    out
}

fn set(rank: Option<&str>, world: Option<&str>) {
    for (k, v) in [("RANK", rank), ("WORLD_SIZE", world)] {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
}

#[test]
fn rank_and_world_size_from_the_environment() {
    let all = all_ids(&COUNTS, &[]);
    set(None, None);
    assert_eq!(ids_of(builder()), all);
    // Two ranks built the obvious way split the data: disjoint, all of it.
    let mut both = Vec::new();
    for rank in ["0", "1"] {
        set(Some(rank), Some("2"));
        let mine = ids_of(builder());
        assert!(!mine.is_empty() && mine.len() < all.len(), "rank {rank}");
        both.extend(mine);
    }
    both.sort();
    assert_eq!(both, all);
    // The loader's settings say which shard is in force.
    set(Some("1"), Some("2"));
    let l = builder().build().unwrap();
    assert_eq!(
        (
            l.config().inputs.shard.rank,
            l.config().inputs.shard.world_size
        ),
        (1, 2)
    );
    drop(l);
    // .shard() wins; .shard_from_env(false) reads all.
    assert_eq!(ids_of(builder().shard(0, 1)), all);
    assert_eq!(ids_of(builder().shard_from_env(false)), all);
    // Invalid values name the variable.
    for (rank, world, says) in [
        (Some("2"), Some("2"), "RANK=2"),
        (Some("x"), Some("2"), "RANK=`x`"),
        (Some("0"), Some("0"), "WORLD_SIZE=0"),
        (None, Some("-1"), "WORLD_SIZE=`-1`"),
    ] {
        set(rank, world);
        match builder().build() {
            Err(PipelineError::Config(m)) => {
                assert!(m.contains(says), "{m:?} does not say {says:?}");
                assert!(m.contains("environment"), "{m}");
            }
            other => panic!("{rank:?}/{world:?}: expected a Config error, got {other:?}"),
        }
        // Opting out ignores even invalid values.
        assert_eq!(ids_of(builder().shard_from_env(false)), all);
    }
    set(None, None);
}
