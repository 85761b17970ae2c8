//! Every setting is checked in one place before anything starts: a bad
//! value is a `Config` error that names the setting and the value.

mod common;

use std::time::Duration;

use common::{synth_loader, SynthFormat};
use feedline_actors::{BatchPolicy, ErrorPolicy, FileSet, LoaderBuilder, PipelineError};

fn base() -> LoaderBuilder {
    synth_loader(SynthFormat::with_files(&[10, 10]).build())
}

fn refused(name: &str, b: LoaderBuilder, words: &[&str]) {
    match b.build() {
        Err(PipelineError::Config(m)) => {
            for w in words {
                assert!(m.contains(w), "{name}: {m:?} does not say {w:?}");
            }
        }
        Err(e) => panic!("{name}: expected a Config error, got {e}"),
        Ok(_) => panic!("{name}: accepted"),
    }
}

#[test]
fn bad_settings_are_refused_naming_the_setting() {
    let cases: Vec<(&str, LoaderBuilder, &[&str])> = vec![
        ("passes 0", base().passes(0), &["passes", "0"]),
        (
            "shard 2 of 2",
            base().shard(2, 2),
            &["shard", "rank 2 of 2"],
        ),
        (
            "shard 0 of 0",
            base().shard(0, 0),
            &["shard", "rank 0 of 0"],
        ),
        (
            "chunk_bytes 0",
            base().chunk_bytes(0),
            &["chunk_bytes", "0"],
        ),
        (
            "chunk_records 0",
            base().chunk_records(0),
            &["chunk_records"],
        ),
        (
            "chunks_in_flight 0",
            base().chunks_in_flight(0),
            &["chunks_in_flight"],
        ),
        (
            "shuffle_bytes 0",
            base().shuffle_bytes(0),
            &["shuffle_bytes"],
        ),
        ("capacity 0", base().capacity(0), &["capacity"]),
        ("devices 0", base().devices(0), &["devices", "0"]),
        (
            "devices 100000",
            base().devices(100_000),
            &["devices", "1024", "100000"],
        ),
        ("readers 0", base().readers(0), &["readers", "0"]),
        (
            "readers 100000",
            base().readers(100_000),
            &["readers", "1024", "100000"],
        ),
        ("max_attempts 0", base().max_attempts(0), &["max_attempts"]),
        (
            "stall_timeout 0",
            base().stall_timeout(Duration::ZERO),
            &["stall_timeout"],
        ),
        (
            "reorder_window 0",
            base().deterministic(true).reorder_window(0),
            &["reorder_window"],
        ),
        (
            "max_bad_fraction 1.5",
            base().error_policy(ErrorPolicy::Skip {
                max_bad: None,
                max_bad_fraction: Some(1.5),
            }),
            &["max_bad_fraction", "1.5"],
        ),
        (
            "max_bad_fraction NaN",
            base().error_policy(ErrorPolicy::Skip {
                max_bad: None,
                max_bad_fraction: Some(f64::NAN),
            }),
            &["max_bad_fraction", "NaN"],
        ),
        ("batch 0", base().batch(0), &["batch"]),
        (
            "budget 0",
            base().batch_policy(BatchPolicy::Budget {
                max_cost: 0,
                cost: std::sync::Arc::new(|_, _| 1),
            }),
            &["budget"],
        ),
        (
            "equalize with a cost budget",
            base()
                .shard(0, 2)
                .equalize(feedline::plan::Equalize::Drop)
                .batch_policy(BatchPolicy::Budget {
                    max_cost: 4,
                    cost: std::sync::Arc::new(|_, _| 1),
                }),
            &["equalizing ranks", "fixed batch size"],
        ),
        (
            "set readers 0",
            synth_loader(SynthFormat::with_files(&[3]).build())
                .config(Default::default())
                .file_set(FileSet::new("a", ["synth:f0"]).readers(0)),
            &["\"a\"", "readers"],
        ),
        (
            "set readers 2000",
            synth_loader(SynthFormat::with_files(&[3]).build())
                .config(Default::default())
                .file_set(FileSet::new("a", ["synth:f0"]).readers(1000))
                .file_set(FileSet::new("b", ["synth:f0"]).readers(1000)),
            &["1024", "2000"],
        ),
    ];
    for (name, b, words) in cases {
        refused(name, b, words);
    }
}

