//! Schema inference: a [`Schema`] guessed from sample [`Record`]s (what
//! `feedline inspect` shows and what a loader without a schema file uses).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::record::Record;
use crate::schema::{DType, Dim, Field, Ragged, Schema};

impl Schema {
    /// Infer a schema from sample records: each field's type from its kind,
    /// a fixed shape where every sample had the same shape, otherwise a
    /// ragged leading dimension (a field missing from some records is ragged).
    pub fn infer<'a>(records: impl IntoIterator<Item = &'a Record>) -> Result<Self> {
        struct Seen {
            dtype: DType,
            shape: Vec<usize>,
            fixed: bool,
            count: usize,
            /// Every value so far was empty: the dtype is a placeholder.
            empty_only: bool,
        }
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        let mut n = 0usize;
        for rec in records {
            n += 1;
            for (name, t) in &rec.fields {
                // An empty value says nothing of the field's type.
                let dtype = if t.values.is_empty() {
                    seen.get(name).map_or(t.values.dtype(), |s| s.dtype)
                } else {
                    t.values.dtype()
                };
                match seen.get_mut(name) {
                    None => {
                        seen.insert(
                            name.clone(),
                            Seen {
                                dtype,
                                shape: t.shape.clone(),
                                fixed: true,
                                count: 1,
                                empty_only: t.values.is_empty(),
                            },
                        );
                    }
                    Some(s) => {
                        s.count += 1;
                        if s.empty_only && !t.values.is_empty() {
                            s.dtype = dtype;
                            s.empty_only = false;
                        }
                        s.dtype = widen(s.dtype, dtype).ok_or_else(|| {
                            Error::Schema(format!(
                                "cannot infer field `{name}`: it is {} in one record and {dtype} in another",
                                s.dtype
                            ))
                        })?;
                        if s.shape != t.shape {
                            s.fixed = false;
                            if s.shape.len() != t.shape.len()
                                || s.shape[1.min(s.shape.len())..]
                                    != t.shape[1.min(t.shape.len())..]
                            {
                                // Different ranks or trailing dims: fall back to a flat list.
                                s.shape = vec![0];
                            }
                        }
                    }
                }
            }
        }
        if n == 0 {
            return Err(Error::Schema(
                "cannot infer a schema from no records".into(),
            ));
        }
        let fields = seen
            .into_iter()
            .map(|(name, s)| {
                let shape = if s.fixed && s.count == n {
                    s.shape.into_iter().map(Dim::Fixed).collect()
                } else {
                    let mut v = vec![Dim::Var];
                    v.extend(s.shape.iter().skip(1).map(|d| Dim::Fixed(*d)));
                    v
                };
                Field {
                    name,
                    dtype: s.dtype,
                    shape,
                    ragged: Ragged::Offsets,
                }
            })
            .collect();
        Schema::new(fields)
    }
}

fn widen(a: DType, b: DType) -> Option<DType> {
    use DType::*;
    Some(match (a, b) {
        (x, y) if x == y => x,
        (F32, F64) | (F64, F32) | (F64, I64) | (I64, F64) => F64,
        (F32, I64) | (I64, F32) => F32,
        _ => return None,
    })
}
