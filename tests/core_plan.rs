//! Pass plan: input expansion, shards, file order per pass, record strides,
//! equalized batch counts.

use std::fs;

use feedline::plan::{
    equalized_counts, expand_inputs, pass_rng, permutation, uniform_index, Equalize, PassPlan,
    RecordStride, Shard, ShardBy,
};
use feedline::Error;
use proptest::prelude::*;

fn s(x: &str) -> String {
    x.to_string()
}

fn touch(dir: &std::path::Path, names: &[&str]) {
    for n in names {
        let p = dir.join(n);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(p, b"").unwrap();
    }
}

#[test]
fn glob_is_sorted_and_keeps_the_format_prefix() {
    let dir = tempfile::tempdir().unwrap();
    touch(dir.path(), &["c.dat", "a.dat", "b.dat", "x.npy"]);
    fs::create_dir(dir.path().join("d.dat")).unwrap(); // a directory: skipped
    let d = dir.path().to_str().unwrap();
    let got = expand_inputs(&[format!("tfrecord:{d}/*.dat")]).unwrap();
    assert_eq!(
        got,
        vec![
            format!("tfrecord:{d}/a.dat"),
            format!("tfrecord:{d}/b.dat"),
            format!("tfrecord:{d}/c.dat")
        ]
    );
    let got = expand_inputs(&[format!("{d}/?.npy"), format!("{d}/a.dat")]).unwrap();
    assert_eq!(got, vec![format!("{d}/x.npy"), format!("{d}/a.dat")]);
}

#[test]
fn a_pattern_matching_nothing_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let err = expand_inputs(&[format!("{d}/*.tfrecord")]).unwrap_err();
    assert!(matches!(err, Error::Config(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("matches no file") && msg.contains("*.tfrecord"),
        "{msg}"
    );
}

#[test]
fn a_bad_pattern_and_no_input_are_errors() {
    let err = expand_inputs(&[s("data/[abc.tfrecord")]).unwrap_err();
    assert!(err.to_string().contains("bad glob pattern"), "{err}");
    let err = expand_inputs(&[]).unwrap_err();
    assert!(err.to_string().contains("no input"), "{err}");
    let err = expand_inputs(&[s("  ")]).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}

#[test]
fn a_plain_path_is_kept_as_given() {
    let got = expand_inputs(&[s("no/such/file.tfrecord"), s("npz:weird:name.bin")]).unwrap();
    assert_eq!(
        got,
        vec![s("no/such/file.tfrecord"), s("npz:weird:name.bin")]
    );
}

#[test]
fn list_files_with_comments_relative_paths_and_nesting() {
    let dir = tempfile::tempdir().unwrap();
    touch(
        dir.path(),
        &[
            "lists/data/a.jsonl",
            "lists/data/b.jsonl",
            "lists/data/c.csv",
            "lists/data/d.csv",
            "top.csv",
        ],
    );
    let top = dir.path().join("top.csv");
    fs::write(
        dir.path().join("lists/inner.list"),
        "# inner list\ndata/d.csv\n",
    )
    .unwrap();
    fs::write(
        dir.path().join("lists/train.list"),
        format!(
            "# training files\n\n  data/*.jsonl  \njsonl:data/c.csv\n{}\ninner.list\n",
            top.display()
        ),
    )
    .unwrap();
    let lists = dir.path().join("lists");
    let l = lists.to_str().unwrap();
    let expected = vec![
        format!("{l}/data/a.jsonl"),
        format!("{l}/data/b.jsonl"),
        format!("jsonl:{l}/data/c.csv"),
        top.display().to_string(),
        format!("{l}/data/d.csv"),
    ];
    let list = lists.join("train.list");
    assert_eq!(
        expand_inputs(&[format!("@{}", list.display())]).unwrap(),
        expected
    );
    assert_eq!(
        expand_inputs(&[list.display().to_string()]).unwrap(),
        expected
    );
}

#[test]
fn the_same_file_named_twice_is_an_error_naming_it_and_both_inputs() {
    let dir = tempfile::tempdir().unwrap();
    touch(dir.path(), &["a.tfrecord", "b.tfrecord", "sub/c.tfrecord"]);
    let d = dir.path().to_str().unwrap();
    let a = format!("{d}/a.tfrecord");
    std::os::unix::fs::symlink(&a, dir.path().join("link.tfr")).unwrap();
    fs::write(dir.path().join("t.list"), "sub/c.tfrecord\na.tfrecord\n").unwrap();
    let canonical = fs::canonicalize(&a).unwrap().display().to_string();
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        // A glob and a path.
        (
            vec![format!("{d}/*.tfrecord"), a.clone()],
            "*.tfrecord`",
            "a.tfrecord`",
        ),
        // The same path with and without a format prefix.
        (
            vec![a.clone(), format!("tfrecord:{a}")],
            "a.tfrecord`",
            "`tfrecord:",
        ),
        // Another relative spelling.
        (
            vec![a.clone(), format!("{d}/sub/../a.tfrecord")],
            "a.tfrecord`",
            "sub/../a.tfrecord`",
        ),
        // Through a symbolic link.
        (
            vec![format!("{d}/link.tfr"), a.clone()],
            "link.tfr`",
            "a.tfrecord`",
        ),
        // A list file's line and an argument.
        (
            vec![format!("@{d}/t.list"), a.clone()],
            "t.list line 2",
            "a.tfrecord`",
        ),
    ];
    for (inputs, first, second) in cases {
        let err = expand_inputs(&inputs).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&canonical) && msg.contains("given twice"),
            "{inputs:?}: {msg}"
        );
        let (i, j) = (msg.find(first), msg.rfind(second));
        assert!(
            i.is_some() && j.is_some() && i < j,
            "{inputs:?}: `{first}` then `{second}` in {msg}"
        );
    }
    // Different files, and specs that are not files, are fine.
    let got = expand_inputs(&[
        a.clone(),
        format!("{d}/b.tfrecord"),
        s("gen:one"),
        s("gen:two"),
    ])
    .unwrap();
    assert_eq!(got.len(), 4);
    assert!(expand_inputs(&[s("gen:one"), s("gen:one")]).is_err());
}

