//! [`OutRow`]: one row of a batch being assembled, as typed mutable slices
//! of the batch's own buffers (one per output field, all of fixed shape):
//! a map that writes there makes no per-instance copy.

use crate::schema::{DType, Schema};
use crate::values::Values;

/// One field's place in its batch row.
pub enum SlotMut<'a> {
    /// f32 elements.
    F32(&'a mut [f32]),
    /// f64 elements.
    F64(&'a mut [f64]),
    /// i64 elements.
    I64(&'a mut [i64]),
    /// i32 elements.
    I32(&'a mut [i32]),
    /// u8 elements.
    U8(&'a mut [u8]),
    /// bool elements.
    Bool(&'a mut [bool]),
}

impl SlotMut<'_> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            SlotMut::F32(_) => DType::F32,
            SlotMut::F64(_) => DType::F64,
            SlotMut::I64(_) => DType::I64,
            SlotMut::I32(_) => DType::I32,
            SlotMut::U8(_) => DType::U8,
            SlotMut::Bool(_) => DType::Bool,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            SlotMut::F32(s) => s.len(),
            SlotMut::F64(s) => s.len(),
            SlotMut::I64(s) => s.len(),
            SlotMut::I32(s) => s.len(),
            SlotMut::U8(s) => s.len(),
            SlotMut::Bool(s) => s.len(),
        }
    }

    /// True for a slot of no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copy `values[range]` in (same dtype and length, else what was found).
    pub fn copy_from(
        &mut self,
        values: &Values,
        range: std::ops::Range<usize>,
    ) -> Result<(), String> {
        if range.len() != self.len() {
            return Err(format!(
                "{} elements, the slot holds {}",
                range.len(),
                self.len()
            ));
        }
        match (self, values) {
            (SlotMut::F32(d), Values::F32(s)) => d.copy_from_slice(&s[range]),
            (SlotMut::F64(d), Values::F64(s)) => d.copy_from_slice(&s[range]),
            (SlotMut::I64(d), Values::I64(s)) => d.copy_from_slice(&s[range]),
            (SlotMut::I32(d), Values::I32(s)) => d.copy_from_slice(&s[range]),
            (SlotMut::U8(d), Values::U8(s)) => d.copy_from_slice(&s[range]),
            (SlotMut::Bool(d), Values::Bool(s)) => d.copy_from_slice(&s[range]),
            (d, s) => return Err(format!("{} values for a slot of {}", s.dtype(), d.dtype())),
        }
        Ok(())
    }
}

/// The output row of one instance: a slot per output field.
pub struct OutRow<'a> {
    schema: &'a Schema,
    slots: Vec<SlotMut<'a>>,
    written: Vec<bool>,
}

impl<'a> OutRow<'a> {
    pub(crate) fn new(schema: &'a Schema, slots: Vec<SlotMut<'a>>) -> Self {
        let written = vec![false; slots.len()];
        OutRow {
            schema,
            slots,
            written,
        }
    }

    /// The output schema.
    pub fn schema(&self) -> &Schema {
        self.schema
    }

    /// The slot of field `name` (marked written: the map fills it whole).
    pub fn slot(&mut self, name: &str) -> Option<&mut SlotMut<'a>> {
        let i = self.schema.index_of(name)?;
        self.written[i] = true;
        Some(&mut self.slots[i])
    }

    /// The first output field not written, if any.
    pub(crate) fn unwritten(&self) -> Option<&str> {
        let i = self.written.iter().position(|w| !w)?;
        Some(&self.schema.fields()[i].name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_checks_type_and_length() {
        let mut buf = [0f32; 3];
        let mut slot = SlotMut::F32(&mut buf);
        assert_eq!(
            slot.copy_from(&Values::F32(vec![1.0, 2.0, 3.0, 4.0]), 1..4),
            Ok(())
        );
        assert!(slot
            .copy_from(&Values::F32(vec![1.0]), 0..1)
            .unwrap_err()
            .contains("1 elements, the slot holds 3"));
        assert!(slot
            .copy_from(&Values::I64(vec![1, 2, 3]), 0..3)
            .unwrap_err()
            .contains("i64 values for a slot of f32"));
        assert_eq!(buf, [2.0, 3.0, 4.0]);
    }

    #[test]
    fn unwritten_fields_are_named() {
        let schema = Schema::builder()
            .field("a", DType::U8, [2])
            .field("b", DType::U8, [1])
            .build()
            .unwrap();
        let (mut a, mut b) = ([0u8; 2], [0u8; 1]);
        let mut row = OutRow::new(&schema, vec![SlotMut::U8(&mut a), SlotMut::U8(&mut b)]);
        assert_eq!(row.unwritten(), Some("a"));
        row.slot("a");
        assert_eq!(row.unwritten(), Some("b"));
        row.slot("b");
        assert_eq!(row.unwritten(), None);
        assert!(row.slot("c").is_none());
    }
}
