//! The token field of a made batch, as packing reads it — by the packing
//! step and by the equalized ranks' count before a pass: its layout
//! checked (offsets, `i32` or `i64` ids), and each document's ids.

use feedline::pack::Tokens;
use feedline::{Array, Batch, BatchField};

use crate::error::PipelineError;

fn config(e: String) -> PipelineError {
    PipelineError::config(e)
}

/// The token field `name` of `batch` and its offsets, checked: offsets
/// layout, `i32` or `i64` values.
pub(crate) fn token_field<'b>(
    batch: &'b Batch,
    name: &str,
) -> Result<(&'b BatchField, &'b [usize]), PipelineError> {
    let field = batch.field(name)?;
    let offsets = field.offsets.as_deref().ok_or_else(|| {
        config(format!(
            "packing: field `{name}` is not laid out as offsets"
        ))
    })?;
    if !matches!(field.data, Array::I32(_) | Array::I64(_)) {
        return Err(config(format!(
            "packing: field `{name}` is {}, expected i32 or i64 token ids",
            field.data.dtype()
        )));
    }
    Ok((field, offsets))
}

/// Document `i`'s token ids in `field` (of [`token_field`]).
pub(crate) fn doc_tokens<'b>(
    field: &'b BatchField,
    offsets: &[usize],
    name: &str,
    i: usize,
) -> Result<Tokens<'b>, PipelineError> {
    let strided = || {
        config(format!(
            "packing: field `{name}` is not a contiguous list of token ids within its offsets (a batch map made it so?)"
        ))
    };
    let (s, e) = match (offsets.get(i), offsets.get(i + 1)) {
        (Some(&s), Some(&e)) => (s, e),
        _ => return Err(strided()),
    };
    match &field.data {
        Array::I32(a) => Ok(Tokens::I32(
            a.as_slice()
                .ok_or_else(strided)?
                .get(s..e)
                .ok_or_else(strided)?,
        )),
        Array::I64(a) => Ok(Tokens::I64(
            a.as_slice()
                .ok_or_else(strided)?
                .get(s..e)
                .ok_or_else(strided)?,
        )),
        other => Err(config(format!(
            "packing: field `{name}` is {}, expected i32 or i64 token ids",
            other.dtype()
        ))),
    }
}
