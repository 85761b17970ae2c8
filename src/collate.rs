//! Collation: instances (rows of [`Chunk`]s) into one [`Batch`], with one
//! copy per field per instance. Large batches are copied on rayon's pool.
//!
//! A row left in its file is read from it straight into the batch. It may
//! carry its record's CRC, left to be checked here (see [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)):
//! it is computed on the row's copy in the batch right after the copy, while
//! those bytes are in cache, and a mismatch fails the batch with the error
//! reading would have given.
//!
//! Fixed-shape fields become `[batch, dims…]`; ragged fields become values
//! plus offsets (Paddle's LoD) or `[batch, max_len, dims…]` padded with zeros
//! plus lengths, as the schema's [`Ragged`] says.

use std::mem::MaybeUninit;

use ndarray::ArrayD;
use rayon::prelude::*;

use crate::backing::FileRow;
use crate::batch::aligned::AlignedVec;
use crate::batch::{recycle, Array, Batch, BatchField};
use crate::chunk::{Chunk, RowRef};
use crate::error::{Error, Result};
use crate::provenance::Origin;
use crate::schema::{DType, Field, Ragged, Schema};
use crate::values::{BytesList, Values};

/// Batches whose field payload exceeds this many bytes are copied in parallel.
const PARALLEL_BYTES: usize = 1 << 20;

/// Collate rows — `(chunk, row index)` pairs, in batch order — into a batch.
/// Every chunk must have `schema` (an error names the first that does not).
pub fn collate<'a>(
    schema: &Schema,
    rows: impl IntoIterator<Item = (&'a Chunk, usize)>,
) -> Result<Batch> {
    let rows: Vec<(&Chunk, usize)> = rows.into_iter().collect();
    for (c, i) in &rows {
        if !c.schema().same(schema) {
            return Err(Error::Schema(format!(
                "collate: instance {} has schema {}, the batch {}",
                c.origins()[*i].location(),
                c.schema(),
                schema
            )));
        }
    }
    let fields = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(fi, f)| collate_field(f, fi, &rows))
        .collect::<Result<_>>()?;
    let origins: Vec<Origin> = rows.iter().map(|(c, i)| c.origins()[*i]).collect();
    Ok(Batch {
        schema: schema.clone(),
        fields,
        origins: origins.into_boxed_slice(),
        padded: 0,
        segments: None,
    })
}

/// Collate rows given as [`RowRef`]s.
pub fn collate_rows(schema: &Schema, rows: &[RowRef]) -> Result<Batch> {
    collate(schema, rows.iter().map(|r| (&*r.chunk, r.index)))
}

/// Collate whole chunks, all rows in order.
pub fn collate_chunks<'a>(
    schema: &Schema,
    chunks: impl IntoIterator<Item = &'a Chunk>,
) -> Result<Batch> {
    let chunks: Vec<&Chunk> = chunks.into_iter().collect();
    collate(
        schema,
        chunks
            .iter()
            .flat_map(|c| (0..c.len()).map(move |i| (*c, i))),
    )
}

trait Elem: Copy + Default + Send + Sync + recycle::Recycled {
    fn slice(v: &Values) -> &[Self];
    fn wrap(a: ArrayD<Self>) -> Array;
}

macro_rules! elem {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            fn slice(v: &Values) -> &[Self] {
                match v {
                    Values::$v(x) => x,
                    other => panic!("column of {} in a {} field", other.dtype(), DType::$v),
                }
            }
            fn wrap(a: ArrayD<Self>) -> Array {
                Array::$v(a)
            }
        }
    };
}
elem!(f32, F32);
elem!(f64, F64);
elem!(i64, I64);
elem!(i32, I32);
elem!(u8, U8);
elem!(bool, Bool);

fn collate_field(f: &Field, fi: usize, rows: &[(&Chunk, usize)]) -> Result<BatchField> {
    match f.dtype {
        DType::F32 => numeric::<f32>(f, fi, rows),
        DType::F64 => numeric::<f64>(f, fi, rows),
        DType::I64 => numeric::<i64>(f, fi, rows),
        DType::I32 => numeric::<i32>(f, fi, rows),
        DType::U8 => numeric::<u8>(f, fi, rows),
        DType::Bool => numeric::<bool>(f, fi, rows),
        DType::Bytes => bytes(f, fi, rows),
    }
}

/// Append row `i` of field `fi` to `data` (one copy; a row left in its
/// file read from it, its due CRC checked on the copy).
/// `data` was made with room for every row.
fn append_row<T: Elem>(data: &mut AlignedVec<T>, c: &Chunk, fi: usize, i: usize) -> Result<()> {
    let len = c.columns()[fi].range(i).len();
    copy_row(c, fi, i, &mut data.spare_capacity_mut()[..len])?;
    // SAFETY: `copy_row` wrote all `len` slots (or returned an error).
    unsafe { data.set_len(data.len() + len) };
    Ok(())
}