#[test]
fn the_same_file_in_two_file_sets_is_refused() {
    let b = feedline_actors::Loader::builder()
        .registry(common::synth_registry(
            SynthFormat::with_files(&[3, 3]).build(),
        ))
        .schema(SynthFormat::schema())
        .file_set(FileSet::new("a", ["synth:f0", "synth:f1"]))
        .file_set(FileSet::new("b", ["synth:f1"]));
    refused(
        "one file, two sets",
        b,
        &["synth:f1", "\"a\"", "\"b\"", "twice"],
    );
}

/// The mistakes made through every face (`cli/tests/cli_settings.rs`,
/// `python/tests/test_settings.py` make the same ones): the same sentence,
/// each setting spelled as the builder's method.
#[test]
fn a_mistake_reads_as_the_builders_methods_name_its_settings() {
    use feedline_actors::{Pack, Setting, SettingError};
    let said = |b: LoaderBuilder| -> SettingError {
        match b.build() {
            Err(PipelineError::Config(e)) => e,
            Err(e) => panic!("expected a Config error, got {e}"),
            Ok(_) => panic!("accepted"),
        }
    };
    let cases: Vec<(LoaderBuilder, &str)> = vec![
        (
            base().shuffle(1000).min_pool(3000),
            "min_pool(3000) is more than the pool holds (shuffle(1000)): give at most 1000",
        ),
        (
            base().pack(Pack::concat(64).window(16)),
            "pack_window(16) does not apply with pack_policy(\"concat\") (concat fills one row \
             at a time: it holds no window of open rows): leave pack_window out, or give \
             pack_policy best-fit or first-fit",
        ),
        (
            base().pack(Pack::best_fit(64)).drop_last(true),
            "drop_last with pack(64): a pass's last packed batch is filled with padding rows \
             (segment ids 0), not dropped",
        ),
        (
            synth_loader(SynthFormat::with_files(&[3]).build()).config(Default::default()),
            "no input files: give files or file_set",
        ),
    ];
    for (b, sentence) in cases {
        let e = said(b);
        assert_eq!(e.to_string(), sentence);
        assert_eq!(
            PipelineError::Config(e.clone()).to_string(),
            format!("invalid configuration: {sentence}")
        );
        // The sentence names its settings by key, not by any face's words.
        assert!(e.settings().all(|s: Setting| sentence.contains(s.key())));
    }
}

/// The shard's one rule (`shard_given`): what a face was given wins, and a
/// refusal names which values were given, spelled by the face (the
/// command and Python make the same mistake: `cli/tests/cli_flags.rs`,
/// `python/tests/test_settings.py`).
#[test]
fn a_shard_out_of_range_is_refused_naming_what_was_given() {
    use feedline_actors::{shard_given, Setting, Shard};
    assert_eq!(
        shard_given(Some(1), Some(4)).unwrap(),
        Some(Shard {
            rank: 1,
            world_size: 4
        })
    );
    let e = shard_given(Some(3), Some(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "RANK=3 is out of range for WORLD_SIZE=2 (ranks are 0..2) \
         (RANK from rank, WORLD_SIZE from world_size)"
    );
    assert_eq!(
        e.settings().collect::<Vec<_>>(),
        [Setting::Rank, Setting::WorldSize]
    );
    let e = shard_given(Some(0), Some(0)).unwrap_err();
    assert!(e.starts_with("WORLD_SIZE=0: must be at least 1"), "{e}");
}

/// `set_epoch`'s range is one judgement (`Epochs::check_set_epoch`), its
/// sentence the same from Python (`python/tests/test_settings.py`).
#[test]
fn set_epoch_past_the_last_pass_is_refused_naming_the_passes() {
    let mut loader = base().batch(4).passes(2).build().unwrap();
    assert!(loader.set_epoch(1).is_ok());
    let e = loader.set_epoch(2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid configuration: set_epoch(2): this loader runs 2 passes (passes(2)): epochs 0..1"
    );
}