/// A hard link is another name of the same file (issue 28 item 8): read
/// through both names, each pass would deliver its records twice. Refused
/// by (device, inode), naming both names and both inputs. Mutation caught:
/// dropping the (device, inode) comparison in `expand_inputs` (only the
/// canonical paths compared) lets `[hard, a]` through.
#[test]
fn a_hard_link_to_an_input_is_the_same_file_given_twice() {
    let dir = tempfile::tempdir().unwrap();
    touch(dir.path(), &["a.tfrecord", "b.tfrecord"]);
    let d = dir.path().to_str().unwrap();
    let a = format!("{d}/a.tfrecord");
    let hard = format!("{d}/hard.tfr");
    fs::hard_link(&a, &hard).unwrap();
    let canonical = |p: &str| fs::canonicalize(p).unwrap().display().to_string();
    for (inputs, first, second) in [
        (vec![hard.clone(), a.clone()], &hard, &a),
        (vec![format!("{d}/*.tfrecord"), hard.clone()], &a, &hard),
        (vec![a.clone(), format!("tfrecord:{hard}")], &a, &hard),
    ] {
        let err = expand_inputs(&inputs).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&canonical(first))
                && msg.contains(&canonical(second))
                && msg.contains("hard link")
                && msg.contains("given twice"),
            "{inputs:?}: {msg}"
        );
    }
    // Two different files stay fine.
    assert_eq!(
        expand_inputs(&[a.clone(), format!("{d}/b.tfrecord")])
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn list_file_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("empty.list"), "# nothing\n\n").unwrap();
    let err = expand_inputs(&[format!("@{}", d.join("empty.list").display())]).unwrap_err();
    assert!(err.to_string().contains("names no input"), "{err}");

    fs::write(d.join("bad.list"), "ok.tfrecord\n*.nothing\n").unwrap();
    let err = expand_inputs(&[format!("@{}", d.join("bad.list").display())]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("bad.list: line 2") && msg.contains("matches no file"),
        "{msg}"
    );

    fs::write(d.join("loop.list"), "loop.list\n").unwrap();
    let err = expand_inputs(&[format!("@{}", d.join("loop.list").display())]).unwrap_err();
    assert!(err.to_string().contains("nest more than"), "{err}");

    let err = expand_inputs(&[format!("@{}", d.join("missing.list").display())]).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.list"), "{err}");
}