/// Copy row `i` of field `fi` into `out` (exactly its length), then check
/// any CRC due on it against the copy.
#[inline(always)]
fn copy_row<T: Elem>(c: &Chunk, fi: usize, i: usize, out: &mut [MaybeUninit<T>]) -> Result<()> {
    let col = &c.columns()[fi];
    if let Some(r) = col.file_row_unchecked(i) {
        // SAFETY: a row left in its file is a `u8` row, so `T` is `u8`
        // here: the same memory, as bytes.
        let out = unsafe {
            std::slice::from_raw_parts_mut(
                out.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                std::mem::size_of_val(out),
            )
        };
        return r.copy_to(out);
    }
    let src = &T::slice(&col.values)[col.owned_range(i)];
    assert_eq!(
        src.len(),
        out.len(),
        "a row of the wrong length in a checked chunk"
    );
    // SAFETY: `src` and `out` have the same length (asserted); `out` is
    // spare capacity of the batch's vector, which no row of a chunk can
    // overlap; `T: Copy`, so a bitwise copy is a copy.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr().cast::<T>(), src.len());
    }
    Ok(())
}

fn numeric<T: Elem>(f: &Field, fi: usize, rows: &[(&Chunk, usize)]) -> Result<BatchField> {
    let n = rows.len();
    let unit = f.unit_elements();
    let dims = f.fixed_dims();
    if !f.is_ragged() {
        let mut shape = vec![n];
        shape.extend(&dims);
        let data = gather::<T>(rows, fi, unit, n * unit)?;
        return Ok(BatchField {
            data: T::wrap(
                data.into_array(&shape)
                    .expect("collate: shape matches length"),
            ),
            offsets: None,
            lengths: None,
        });
    }
    let lens: Vec<usize> = rows
        .iter()
        .map(|(c, i)| c.columns()[fi].range(*i).len() / unit.max(1))
        .collect();
    match f.ragged {
        Ragged::Offsets => {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0);
            let mut total = 0;
            for l in &lens {
                total += l;
                offsets.push(total);
            }
            let mut data = AlignedVec::with_capacity(total * unit);
            for (c, i) in rows {
                append_row(&mut data, c, fi, *i)?;
            }
            let mut shape = vec![total];
            shape.extend(&dims);
            Ok(BatchField {
                data: T::wrap(
                    data.into_array(&shape)
                        .expect("collate: shape matches length"),
                ),
                offsets: Some(offsets),
                lengths: None,
            })
        }
        Ragged::Padded => {
            let max = lens.iter().copied().max().unwrap_or(0);
            let stride = max * unit;
            let mut data = AlignedVec::with_capacity(n * stride);
            data.resize(n * stride, T::default());
            for ((c, i), out) in rows
                .iter()
                .zip(data.as_mut_slice().chunks_mut(stride.max(1)))
            {
                let len = c.columns()[fi].range(*i).len();
                // SAFETY: initialized `T`s seen as maybe-uninitialized ones,
                // only written (with `T`s) through the view.
                let out = unsafe { &mut *(&mut out[..len] as *mut [T] as *mut [MaybeUninit<T>]) };
                copy_row(c, fi, *i, out)?;
            }
            let mut shape = vec![n, max];
            shape.extend(&dims);
            Ok(BatchField {
                data: T::wrap(
                    data.into_array(&shape)
                        .expect("collate: shape matches length"),
                ),
                offsets: None,
                lengths: Some(lens),
            })
        }
    }
}

/// Concatenate fixed-size rows of `unit` elements (one copy each, no
/// zero-filling first, any due CRC checked on the copy); in parallel when
/// large.
fn gather<T: Elem>(
    rows: &[(&Chunk, usize)],
    fi: usize,
    unit: usize,
    total: usize,
) -> Result<AlignedVec<T>> {
    let mut data = AlignedVec::<T>::with_capacity(total);
    if unit > 0 {
        if total * std::mem::size_of::<T>() >= PARALLEL_BYTES && rows.len() > 1 {
            data.spare_capacity_mut()[..total]
                .par_chunks_mut(unit)
                .zip(rows.par_iter())
                .try_for_each(|(out, (c, i))| copy_row(c, fi, *i, out))?;
        } else {
            let slots = data.spare_capacity_mut()[..total].chunks_mut(unit);
            for (out, (c, i)) in slots.zip(rows) {
                copy_row(c, fi, *i, out)?;
            }
        }
    }
    // SAFETY: the `total / unit` chunks of `unit` slots above cover all
    // `total` slots (rows.len() * unit == total; none when unit is 0), and
    // each was written by `copy_row` from a source of exactly its length
    // (asserted) — or an error returned above.
    unsafe { data.set_len(total) };
    Ok(data)
}

