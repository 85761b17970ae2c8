//! The schema: named fields, each with an element type and a shape whose
//! leading dimension may be variable (ragged).
//!
//! A schema is declared with [`Schema::builder`], read from JSON or TOML
//! ([`Schema::from_json`], [`Schema::from_toml`]), or inferred from the first
//! records of a file ([`Schema::infer`]). A record that does not fit an
//! inferred shape gets its error explained here
//! ([`Error::explain_inferred`]): the error type itself knows no schema.
//!
//! ```
//! use feedline::{DType, Ragged, Schema};
//! let schema = Schema::builder()
//!     .field("x", DType::F32, [64])
//!     .field("y", DType::I64, [1])
//!     .ragged("tokens", DType::I64, Ragged::Offsets)
//!     .build()
//!     .unwrap();
//! assert_eq!(schema.len(), 3);
//! let toml = r#"
//! [[fields]]
//! name = "x"
//! dtype = "f32"
//! shape = [64]
//! [[fields]]
//! name = "tokens"
//! dtype = "i64"
//! shape = [-1]
//! ragged = "padded"
//! "#;
//! # #[cfg(feature = "toml")] {
//! let s2 = Schema::from_toml(toml).unwrap();
//! assert!(s2.field("tokens").unwrap().is_ragged());
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// Element type of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 64-bit signed integer.
    I64,
    /// 32-bit signed integer.
    I32,
    /// Unsigned byte (e.g. raw pixels: a `bytes` feature decodes into it).
    U8,
    /// Boolean.
    Bool,
    /// Byte strings: each element is a whole `Vec<u8>`.
    Bytes,
}

impl DType {
    /// Size of one element in bytes (`Bytes`: the size of its offset).
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 | DType::Bool => 1,
            DType::Bytes => std::mem::size_of::<usize>(),
        }
    }

    /// Lower-case name, as in schemas (`"f32"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::Bytes => "bytes",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of a field's shape: fixed, or variable (only the leading one).
///
/// Serialized as a non-negative integer, or `-1` for variable (also accepted:
/// `null`, `"?"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed extent.
    Fixed(usize),
    /// A variable extent (ragged), allowed only as the leading dimension.
    Var,
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Var => f.write_str("?"),
        }
    }
}

impl Serialize for Dim {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Dim::Fixed(n) => s.serialize_u64(*n as u64),
            Dim::Var => s.serialize_i64(-1),
        }
    }
}

impl<'de> Deserialize<'de> for Dim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Str(String),
            Null(()),
        }
        match Option::<Raw>::deserialize(d)? {
            None | Some(Raw::Null(())) => Ok(Dim::Var),
            Some(Raw::Int(-1)) => Ok(Dim::Var),
            Some(Raw::Int(n)) if n >= 0 => Ok(Dim::Fixed(n as usize)),
            Some(Raw::Str(s)) if s == "?" || s == "-1" => Ok(Dim::Var),
            Some(Raw::Int(n)) => Err(serde::de::Error::custom(format!(
                "dimension {n}: expected a non-negative integer or -1 (variable)"
            ))),
            Some(Raw::Str(s)) => Err(serde::de::Error::custom(format!(
                "dimension {s:?}: expected a non-negative integer or -1 (variable)"
            ))),
        }
    }
}

/// How a ragged (variable-length) field is laid out in a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ragged {
    /// Values of all instances concatenated, plus `batch + 1` offsets (Paddle's LoD).
    #[default]
    Offsets,
    /// `[batch, max_len, …]` padded with zeros, plus the length of each instance.
    Padded,
}

/// A named field of the schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Field {
    /// The field's name (a feature name, an npz array name, a column…).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape of one instance's value; `[]` is a scalar. Only the first
    /// dimension may be [`Dim::Var`].
    pub shape: Vec<Dim>,
    /// Layout of a ragged field in a batch (ignored for fixed shapes).
    #[serde(default)]
    pub ragged: Ragged,
}

