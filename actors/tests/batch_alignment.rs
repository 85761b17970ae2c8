//! Batch buffers are 64-byte aligned ([`feedline::DATA_ALIGN`]): every
//! numeric field with data of every batch a pipeline delivers — fixed shapes of every
//! element type, ragged values (offsets and padded layouts), and the
//! outputs of an instance map (the transform assembler's buffers) — starts
//! on a 64-byte boundary, for several seeds, batch sizes and reader
//! counts; the batches still hold every instance once per pass.

use std::sync::Arc;

use feedline::format::generator::Sample;
use feedline::transform::{map_fn, TransformCtx};
use feedline::{Array, Batch, DType, Instance, Ragged, Schema, Values, DATA_ALIGN};
use feedline_actors::Loader;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const N: i64 = 301;

fn schema() -> Schema {
    Schema::builder()
        .field("id", DType::I64, [])
        .field("x", DType::F32, [3])
        .field("u", DType::U8, [5])
        .field("b", DType::Bool, [])
        .field("d", DType::F64, [2])
        .ragged("tok", DType::I32, Ragged::Offsets)
        .ragged("pad", DType::I64, Ragged::Padded)
        .build()
        .unwrap()
}

/// Instance `id`: odd sizes, so that nothing lines up by luck; ragged
/// lengths 0..=6 (a batch may have no ragged values at all).
fn sample(id: i64) -> Sample {
    let len = (id % 7) as usize;
    Sample::new()
        .with("id", Values::I64(vec![id]), [])
        .with("x", Values::F32(vec![id as f32; 3]), [3])
        .with("u", Values::U8(vec![id as u8; 5]), [5])
        .with("b", Values::Bool(vec![id % 2 == 0]), [])
        .with("d", Values::F64(vec![id as f64; 2]), [2])
        .with("tok", Values::I32(vec![id as i32; len]), [len])
        .with("pad", Values::I64(vec![id; len]), [len])
}

/// The address of a numeric field's first element.
fn address(a: &Array) -> Option<usize> {
    Some(match a {
        Array::F32(a) => a.as_ptr() as usize,
        Array::F64(a) => a.as_ptr() as usize,
        Array::I64(a) => a.as_ptr() as usize,
        Array::I32(a) => a.as_ptr() as usize,
        Array::U8(a) => a.as_ptr() as usize,
        Array::Bool(a) => a.as_ptr() as usize,
        Array::Bytes(_) => return None,
    })
}

/// Every numeric field with data aligned (an empty one has no bytes to
/// align: ndarray keeps no offset for it); returns how many were checked.
fn assert_aligned(batch: &Batch, what: &str) -> usize {
    let mut checked = 0;
    for (f, bf) in batch.schema().fields().iter().zip(batch.fields()) {
        if bf.data.payload_bytes() == 0 {
            continue;
        }
        if let Some(p) = address(&bf.data) {
            assert_eq!(
                p % DATA_ALIGN,
                0,
                "{what}: field `{}` ({} {:?}) starts at {p:#x}, not on a {DATA_ALIGN}-byte boundary",
                f.name,
                f.dtype,
                bf.data.shape()
            );
            checked += 1;
        }
    }
    checked
}

/// Run a loader; every batch's fields aligned, every id once per pass.
fn run(builder: feedline_actors::LoaderBuilder, passes: u64, what: &str) -> usize {
    let mut per_pass = vec![Vec::new(); passes as usize];
    let mut checked = 0;
    for d in builder.build().unwrap() {
        let d = d.unwrap();
        checked += assert_aligned(&d.batch, what);
        per_pass[d.pass as usize].extend(d.batch.i64("id").unwrap().iter().copied());
    }
    for (p, ids) in per_pass.iter_mut().enumerate() {
        ids.sort();
        assert_eq!(*ids, (0..N).collect::<Vec<_>>(), "{what}: pass {p}");
    }
    checked
}

#[test]
fn every_field_of_every_batch_is_aligned() {
    for seed in [1, 2, 3] {
        for (batch, readers) in [(1, 1), (3, 2), (7, 2), (32, 1), (64, 2)] {
            let what = format!("seed {seed}, batch {batch}, {readers} readers");
            let b = Loader::builder()
                .generator("a", || (0..N).map(sample))
                .schema(schema())
                .readers(readers)
                .passes(2)
                .batch(batch)
                .shuffle(50)
                .chunk_records(13)
                .seed(seed);
            let checked = run(b, 2, &what);
            // 5 fixed fields in each batch of each pass, and the 2 ragged
            // ones when the batch has values (a batch of only ids 7k has none).
            let batches = 2 * (N as usize).div_ceil(batch);
            assert!(
                checked > 5 * batches && checked <= 7 * batches,
                "{what}: {checked}"
            );
        }
    }
}

#[test]
fn instance_map_outputs_are_aligned() {
    let map = |inst: Instance, _: &mut TransformCtx| -> Result<Sample, BoxError> {
        let id = inst.get("id")?.as_i64().ok_or("id is not i64")?[0];
        Ok(Sample::new()
            .with("id", Values::I64(vec![id]), [])
            .with("y", Values::F32(vec![id as f32; 3]), [3])
            .with("m", Values::U8(vec![1; 7]), [7]))
    };
    let out = Schema::builder()
        .field("id", DType::I64, [])
        .field("y", DType::F32, [3])
        .field("m", DType::U8, [7])
        .build()
        .unwrap();
    for seed in [4, 5] {
        for (batch, workers) in [(1, 1), (5, 2), (33, 2)] {
            let what = format!("map: seed {seed}, batch {batch}, {workers} workers");
            let b = Loader::builder()
                .generator("a", || (0..N).map(sample))
                .schema(schema())
                .transform(Arc::new(map_fn(map)))
                .output_schema(out.clone())
                .workers(workers)
                .readers(2)
                .passes(1)
                .batch(batch)
                .shuffle(20)
                .seed(seed);
            let checked = run(b, 1, &what);
            assert_eq!(checked, 3 * (N as usize).div_ceil(batch), "{what}");
        }
    }
}
