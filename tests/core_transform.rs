//! Transforms in the single-thread path (`reader::batches(..).transforms(..)`),
//! which defines their semantics: the instance map on a worker pool with
//! per-instance RNGs, the output schema inferred and checked, failures and
//! panics as bad records with provenance, the record filter / map before the
//! shuffle, the batch map.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use feedline::batch_policy::BatchPolicy;
use feedline::format::generator::Sample;
use feedline::format::{OpenOptions, Registry};
use feedline::plan::PassPlan;
use feedline::reader::{batches, BatchesConfig, BatchesReader};
use feedline::shuffle::ShuffleConfig;
use feedline::transform::{
    instance_rng, map_fn, InstanceMap, RecordStage, TransformCtx, Transforms,
};
use feedline::{DType, Error, Instance, Schema, Values};
use rand::Rng;

/// `files` JSON Lines files of `per_file` records `{"id": k, "x": [k, 2k]}`.
fn write_files(dir: &Path, files: usize, per_file: usize) -> Vec<String> {
    (0..files)
        .map(|f| {
            let path = dir.join(format!("part-{f}.jsonl"));
            let text: String = (0..per_file)
                .map(|i| {
                    let k = f * 1000 + i;
                    format!("{{\"id\": {k}, \"x\": [{k}.0, {}.0]}}\n", 2 * k)
                })
                .collect();
            std::fs::write(&path, text).unwrap();
            path.to_string_lossy().into_owned()
        })
        .collect()
}

fn input_schema() -> Schema {
    Schema::builder()
        .field("id", DType::I64, [])
        .field("x", DType::F32, [2])
        .build()
        .unwrap()
}

fn reader(files: &[String], seed: u64, batch: usize, transforms: &Transforms) -> BatchesReader {
    let cfg = BatchesConfig {
        shuffle: ShuffleConfig {
            pool_size: 16,
            min_pool_size: None,
            max_bytes: 1 << 20,
            seed,
        },
        chunk_rows: 7,
        ..BatchesConfig::new(BatchPolicy::Fixed(batch))
    };
    batches(
        Registry::with_builtin(),
        PassPlan::new(files.to_vec()).seed(seed),
        input_schema(),
        OpenOptions::default(),
        cfg,
    )
    .unwrap()
    .transforms(transforms, seed)
    .unwrap()
}

/// id → (noise, the output row) for every instance of pass `pass`, and the
/// errors in order.
type Pass = (BTreeMap<i64, Vec<f32>>, Vec<Error>);

fn read_pass(r: &BatchesReader, pass: u64) -> Pass {
    let mut rows = BTreeMap::new();
    let mut errors = Vec::new();
    for b in r.read_pass(pass) {
        match b {
            Ok(b) => {
                let id = b.i64("id").unwrap();
                let y = b.f32("y").unwrap();
                for (i, id) in id.iter().enumerate() {
                    let row = y.index_axis(ndarray::Axis(0), i).iter().copied().collect();
                    assert!(rows.insert(*id, row).is_none(), "id {id} twice in a pass");
                }
            }
            Err(e) => errors.push(e),
        }
    }
    (rows, errors)
}

/// x plus noise from the instance's RNG: y = [x0 + u0, x1 + u1, u2].
fn noisy() -> Arc<dyn InstanceMap> {
    Arc::new(map_fn(|inst: Instance, ctx: &mut TransformCtx| {
        let x = inst.get("x")?.as_f32().ok_or("x is not f32")?.to_vec();
        let id = inst.get("id")?.as_i64().ok_or("id is not i64")?[0];
        let rng = ctx.rng();
        let y = vec![
            x[0] + rng.gen::<f32>(),
            x[1] + rng.gen::<f32>(),
            rng.gen::<f32>(),
        ];
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            Sample::new()
                .with("id", Values::I64(vec![id]), [])
                .with("y", Values::F32(y), [3]),
        )
    }))
}