impl Field {
    /// A field of fixed shape.
    pub fn new(
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoIterator<Item = usize>,
    ) -> Self {
        Field {
            name: name.into(),
            dtype,
            shape: shape.into_iter().map(Dim::Fixed).collect(),
            ragged: Ragged::Offsets,
        }
    }

    /// True if the leading dimension is variable.
    pub fn is_ragged(&self) -> bool {
        matches!(self.shape.first(), Some(Dim::Var))
    }

    /// Number of elements per unit of the leading dimension for a ragged
    /// field (product of the trailing dims), or per instance for a fixed one.
    pub fn unit_elements(&self) -> usize {
        let dims = if self.is_ragged() {
            &self.shape[1..]
        } else {
            &self.shape[..]
        };
        dims.iter()
            .map(|d| match d {
                Dim::Fixed(n) => *n,
                Dim::Var => 1,
            })
            .product()
    }

    /// Number of elements of one instance, for a fixed shape.
    pub fn fixed_elements(&self) -> Option<usize> {
        (!self.is_ragged()).then(|| self.unit_elements())
    }

    /// The trailing fixed dims (after a variable leading dim), or all dims.
    pub fn fixed_dims(&self) -> Vec<usize> {
        self.shape
            .iter()
            .filter_map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                Dim::Var => None,
            })
            .collect()
    }

    /// The shape as text, e.g. `[?, 3] f32`.
    pub fn describe(&self) -> String {
        format!("{} {}", shape_string(&self.shape), self.dtype)
    }
}

pub(crate) fn shape_string(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// The named fields every instance has. Cheap to clone (shared).
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    inner: Arc<SchemaInner>,
}

#[derive(Debug)]
struct SchemaInner {
    fields: Vec<Field>,
    index: BTreeMap<String, usize>,
    /// Where an inferred schema was inferred from (for messages); not part
    /// of equality.
    inferred_from: Option<String>,
}

impl PartialEq for SchemaInner {
    fn eq(&self, other: &Self) -> bool {
        self.fields == other.fields
    }
}

#[derive(Serialize, Deserialize)]
struct SchemaDoc {
    fields: Vec<Field>,
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        SchemaDoc {
            fields: self.inner.fields.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let doc = SchemaDoc::deserialize(d)?;
        Schema::new(doc.fields).map_err(serde::de::Error::custom)
    }
}