#[test]
fn shard_from_vars_and_env() {
    assert_eq!(Shard::from_vars(None, None).unwrap(), Shard::single());
    assert_eq!(
        Shard::from_vars(Some("3"), Some("4")).unwrap(),
        Shard {
            rank: 3,
            world_size: 4
        }
    );
    for (r, w, what) in [
        (Some("x"), None, "RANK=`x`"),
        (None, Some("-1"), "WORLD_SIZE=`-1`"),
        (Some("4"), Some("4"), "out of range"),
        (Some("1"), None, "out of range"),
        (None, Some("0"), "WORLD_SIZE=0"),
    ] {
        let err = Shard::from_vars(r, w).unwrap_err();
        assert!(matches!(err, Error::Config(_)));
        assert!(err.to_string().contains(what), "{err} should say {what}");
    }
    assert!(Shard::new(2, 2).is_err());
    assert!(Shard::new(0, 0).is_err());
    // from_env reads RANK and WORLD_SIZE (not set here: setting variables
    // while other test threads read the environment is not safe).
    let rank = std::env::var("RANK").ok();
    let world = std::env::var("WORLD_SIZE").ok();
    assert_eq!(
        Shard::from_env().ok(),
        Shard::from_vars(rank.as_deref(), world.as_deref()).ok()
    );
}

/// `Shard::from_env` with real variables, in child processes of this test
/// binary (setting variables in a threaded test process is not safe).
#[test]
fn shard_from_env_in_child_processes() {
    if let Ok(expect) = std::env::var("FEEDLINE_TEST_SHARD_EXPECT") {
        let got = match Shard::from_env() {
            Ok(s) => format!("{}/{}", s.rank, s.world_size),
            Err(e) => e.to_string(),
        };
        assert!(got.contains(&expect), "{got} should contain {expect}");
        return;
    }
    for (rank, world, expect) in [
        ("1", "2", "1/2"),
        ("", "", "0/1"),
        ("2", "2", "RANK=2 is out of range for WORLD_SIZE=2"),
        ("a", "2", "RANK=`a`"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "shard_from_env_in_child_processes",
                "--test-threads=1",
            ])
            .env("FEEDLINE_TEST_SHARD_EXPECT", expect)
            .env("RANK", rank)
            .env("WORLD_SIZE", world)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "RANK={rank} WORLD_SIZE={world}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn files(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("part-{i:03}.tfrecord")).collect()
}

#[test]
fn same_seed_same_order_other_seed_or_pass_other_order() {
    let plan = PassPlan::new(files(20)).seed(5);
    assert_eq!(plan.tasks(0), plan.clone().tasks(0));
    assert_ne!(plan.order(0), plan.order(1));
    assert_ne!(plan.order(0), plan.clone().seed(6).order(0));
    let fixed = plan.clone().shuffle_files(false);
    assert_eq!(fixed.order(0), (0..20).collect::<Vec<_>>());
    assert_eq!(fixed.order(7), (0..20).collect::<Vec<_>>());
    // seq is the position in the rank's list, file the spec as given.
    for (i, t) in plan.tasks(3).iter().enumerate() {
        assert_eq!(t.seq, i);
        assert_eq!(t.pass, 3);
        assert_eq!(t.file, plan.files()[t.file_index]);
        assert_eq!(t.start_record, 0);
        assert_eq!(t.stride, RecordStride::ALL);
    }
}

/// The order is part of the contract (reproducible runs across machines and
/// versions): pin it.
#[test]
fn file_order_is_pinned() {
    let plan = PassPlan::new(files(10)).seed(42);
    assert_eq!(plan.order(0), vec![8, 2, 7, 0, 4, 6, 9, 3, 1, 5]);
    assert_eq!(plan.order(1), vec![1, 7, 0, 2, 3, 9, 5, 6, 4, 8]);
}

#[test]
fn auto_shards_by_record_when_files_are_fewer_than_ranks() {
    let shard = Shard::new(1, 4).unwrap();
    let plan = PassPlan::new(files(3)).shard(shard);
    assert_eq!(plan.effective_shard_by(), ShardBy::Record);
    let tasks = plan.tasks(0);
    assert_eq!(tasks.len(), 3);
    assert!(tasks.iter().all(|t| t.stride.step == 4));
    let plan = PassPlan::new(files(4)).shard(shard);
    assert_eq!(plan.effective_shard_by(), ShardBy::File);
    assert_eq!(plan.tasks(0).len(), 1);
    let forced = PassPlan::new(files(8))
        .shard(shard)
        .shard_by(ShardBy::Record);
    assert_eq!(forced.effective_shard_by(), ShardBy::Record);
    let single = PassPlan::new(files(2)).shard_by(ShardBy::Record);
    assert!(single.tasks(0).iter().all(|t| t.stride.is_all()));
}