#[test]
fn augmentations_depend_on_seed_pass_source_and_record_only() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), 3, 20);
    let mut seen: Vec<Pass> = Vec::new();
    for workers in [1, 2, 4] {
        let t = Transforms {
            instance: Some(noisy()),
            workers,
            ..Transforms::default()
        };
        let r = reader(&files, 9, 8, &t);
        let pass = read_pass(&r, 1);
        assert!(pass.1.is_empty(), "{:?}", pass.1);
        assert_eq!(pass.0.len(), 60);
        // Each row is what the instance's own RNG gives, computed apart.
        for (id, y) in &pass.0 {
            let (f, i) = (id / 1000, id % 1000);
            let mut rng = instance_rng(9, 1, &files[f as usize], i as u64);
            let k = *id as f32;
            assert_eq!(
                y,
                &vec![
                    k + rng.gen::<f32>(),
                    2.0 * k + rng.gen::<f32>(),
                    rng.gen::<f32>()
                ]
            );
        }
        assert_eq!(
            r.output_schema().unwrap().field("y").unwrap().describe(),
            "[3] f32"
        );
        seen.push(pass);
    }
    assert!(seen.windows(2).all(|w| w[0].0 == w[1].0));
    // Another pass draws other numbers.
    let t = Transforms {
        instance: Some(noisy()),
        ..Transforms::default()
    };
    let other = read_pass(&reader(&files, 9, 8, &t), 2);
    assert_ne!(other.0, seen[0].0);
}

/// A map that fails on ids in `fail` and panics on ids in `panic`.
fn faulty(fail: &'static [i64], panic: &'static [i64]) -> Arc<dyn InstanceMap> {
    Arc::new(map_fn(move |inst: Instance, _: &mut TransformCtx| {
        let id = inst.get("id")?.as_i64().unwrap()[0];
        if fail.contains(&id) {
            return Err(format!("no good: {id}").into());
        }
        if panic.contains(&id) {
            panic!("boom at {id}");
        }
        let x = inst.get("x")?.as_f32().unwrap().to_vec();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            Sample::new()
                .with("id", Values::I64(vec![id]), [])
                .with("y", Values::F32(x), [2]),
        )
    }))
}

#[test]
fn failing_and_panicking_maps_are_bad_records_and_the_rest_come_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), 2, 30);
    for workers in [1, 2, 4] {
        let t = Transforms {
            instance: Some(faulty(&[3, 1017], &[0, 29, 1005])),
            workers,
            ..Transforms::default()
        };
        let r = reader(&files, 5, 8, &t);
        for pass in 0..2 {
            let (rows, errors) = read_pass(&r, pass);
            let want: Vec<i64> = (0..30)
                .chain(1000..1030)
                .filter(|k| ![3, 1017, 0, 29, 1005].contains(k))
                .collect();
            assert_eq!(rows.keys().copied().collect::<Vec<_>>(), want);
            let mut bad: Vec<(String, u64, String)> = errors
                .iter()
                .map(|e| match e {
                    Error::Transform { location, what, .. } => (
                        location.source.name().to_string(),
                        location.record,
                        what.clone(),
                    ),
                    other => panic!("not a transform error: {other}"),
                })
                .collect();
            bad.sort();
            let (f0, f1) = (files[0].clone(), files[1].clone());
            assert_eq!(
                bad,
                vec![
                    (f0.clone(), 0, "panicked: boom at 0".to_string()),
                    (f0.clone(), 3, "no good: 3".to_string()),
                    (f0, 29, "panicked: boom at 29".to_string()),
                    (f1.clone(), 5, "panicked: boom at 1005".to_string()),
                    (f1, 17, "no good: 1017".to_string()),
                ]
            );
            assert!(errors[0].to_string().contains("record"), "{}", errors[0]);
        }
    }
}