impl Schema {
    /// A schema of these fields; names must be unique, only leading dims variable.
    pub fn new(fields: Vec<Field>) -> Result<Self> {
        let mut index = BTreeMap::new();
        for (i, f) in fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(Error::Schema(format!("field {i} has an empty name")));
            }
            if index.insert(f.name.clone(), i).is_some() {
                return Err(Error::Schema(format!(
                    "field `{}` is declared twice",
                    f.name
                )));
            }
            if f.shape.iter().skip(1).any(|d| *d == Dim::Var) {
                return Err(Error::Schema(format!(
                    "field `{}`: shape {}: only the leading dimension may be variable",
                    f.name,
                    shape_string(&f.shape)
                )));
            }
        }
        if fields.is_empty() {
            return Err(Error::Schema("a schema needs at least one field".into()));
        }
        Ok(Schema {
            inner: Arc::new(SchemaInner {
                fields,
                index,
                inferred_from: None,
            }),
        })
    }

    /// The same schema, noted as inferred from `what` (e.g. "the first 64
    /// records of data/a.tfrecord"): a record that does not fit one of its
    /// fixed shapes is then an error that says the shape was inferred
    /// ([`Error::explain_inferred`]).
    pub fn inferred_from(self, what: impl Into<String>) -> Schema {
        Schema {
            inner: Arc::new(SchemaInner {
                fields: self.inner.fields.clone(),
                index: self.inner.index.clone(),
                inferred_from: Some(what.into()),
            }),
        }
    }

    /// Where this schema was inferred from, if it was.
    pub fn inferred_source(&self) -> Option<&str> {
        self.inner.inferred_from.as_deref()
    }

    /// Start declaring a schema.
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder { fields: Vec::new() }
    }

    /// Parse `{"fields": [{"name": …, "dtype": …, "shape": […], "ragged": …}]}`.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Schema(format!("JSON schema: {e}")))
    }

    /// Parse the TOML form (`[[fields]]` tables; the `toml` feature).
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::Schema(format!("TOML schema: {e}")))
    }

    /// Read a schema file: `.toml` as TOML, anything else as JSON.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        if path.extension().is_some_and(|e| e == "toml") {
            #[cfg(feature = "toml")]
            return Self::from_toml(&text);
            #[cfg(not(feature = "toml"))]
            return Err(Error::not_compiled_in(
                path.display().to_string(),
                crate::error::Feature::Toml,
            ));
        } else {
            Self::from_json(&text)
        }
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a schema always serializes")
    }

    /// The fields, in declaration order.
    pub fn fields(&self) -> &[Field] {
        &self.inner.fields
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.inner.fields.len()
    }

    /// Never true for a valid schema; here for completeness.
    pub fn is_empty(&self) -> bool {
        self.inner.fields.is_empty()
    }

    /// Index of the field named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.inner.index.get(name).copied()
    }

    /// The field named `name`, or an error listing the fields there are.
    pub fn field(&self, name: &str) -> Result<&Field> {
        self.index_of(name)
            .map(|i| &self.inner.fields[i])
            .ok_or_else(|| self.no_such_field(name))
    }

    /// The field names in order, comma-separated (for messages).
    pub fn field_names(&self) -> String {
        let names: Vec<&str> = self.inner.fields.iter().map(|f| f.name.as_str()).collect();
        names.join(", ")
    }

    pub(crate) fn no_such_field(&self, name: &str) -> Error {
        Error::Schema(format!(
            "no field named `{name}` (fields: {})",
            self.field_names()
        ))
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .fields()
            .iter()
            .map(|x| format!("{}: {}", x.name, x.describe()))
            .collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

/// Declares a [`Schema`] field by field.
#[derive(Debug)]
pub struct SchemaBuilder {
    fields: Vec<Field>,
}

impl SchemaBuilder {
    /// A field of fixed shape (`[]` for a scalar).
    pub fn field(
        mut self,
        name: &str,
        dtype: DType,
        shape: impl IntoIterator<Item = usize>,
    ) -> Self {
        self.fields.push(Field::new(name, dtype, shape));
        self
    }

    /// A variable-length list of `dtype` elements, laid out as `ragged` says.
    pub fn ragged(self, name: &str, dtype: DType, ragged: Ragged) -> Self {
        self.ragged_with_dims(name, dtype, [], ragged)
    }

    /// A ragged field whose units have trailing fixed dims: shape `[?, dims…]`.
    pub fn ragged_with_dims(
        mut self,
        name: &str,
        dtype: DType,
        dims: impl IntoIterator<Item = usize>,
        ragged: Ragged,
    ) -> Self {
        let mut shape = vec![Dim::Var];
        shape.extend(dims.into_iter().map(Dim::Fixed));
        self.fields.push(Field {
            name: name.to_string(),
            dtype,
            shape,
            ragged,
        });
        self
    }

    /// Any field.
    pub fn push(mut self, field: Field) -> Self {
        self.fields.push(field);
        self
    }

    /// The schema, or an error for duplicate names or a misplaced variable dim.
    pub fn build(self) -> Result<Schema> {
        Schema::new(self.fields)
    }
}

/// Checks `values` (with `shape` as the record gave it) against `field`;
/// returns the number of leading units (1 for fixed shapes… the element count
/// divided by the unit size for ragged ones) or a description of the mismatch.
pub(crate) fn check_elements(field: &Field, n: usize) -> std::result::Result<usize, String> {
    let unit = field.unit_elements();
    if field.is_ragged() {
        if unit == 0 {
            return if n == 0 {
                Ok(0)
            } else {
                Err(format!("{n} elements"))
            };
        }
        if n % unit == 0 {
            Ok(n / unit)
        } else {
            Err(format!("{n} elements (not a multiple of {unit})"))
        }
    } else if n == unit {
        Ok(1)
    } else {
        Err(format!("{n} elements"))
    }
}

/// Checks a value's own shape — the shape its file gives it — against
/// `field`: a shape of rank 2 or more (an NPY row, a nested JSON array)
/// must be the field's dimensions exactly (a ragged field's leading one
/// matches any length), or its elements would be taken in another order
/// than the file's (`[3, 32, 32]` read as `[32, 32, 3]`). A scalar or a
/// flat list (rank 0 or 1: what TFRecord and CSV give, or a 1-D row) has no
/// axes to mix up and is only checked by its element count
/// ([`check_elements`]), and so is an empty value. `Err` is the value's
/// shape and dtype, as text.
pub(crate) fn check_shape(
    field: &Field,
    shape: &[usize],
    dtype: DType,
) -> std::result::Result<(), String> {
    if shape.len() < 2 {
        return Ok(());
    }
    let skip = usize::from(field.is_ragged());
    let fits = shape.len() == field.shape.len()
        && field.shape[skip..]
            .iter()
            .zip(&shape[skip..])
            .all(|(d, &n)| *d == Dim::Fixed(n));
    if fits {
        Ok(())
    } else {
        let dims: Vec<Dim> = shape.iter().map(|&d| Dim::Fixed(d)).collect();
        Err(format!("shape {} {dtype}", shape_string(&dims)))
    }
}

impl Schema {
    /// True if both are the same schema (shared, or equal field by field).
    pub fn same(&self, other: &Schema) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) || self.inner == other.inner
    }
}