#[test]
fn uniform_index_and_permutation() {
    let mut rng = pass_rng(1, 99, 0);
    let mut counts = [0u32; 6];
    for _ in 0..60_000 {
        counts[uniform_index(&mut rng, 6)] += 1;
    }
    // Each near 10,000 (sd ~91): a wide bound, deterministic seed.
    assert!(
        counts.iter().all(|&c| (9_500..10_500).contains(&c)),
        "{counts:?}"
    );
    assert_eq!(uniform_index(&mut rng, 0), 0);
    assert_eq!(uniform_index(&mut rng, 1), 0);
    let mut p = permutation(&mut rng, 100);
    p.sort_unstable();
    assert_eq!(p, (0..100).collect::<Vec<_>>());
}

proptest! {
    #[test]
    fn shards_of_all_ranks_partition_the_files(
        n in 0usize..40, world in 1usize..9, pass in 0u64..4, seed in any::<u64>(),
        by in prop_oneof![Just(ShardBy::Auto), Just(ShardBy::File), Just(ShardBy::Record)],
    ) {
        let plan = PassPlan::new(files(n)).seed(seed).shard_by(by)
            .shard(Shard::new(0, world).unwrap());
        // For each file, the set of (rank, record) keeping each record 0..30.
        let mut owner: Vec<Vec<Option<usize>>> = vec![vec![None; 30]; n];
        for rank in 0..world {
            for t in plan.for_rank(rank).unwrap().tasks(pass) {
                for rec in 0..30u64 {
                    if t.stride.keeps(rec) {
                        let slot = &mut owner[t.file_index][rec as usize];
                        prop_assert!(slot.is_none(), "record {rec} of file {} kept twice", t.file_index);
                        *slot = Some(rank);
                    }
                }
            }
        }
        for (f, recs) in owner.iter().enumerate() {
            for (r, o) in recs.iter().enumerate() {
                prop_assert!(o.is_some(), "record {r} of file {f} kept by no rank");
            }
        }
        // File sharding: the ranks' file counts differ by at most one.
        if plan.effective_shard_by() == ShardBy::File {
            let counts: Vec<usize> = (0..world)
                .map(|r| plan.for_rank(r).unwrap().tasks(pass).len()).collect();
            prop_assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn stride_counts_match_keeps(step in 1u64..9, off in 0u64..9, start in 0u64..60, total in 0u64..60) {
        let stride = RecordStride { offset: off % step, step };
        let brute = (0..total).filter(|&i| stride.keeps(i)).count() as u64;
        prop_assert_eq!(stride.count(total), brute);
        let brute_from = (start.min(total)..total).filter(|&i| stride.keeps(i)).count() as u64;
        prop_assert_eq!(stride.count_from(start, total), brute_from);
    }

    #[test]
    fn equalized_counts_hold_their_promises(
        recs in prop::collection::vec(0u64..200, 1..8), batch in 1usize..33, drop_last in any::<bool>(),
        how in prop_oneof![Just(Equalize::Off), Just(Equalize::Drop), Just(Equalize::Pad)],
    ) {
        let b = batch as u64;
        let got = match equalized_counts(&recs, batch, drop_last, how) {
            Ok(g) => g,
            Err(e) => {
                // Only padding a rank that has nothing is refused.
                prop_assert!(how == Equalize::Pad && recs.contains(&0), "{e}");
                return Ok(());
            }
        };
        prop_assert_eq!(got.len(), recs.len());
        for (c, &n) in got.iter().zip(&recs) {
            prop_assert_eq!(c.available, n);
            prop_assert_eq!(c.keep + c.drop, n);
            let delivered = c.keep + c.pad;
            prop_assert_eq!(c.batches, delivered.div_ceil(b));
            if drop_last {
                prop_assert_eq!(delivered % b, 0);
            }
            if delivered > 0 {
                prop_assert!(c.last_batch >= 1 && c.last_batch <= b);
            }
            if how != Equalize::Pad {
                prop_assert_eq!(c.pad, 0);
            }
            if how == Equalize::Off {
                prop_assert!(c.drop < b || !drop_last && c.drop == 0);
            }
        }
        if how != Equalize::Off {
            let first = (got[0].batches, got[0].last_batch, got[0].keep + got[0].pad);
            for c in &got {
                prop_assert_eq!((c.batches, c.last_batch, c.keep + c.pad), first);
            }
            let target = first.2;
            if how == Equalize::Drop {
                prop_assert!(target <= *recs.iter().min().unwrap());
            } else {
                prop_assert!(target <= *recs.iter().max().unwrap());
                let slack = if drop_last { b } else { 1 };
                prop_assert!(target + slack > *recs.iter().max().unwrap());
            }
        }
    }
}

#[test]
fn equalized_counts_examples_and_errors() {
    let c = equalized_counts(&[10, 7, 9], 4, false, Equalize::Drop).unwrap();
    assert!(c
        .iter()
        .all(|c| c.keep == 7 && c.batches == 2 && c.last_batch == 3));
    assert_eq!((c[0].drop, c[1].drop, c[2].drop), (3, 0, 2));
    let c = equalized_counts(&[10, 7], 4, true, Equalize::Pad).unwrap();
    assert_eq!((c[0].keep, c[0].drop, c[0].pad), (8, 2, 0));
    assert_eq!((c[1].keep, c[1].drop, c[1].pad), (7, 0, 1));
    let c = equalized_counts(&[10, 7], 4, true, Equalize::Off).unwrap();
    assert_eq!(
        (c[0].keep, c[0].batches, c[1].keep, c[1].batches),
        (8, 2, 4, 1)
    );
    assert!(equalized_counts(&[1], 0, false, Equalize::Off).is_err());
    assert!(equalized_counts(&[], 4, false, Equalize::Off).is_err());
    let err = equalized_counts(&[5, 0], 4, false, Equalize::Pad).unwrap_err();
    assert!(err.to_string().contains("rank 1"), "{err}");
    // Nothing to pad when the target is 0.
    assert!(equalized_counts(&[3, 0], 4, true, Equalize::Pad).is_ok());
}

#[test]
fn brace_ranges_and_lists_expand_for_local_paths_in_order() {
    let dir = tempfile::tempdir().unwrap();
    touch(
        dir.path(),
        &[
            "shard-000008.tar",
            "shard-000009.tar",
            "shard-000010.tar",
            "{odd}.tar",
        ],
    );
    let d = dir.path().to_str().unwrap();
    let got = expand_inputs(&[format!("wds:{d}/shard-{{000008..000010}}.tar")]).unwrap();
    assert_eq!(
        got,
        (8..=10)
            .map(|i| format!("wds:{d}/shard-{i:06}.tar"))
            .collect::<Vec<_>>()
    );
    // Braces and globs together; an existing file with braces in its name
    // is taken as it is.
    let got = expand_inputs(&[
        format!("{d}/shard-00000{{8,9}}.*"),
        format!("{d}/{{odd}}.tar"),
    ])
    .unwrap();
    assert_eq!(
        got,
        vec![
            format!("{d}/shard-000008.tar"),
            format!("{d}/shard-000009.tar"),
            format!("{d}/{{odd}}.tar")
        ]
    );
    assert_eq!(
        feedline::plan::expand_braces("a{1..3}b{x,y{0..1}}").unwrap(),
        ["a1bx", "a1by0", "a1by1", "a2bx", "a2by0", "a2by1", "a3bx", "a3by0", "a3by1"]
    );
}

#[test]
fn bad_braces_are_errors_naming_the_input() {
    for (spec, needle) in [
        ("data/shard-{0..9.tar", "never closed"),
        ("data/{a,b}}.tar", "without `{`"),
        ("data/shard-{9..0}.tar", "backwards"),
        ("data/shard-{a..z}.tar", "two whole numbers"),
        ("data/shard-{x}.tar", "neither a list"),
        ("data/shard-{0..99999999}.tar", "more than"),
    ] {
        let e = expand_inputs(&[s(spec)]).unwrap_err().to_string();
        assert!(e.contains(spec) && e.contains(needle), "{spec}: {e}");
    }
}

#[cfg(feature = "remote")]
#[test]
fn urls_keep_their_scheme_are_never_joined_to_a_list_folder_and_twice_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("remote.list");
    fs::write(
        &list,
        "s3://bucket/train/a.tfrecord\ntfrecord:gs://b/x.dat\nhttps://h.example/s-{1..2}.tar\n",
    )
    .unwrap();
    let got = expand_inputs(&[format!("@{}", list.display())]).unwrap();
    assert_eq!(
        got,
        vec![
            s("s3://bucket/train/a.tfrecord"),
            s("tfrecord:gs://b/x.dat"),
            s("https://h.example/s-1.tar"),
            s("https://h.example/s-2.tar"),
        ]
    );
    let e = expand_inputs(&[
        s("s3://bucket/a.tfrecord"),
        s("tfrecord:s3://bucket/a.tfrecord"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("s3://bucket/a.tfrecord") && e.contains("twice"),
        "{e}"
    );
}
