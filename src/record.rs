//! Records and instances: a [`Record`] is what a format reads (named
//! [`Tensor`]s in the file's own kinds, with its [`Location`]); an
//! [`Instance`] is one record conformed to a [`Schema`] (one [`Values`] per
//! field, in schema order, with its [`Origin`]). Conforming a record checks
//! each field's presence, element type and shape.

use crate::error::{Error, Result};
use crate::provenance::{Location, Origin};
use crate::schema::{check_elements, check_shape, shape_string, DType, Dim, Field, Schema};
use crate::values::{Tensor, Values};

/// One record as a format reads it: named values in the file's own kinds.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Fields in the format's order (sort them for a stable view).
    pub fields: Vec<(String, Tensor)>,
    /// Where the record is.
    pub location: Location,
}

impl Record {
    /// The field named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// [`to_json`](Self::to_json)'s text, written to `out` as it is made:
    /// serde writes each element straight to `out`, so the memory used is
    /// a few bytes, not a JSON value of 32 bytes per element (a decoded
    /// 12000² image is 432 million elements). No newline is written.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        use serde::ser::{SerializeMap, Serializer};
        let mut fields: Vec<&(String, Tensor)> = self.fields.iter().collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        // to_json's object keeps the last of equal keys: keep that one.
        fields.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                *earlier = *later;
                true
            } else {
                false
            }
        });
        let mut ser = serde_json::Serializer::new(out);
        let mut map = ser.serialize_map(Some(fields.len())).map_err(io_error)?;
        for (name, t) in fields {
            map.serialize_entry(name, &crate::values::StreamedValues(&t.values))
                .map_err(io_error)?;
        }
        map.end().map_err(io_error)
    }

    /// The record as one JSON object, keys sorted, every value an array.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        let mut fields: Vec<&(String, Tensor)> = self.fields.iter().collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, t) in fields {
            map.insert(name.clone(), serde_json::Value::Array(t.values.to_json()));
        }
        serde_json::Value::Object(map)
    }
}

/// A serde_json error as the I/O error under it (or one of its own).
fn io_error(e: serde_json::Error) -> std::io::Error {
    std::io::Error::from(e)
}

/// One instance conformed to a schema: a [`Values`] per field, in schema order.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    schema: Schema,
    values: Vec<Values>,
    origin: Origin,
}

impl Instance {
    /// An instance from values in schema order, checked against the schema.
    pub fn new(schema: &Schema, values: Vec<Values>, origin: Origin) -> Result<Self> {
        if values.len() != schema.len() {
            return Err(Error::Schema(format!(
                "{}: {} values given for a schema of {} fields",
                origin.location(),
                values.len(),
                schema.len()
            )));
        }
        for (f, v) in schema.fields().iter().zip(&values) {
            if v.dtype() != f.dtype {
                return Err(field_error(
                    origin.location(),
                    f,
                    format!("{} elements of {}", v.len(), v.dtype()),
                ));
            }
            check_elements(f, v.len()).map_err(|actual| {
                field_error(origin.location(), f, format!("{actual} of {}", v.dtype()))
            })?;
        }
        Ok(Instance {
            schema: schema.clone(),
            values,
            origin,
        })
    }

    /// An instance from values already checked against `schema` (a row of a
    /// chunk of that schema).
    pub(crate) fn from_checked(schema: &Schema, values: Vec<Values>, origin: Origin) -> Self {
        Instance {
            schema: schema.clone(),
            values,
            origin,
        }
    }

    /// Conform a record to `schema`: every field must be present (ragged ones
    /// may be missing: empty), convertible and of the declared shape.
    pub fn from_record(record: &Record, schema: &Schema) -> Result<Self> {
        let mut values = Vec::with_capacity(schema.len());
        for f in schema.fields() {
            let mut out = Values::new(f.dtype);
            conform_field(record, f, &mut out)?;
            values.push(out);
        }
        Ok(Instance {
            schema: schema.clone(),
            values,
            origin: Origin::new(record.location.source, record.location.record),
        })
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Values in schema order.
    pub fn values(&self) -> &[Values] {
        &self.values
    }

    /// The values of field `name`.
    pub fn get(&self, name: &str) -> Result<&Values> {
        let i = self
            .schema
            .index_of(name)
            .ok_or_else(|| self.schema.no_such_field(name))?;
        Ok(&self.values[i])
    }

    /// Where the instance came from.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Payload bytes.
    pub fn payload_bytes(&self) -> usize {
        self.values.iter().map(Values::payload_bytes).sum()
    }

    /// Take the values out.
    pub fn into_values(self) -> Vec<Values> {
        self.values
    }

    /// As a JSON object (keys sorted, values arrays), like `feedline cat`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        let mut order: Vec<usize> = (0..self.schema.len()).collect();
        order.sort_by(|&a, &b| {
            self.schema.fields()[a]
                .name
                .cmp(&self.schema.fields()[b].name)
        });
        for i in order {
            map.insert(
                self.schema.fields()[i].name.clone(),
                serde_json::Value::Array(self.values[i].to_json()),
            );
        }
        serde_json::Value::Object(map)
    }
}

pub(crate) fn field_error(location: Location, f: &Field, actual: String) -> Error {
    Error::Field {
        location,
        field: f.name.clone(),
        expected: f.describe(),
        actual,
    }
}

/// Append record's field `f`, converted, to `out`; check its shape.
pub(crate) fn conform_field(record: &Record, f: &Field, out: &mut Values) -> Result<()> {
    let before = out.len();
    let Some(t) = record.get(&f.name) else {
        if f.is_ragged() {
            return Ok(());
        }
        return Err(field_error(
            record.location.clone(),
            f,
            "no such field in the record".into(),
        ));
    };
    let fail = |actual: String| field_error(record.location.clone(), f, actual);
    if t.values.is_empty() {
        // Nothing to convert or to take in another order: an empty value
        // fits any dtype and shape; only its element count (0) is checked.
        check_elements(f, 0).map_err(|actual| {
            fail(format!(
                "{actual} (shape {:?}) of {}",
                t.shape,
                t.values.dtype()
            ))
        })?;
        return Ok(());
    }
    // Byte strings decoded into `u8` have a shape in strings, not bytes.
    if !(t.values.dtype() == DType::Bytes && f.dtype == DType::U8) {
        check_shape(f, &t.shape, t.values.dtype()).map_err(fail)?;
    }
    if !t.values.convertible_to(f.dtype) {
        let dims: Vec<Dim> = t.shape.iter().map(|&d| Dim::Fixed(d)).collect();
        return Err(fail(format!(
            "{} {}",
            shape_string(&dims),
            t.values.dtype()
        )));
    }
    let n = t.values.converted_len(f.dtype);
    check_elements(f, n).map_err(|actual| {
        fail(format!(
            "{actual} (shape {:?}) of {}",
            t.shape,
            t.values.dtype()
        ))
    })?;
    t.values.append_converted(out).map_err(|e| {
        out.truncate(before);
        fail(e)
    })
}