/// What a shape error says when the shape was inferred: written here, with
/// the schema that knows where it was inferred from, so that the error type
/// (below every module) does not know schemas.
impl Error {
    /// Say so when a record does not fit a shape that was inferred, not
    /// declared: a [`Field`](Error::Field) error about a fixed-shape field
    /// of an [inferred](Schema::inferred_from) `schema` gets, in its
    /// `expected`, where the shape was inferred from and how to declare the
    /// field variable. Other errors are returned as they are.
    ///
    /// ```
    /// use feedline::{Error, Location, Record, Schema, SourceId, Tensor, Values};
    /// let rec = |n: usize| Record {
    ///     location: Location::new(SourceId::intern("tokens.jsonl"), n as u64, None),
    ///     fields: vec![("tokens".to_string(), Tensor::vector(Values::I64(vec![1; n])))],
    /// };
    /// let schema = Schema::infer(&[rec(3), rec(3)])?.inferred_from("the first 2 records of tokens.jsonl");
    /// let mut chunk = feedline::Chunk::new(&schema);
    /// let e = chunk.push_record(&rec(5)).unwrap_err().explain_inferred(&schema);
    /// assert!(e.to_string().contains("inferred from the first 2 records of tokens.jsonl"), "{e}");
    /// assert!(e.to_string().contains("declare it variable"), "{e}");
    /// # Ok::<(), feedline::Error>(())
    /// ```
    pub fn explain_inferred(self, schema: &Schema) -> Self {
        let Some(source) = schema.inferred_source() else {
            return self;
        };
        match self {
            Error::Field {
                location,
                field,
                expected,
                actual,
            } if schema
                .field(&field)
                .is_ok_and(|f| !f.is_ragged() && !f.shape.is_empty()) =>
            {
                let expected = format!(
                    "{expected} (a shape inferred from {source}, not declared: if this field's \
                     length varies between records, declare it variable — leading dimension `?` \
                     (Dim::Var, -1 in a schema file) — in the schema given to the loader)"
                );
                Error::Field {
                    location,
                    field,
                    expected,
                    actual,
                }
            }
            other => other,
        }
    }
}
