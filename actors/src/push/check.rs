//! Checking a ready-made batch pushed by user code against the schema, with
//! an error that names the field, the expected and the actual shape.

use feedline::format::generator::describe_shape;
use feedline::{Batch, DType, Dim, Field, Ragged, Schema, SourceId};

/// Check a ready-made batch against the schema: the same fields, each of the
/// declared type, layout (ragged: the schema's offsets or padded layout) and
/// dimensions for `batch.len()` instances.
pub(super) fn check_batch(
    schema: &Schema,
    batch: &Batch,
    source: SourceId,
    index: u64,
) -> Result<(), feedline::Error> {
    let bad =
        |what: String| feedline::Error::Schema(format!("{source}: pushed batch {index}: {what}"));
    if batch.schema().len() != schema.len() {
        return Err(bad(format!(
            "{} fields, the schema has {} ({})",
            batch.schema().len(),
            schema.len(),
            schema.field_names()
        )));
    }
    let n = batch.len();
    for f in schema.fields() {
        let bf = batch
            .field(&f.name)
            .map_err(|_| bad(format!("no field `{}`", f.name)))?;
        let shape = bf.data.shape();
        let layout = |bf: &feedline::BatchField| match (&bf.offsets, &bf.lengths) {
            (None, None) => "",
            (Some(_), _) => " with offsets",
            (None, Some(_)) => " with lengths",
        };
        let expected = batch_expected(f, n);
        let actual = format!("{}{}", describe_shape(&shape, bf.data.dtype()), layout(bf));
        let mismatch = || {
            bad(format!(
                "field `{}`: expected {expected}, got {actual}",
                f.name
            ))
        };
        if bf.data.dtype() != f.dtype {
            return Err(mismatch());
        }
        let bytes = f.dtype == DType::Bytes;
        let trailing = f.fixed_dims();
        if !f.is_ragged() {
            let want: Vec<usize> = if bytes {
                vec![n * f.unit_elements()]
            } else {
                std::iter::once(n).chain(trailing).collect()
            };
            if shape != want || bf.offsets.is_some() || bf.lengths.is_some() {
                return Err(mismatch());
            }
            continue;
        }
        match (f.ragged, &bf.offsets, &bf.lengths) {
            (Ragged::Offsets, Some(off), None) => {
                if off.len() != n + 1 || off[0] != 0 || off.windows(2).any(|w| w[0] > w[1]) {
                    return Err(bad(format!(
                        "field `{}`: offsets {off:?} for {n} instances (expected {} from 0, not decreasing)",
                        f.name,
                        n + 1
                    )));
                }
                let total = off[n];
                let want: Vec<usize> = if bytes {
                    vec![total]
                } else {
                    std::iter::once(total).chain(trailing).collect()
                };
                if shape != want {
                    return Err(mismatch());
                }
            }
            (Ragged::Padded, None, Some(len)) => {
                let max = if bytes {
                    shape[0].checked_div(n).unwrap_or(0)
                } else {
                    shape.get(1).copied().unwrap_or(0)
                };
                let want: Vec<usize> = if bytes {
                    vec![n * max]
                } else {
                    [n, max].into_iter().chain(trailing).collect()
                };
                if len.len() != n || shape != want {
                    return Err(mismatch());
                }
                if let Some(l) = len.iter().find(|&&l| l > max) {
                    return Err(bad(format!(
                        "field `{}`: a length {l} beyond the padded extent {max}",
                        f.name
                    )));
                }
            }
            _ => return Err(mismatch()),
        }
    }
    Ok(())
}

/// The shape a batch of `n` needs for field `f`, as errors show it.
fn batch_expected(f: &Field, n: usize) -> String {
    let trailing: Vec<String> = f.fixed_dims().iter().map(|d| d.to_string()).collect();
    let dims = |lead: Vec<String>| {
        let all: Vec<String> = lead.into_iter().chain(trailing.iter().cloned()).collect();
        format!("[{}] {}", all.join(", "), f.dtype)
    };
    match (f.shape.first(), f.dtype, f.ragged) {
        (Some(Dim::Var), DType::Bytes, Ragged::Offsets) => {
            format!("[total] bytes with {} offsets", n + 1)
        }
        (Some(Dim::Var), DType::Bytes, Ragged::Padded) => {
            format!("[{n} × max] bytes with {n} lengths")
        }
        (Some(Dim::Var), _, Ragged::Offsets) => {
            format!("{} with {} offsets", dims(vec!["total".into()]), n + 1)
        }
        (Some(Dim::Var), _, Ragged::Padded) => {
            format!(
                "{} with {n} lengths",
                dims(vec![n.to_string(), "max".into()])
            )
        }
        (_, DType::Bytes, _) => format!("[{}] bytes", n * f.unit_elements()),
        _ => dims(vec![n.to_string()]),
    }
}