/// A run of bytes to copy into the batch: in a column, or a row left in its
/// file (read from it, with the CRC check due on it once copied).
enum Block<'a> {
    Owned(&'a [u8]),
    File(FileRow<'a>),
}

impl Block<'_> {
    fn len(&self) -> usize {
        match self {
            Block::Owned(b) => b.len(),
            Block::File(r) => r.len,
        }
    }
}

/// Copy `blocks` one after another into one vector of `total` bytes: one
/// copy each, in parallel when large, no zero-filling first; a block's due
/// CRC is checked on its copy right after it is made (still in cache).
fn copy_blocks(blocks: &[Block<'_>], total: usize) -> Result<Vec<u8>> {
    let mut data: Vec<u8> = recycle::take(total);
    let parallel = total >= PARALLEL_BYTES && blocks.len() > 1;
    let mut jobs: Vec<(&mut [MaybeUninit<u8>], &Block<'_>)> = Vec::with_capacity(blocks.len());
    let mut rest = &mut data.spare_capacity_mut()[..total];
    for b in blocks {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(b.len());
        jobs.push((dst, b));
        rest = tail;
    }
    assert!(rest.is_empty(), "blocks add up to the total");
    let copy = |(dst, src): (&mut [MaybeUninit<u8>], &Block<'_>)| -> Result<()> {
        let bytes = match src {
            Block::File(r) => return r.copy_to(dst),
            Block::Owned(b) => b,
        };
        // SAFETY: `dst` and `bytes` have the same length (split above), `dst`
        // is spare capacity of `data`, which no row of a chunk can overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                dst.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
        }
        Ok(())
    };
    if parallel {
        jobs.into_par_iter().try_for_each(copy)?;
    } else {
        jobs.into_iter().try_for_each(copy)?;
    }
    // SAFETY: the blocks cover the first `total` bytes exactly (asserted),
    // and each was written above (or an error returned).
    unsafe { data.set_len(total) };
    Ok(data)
}

/// The byte strings of field `fi` of `rows`, concatenated (sized first, each
/// row copied once), and how many strings each row has.
fn gather_bytes(fi: usize, rows: &[(&Chunk, usize)]) -> Result<(BytesList, Vec<usize>)> {
    let mut blocks: Vec<Block<'_>> = Vec::with_capacity(rows.len());
    let mut ends = Vec::with_capacity(rows.len());
    let mut counts = Vec::with_capacity(rows.len());
    let mut total = 0usize;
    for (c, i) in rows {
        let col = &c.columns()[fi];
        if let Some(r) = col.file_row_unchecked(*i) {
            total += r.len;
            ends.push(total);
            counts.push(1);
            blocks.push(Block::File(r));
            continue;
        }
        let r = col.owned_range(*i);
        counts.push(r.len());
        if let Values::Bytes(list) = &col.values {
            let block = list.bytes_of(r.start, r.end);
            let b0 = if r.start == 0 {
                0
            } else {
                list.ends()[r.start - 1]
            };
            ends.extend(list.ends()[r].iter().map(|&e| e - b0 + total));
            total += block.len();
            blocks.push(Block::Owned(block));
        }
    }
    let data = copy_blocks(&blocks, total)?;
    Ok((BytesList::from_parts(data, ends), counts))
}

fn bytes(f: &Field, fi: usize, rows: &[(&Chunk, usize)]) -> Result<BatchField> {
    let (out, lens) = gather_bytes(fi, rows)?;
    let mut offsets = Vec::with_capacity(lens.len() + 1);
    offsets.push(0);
    let mut n = 0;
    for l in &lens {
        n += l;
        offsets.push(n);
    }
    if !f.is_ragged() {
        return Ok(BatchField {
            data: Array::Bytes(out),
            offsets: None,
            lengths: None,
        });
    }
    Ok(match f.ragged {
        Ragged::Offsets => BatchField {
            data: Array::Bytes(out),
            offsets: Some(offsets),
            lengths: None,
        },
        Ragged::Padded => {
            let max = lens.iter().copied().max().unwrap_or(0);
            let mut padded = BytesList::new();
            for (k, &l) in lens.iter().enumerate() {
                for j in 0..max {
                    padded.push(if j < l { out.get(offsets[k] + j) } else { &[] });
                }
            }
            BatchField {
                data: Array::Bytes(padded),
                offsets: None,
                lengths: Some(lens),
            }
        }
    })
}