#[test]
fn an_output_of_another_shape_names_file_record_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), 1, 12);
    let t = Transforms {
        instance: Some(Arc::new(map_fn(|inst: Instance, _: &mut TransformCtx| {
            let id = inst.get("id")?.as_i64().unwrap()[0];
            let n = if id == 7 { 3 } else { 2 };
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                Sample::new().with("id", Values::I64(vec![id]), []).with(
                    "y",
                    Values::F32(vec![0.5; n]),
                    [n],
                ),
            )
        }))),
        workers: 2,
        ..Transforms::default()
    };
    // Inferred from the first instance; declared: the same check.
    let declared = Schema::builder()
        .field("id", DType::I64, [])
        .field("y", DType::F32, [2])
        .build()
        .unwrap();
    for (inferred, t) in [
        (true, t.clone()),
        (
            false,
            Transforms {
                output_schema: Some(declared),
                ..t
            },
        ),
    ] {
        let r = reader(&files, 1, 4, &t);
        let (rows, errors) = read_pass(&r, 0);
        assert_eq!(rows.len(), 11);
        assert_eq!(errors.len(), 1);
        match &errors[0] {
            Error::Field {
                location,
                field,
                expected,
                actual,
            } => {
                assert_eq!(
                    (location.source.name().to_string(), location.record),
                    (files[0].clone(), 7)
                );
                assert_eq!(field, "y");
                assert_eq!(expected, "[2] f32");
                assert!(actual.contains('3'), "{actual}");
                // An inferred shape says where it came from and what to do.
                assert_eq!(
                    actual.contains("inferred from the first transformed instance")
                        && actual.contains("part-0.jsonl: record ")
                        && actual.contains("resize or crop"),
                    inferred,
                    "{actual}"
                );
            }
            other => panic!("{other}"),
        }
        let msg = errors[0].to_string();
        assert!(
            msg.contains("part-0.jsonl: record 7") && msg.contains("`y`"),
            "{msg}"
        );
    }
}

#[test]
fn the_record_filter_keeps_exactly_what_it_should_and_the_map_fixes_records() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), 3, 25);
    let stage = RecordStage::default()
        .filter(|inst: &Instance| {
            Ok::<_, String>(inst.get("id").unwrap().as_i64().unwrap()[0] % 3 != 0)
        })
        .map(|inst: Instance| {
            let id = inst.get("id").unwrap().as_i64().unwrap()[0];
            if id == 1010 {
                return Err("cannot fix 1010".to_string());
            }
            let x = Values::F32(vec![-(id as f32), 1.0]);
            Instance::new(inst.schema(), vec![Values::I64(vec![id]), x], inst.origin())
                .map_err(|e| e.to_string())
        });
    let t = Transforms {
        records: Some(stage),
        ..Transforms::default()
    };
    let r = reader(&files, 3, 5, &t);
    let mut ids = Vec::new();
    let mut errors = Vec::new();
    for b in r.read_pass(0) {
        match b {
            Ok(b) => {
                let x = b.f32("x").unwrap();
                for (i, id) in b.i64("id").unwrap().iter().enumerate() {
                    assert_eq!(x[[i, 0]], -(*id as f32));
                    ids.push(*id);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    ids.sort();
    let want: Vec<i64> = (0..25)
        .chain(1000..1025)
        .chain(2000..2025)
        .filter(|k| k % 3 != 0 && *k != 1010)
        .collect();
    assert_eq!(ids, want);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("part-1.jsonl: record 10") && errors[0].contains("cannot fix 1010"),
        "{}",
        errors[0]
    );
}

#[test]
fn the_batch_map_sees_every_collated_batch_and_its_failure_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), 1, 10);
    let t = Transforms {
        batch: Some(Arc::new(|b: feedline::Batch| {
            if b.len() < 4 {
                return Err("short batch".into());
            }
            Ok(b)
        })),
        ..Transforms::default()
    };
    let r = reader(&files, 0, 4, &t);
    let got: Vec<Result<usize, String>> = r
        .read_pass(0)
        .map(|b| b.map(|b| b.len()).map_err(|e| e.to_string()))
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(&got[..2], &[Ok(4), Ok(4)]);
    let e = got[2].clone().unwrap_err();
    assert!(
        e.contains("batch map on the batch of 2 instances from") && e.contains("short batch"),
        "{e}"
    );
}

