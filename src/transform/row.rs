//! [`Row`]: one instance of a chunk as a transform reads it — a field's
//! bytes borrowed from the chunk where they are held there (read from the
//! file where the row was left in it), or the whole instance as owned values.

use std::borrow::Cow;

use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::provenance::Origin;
use crate::record::Instance;
use crate::schema::Schema;
use crate::values::Values;

use super::SlotMut;

/// One input instance of a transform.
#[derive(Clone, Copy)]
pub struct Row<'a> {
    chunk: &'a Chunk,
    index: usize,
}

impl<'a> Row<'a> {
    /// Row `index` of `chunk`.
    pub fn new(chunk: &'a Chunk, index: usize) -> Self {
        Row { chunk, index }
    }

    /// Where the instance came from.
    pub fn origin(&self) -> Origin {
        self.chunk.origins()[self.index]
    }

    /// The input schema.
    pub fn schema(&self) -> &'a Schema {
        self.chunk.schema()
    }

    /// The whole instance, as owned values.
    pub fn instance(&self) -> Result<Instance> {
        self.chunk.row(self.index)
    }

    /// The one byte string of field `name` (a `bytes` field of one element,
    /// or a `u8` field): borrowed when the chunk holds it, read from the
    /// file when the row was left there.
    pub fn bytes(&self, name: &str) -> Result<Cow<'a, [u8]>> {
        let schema = self.chunk.schema();
        let fi = schema
            .index_of(name)
            .ok_or_else(|| schema.no_such_field(name))?;
        let column = &self.chunk.columns()[fi];
        if let Some(b) = column.file_row(self.index)? {
            return Ok(Cow::Owned(b));
        }
        let range = column.owned_range(self.index);
        let field = &schema.fields()[fi];
        let wrong = |actual: String| Error::Field {
            location: self.origin().location(),
            field: name.to_string(),
            expected: "one byte string".into(),
            actual,
        };
        match &column.values {
            Values::Bytes(list) if range.len() == 1 => Ok(Cow::Borrowed(list.get(range.start))),
            Values::Bytes(_) => Err(wrong(format!("{} byte strings", range.len()))),
            Values::U8(v) => Ok(Cow::Borrowed(&v[range])),
            _ => Err(wrong(format!("{} ({})", field.describe(), field.dtype))),
        }
    }

    /// The values of field `name`, copied.
    pub fn values(&self, name: &str) -> Result<Values> {
        let schema = self.chunk.schema();
        let fi = schema
            .index_of(name)
            .ok_or_else(|| schema.no_such_field(name))?;
        self.chunk.columns()[fi].row_values(self.index)
    }

    /// Copy field `name` into `slot` (same dtype and element count: a
    /// field passed through unchanged).
    pub fn copy_into(&self, name: &str, slot: &mut SlotMut<'_>) -> Result<()> {
        let schema = self.chunk.schema();
        let fi = schema
            .index_of(name)
            .ok_or_else(|| schema.no_such_field(name))?;
        let column = &self.chunk.columns()[fi];
        let expected = format!("{} elements of {}", slot.len(), slot.dtype());
        let fail = |actual: String| Error::Field {
            location: self.origin().location(),
            field: name.to_string(),
            expected,
            actual,
        };
        if column.range(self.index).len() == column.owned_range(self.index).len() {
            slot.copy_from(&column.values, column.owned_range(self.index))
                .map_err(fail)
        } else {
            let v = column.row_values(self.index)?;
            let n = v.len();
            slot.copy_from(&v, 0..n).map_err(fail)
        }
    }
}