#[test]
fn zero_workers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), 1, 2);
    let t = Transforms {
        instance: Some(noisy()),
        workers: 0,
        ..Transforms::default()
    };
    let err = batches(
        Registry::with_builtin(),
        PassPlan::new(files),
        input_schema(),
        OpenOptions::default(),
        BatchesConfig::new(BatchPolicy::Fixed(2)),
    )
    .unwrap()
    .transforms(&t, 0)
    .unwrap_err();
    assert!(
        err.to_string().contains("transform workers: at least 1"),
        "{err}"
    );
}

/// A map that passes a ragged input field through keeps it ragged (each
/// instance its own length, as read), while a field it changes takes the
/// shape inferred from its output.
#[test]
fn a_ragged_field_passed_through_the_map_stays_ragged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ragged.jsonl");
    // Lengths 1, 2, 3, 1, 2, 3, …: the first row's length is not the others'.
    let tokens = |k: i64| -> Vec<i64> { (0..k % 3 + 1).map(|j| 10 * k + j).collect() };
    let text: String = (0..20)
        .map(|k| format!("{{\"id\": {k}, \"tok\": {:?}}}\n", tokens(k)))
        .collect();
    std::fs::write(&path, text).unwrap();
    let files = vec![path.to_string_lossy().into_owned()];
    let input = Schema::builder()
        .field("id", DType::I64, [])
        .ragged("tok", DType::I64, feedline::Ragged::Offsets)
        .build()
        .unwrap();
    // `tok` passed through as read; `id` doubled (changed: fixed, inferred).
    let t = Transforms {
        instance: Some(Arc::new(map_fn(|inst: Instance, _: &mut TransformCtx| {
            let id = inst.get("id")?.as_i64().unwrap()[0];
            let tok = inst.get("tok")?.as_i64().unwrap().to_vec();
            let n = tok.len();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                Sample::new()
                    .with("id", Values::I64(vec![id, 2 * id]), [2])
                    .with("tok", Values::I64(tok), [n]),
            )
        }))),
        workers: 2,
        ..Transforms::default()
    };
    let cfg = BatchesConfig {
        chunk_rows: 7,
        ..BatchesConfig::new(BatchPolicy::Fixed(4))
    };
    let r = batches(
        Registry::with_builtin(),
        PassPlan::new(files.clone()),
        input,
        OpenOptions::default(),
        cfg,
    )
    .unwrap()
    .transforms(&t, 1)
    .unwrap();
    let mut seen = BTreeMap::new();
    for b in r.read_pass(0) {
        let b = b.unwrap();
        let schema = b.schema().clone();
        assert!(schema.field("tok").unwrap().is_ragged(), "{schema}");
        assert!(!schema.field("id").unwrap().is_ragged(), "{schema}");
        let ids = b.i64("id").unwrap();
        let tok = b.i64("tok").unwrap();
        let tok: Vec<i64> = tok.iter().copied().collect();
        let offsets = b
            .offsets("tok")
            .unwrap()
            .expect("offsets of a ragged field");
        for i in 0..b.len() {
            let id = ids[[i, 0]];
            assert_eq!(ids[[i, 1]], 2 * id);
            let got = tok[offsets[i]..offsets[i + 1]].to_vec();
            assert!(seen.insert(id, got).is_none(), "id {id} twice");
        }
    }
    let want: BTreeMap<i64, Vec<i64>> = (0..20).map(|k| (k, tokens(k))).collect();
    assert_eq!(seen, want);
}
