//! [`Batch`]: one contiguous `ndarray` per field for many instances, with
//! offsets (Paddle's LoD) or padding and lengths for ragged fields, and the
//! provenance of every instance.
//!
//! ```
//! use feedline::{collate, Chunk, DType, Instance, Origin, Schema, SourceId, Values};
//! let schema = Schema::builder().field("x", DType::F32, [2]).build().unwrap();
//! let mut chunk = Chunk::new(&schema);
//! for i in 0..3 {
//!     let origin = Origin::new(SourceId::intern("mem"), i);
//!     let inst = Instance::new(&schema, vec![Values::F32(vec![i as f32, 0.5])], origin).unwrap();
//!     chunk.push_instance(&inst);
//! }
//! let batch = collate(&schema, (0..3).map(|i| (&chunk, i))).unwrap();
//! let x = batch.f32("x").unwrap();
//! assert_eq!(x.shape(), &[3, 2]);
//! assert_eq!(x[[2, 0]], 2.0);
//! assert!(batch.i64("x").is_err()); // wrong type: a clear error
//! ```

use ndarray::{ArrayD, ArrayViewD};

use crate::error::{Error, Result};
use crate::instance::{BytesList, Origin};
use crate::schema::{DType, Schema};

/// The data of one field in a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// f32 data.
    F32(ArrayD<f32>),
    /// f64 data.
    F64(ArrayD<f64>),
    /// i64 data.
    I64(ArrayD<i64>),
    /// i32 data.
    I32(ArrayD<i32>),
    /// u8 data.
    U8(ArrayD<u8>),
    /// bool data.
    Bool(ArrayD<bool>),
    /// Byte strings (not an ndarray: each element has its own length).
    Bytes(BytesList),
}

impl Array {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Array::F32(_) => DType::F32,
            Array::F64(_) => DType::F64,
            Array::I64(_) => DType::I64,
            Array::I32(_) => DType::I32,
            Array::U8(_) => DType::U8,
            Array::Bool(_) => DType::Bool,
            Array::Bytes(_) => DType::Bytes,
        }
    }

    /// The shape (for bytes: the number of byte strings).
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Array::F32(a) => a.shape().to_vec(),
            Array::F64(a) => a.shape().to_vec(),
            Array::I64(a) => a.shape().to_vec(),
            Array::I32(a) => a.shape().to_vec(),
            Array::U8(a) => a.shape().to_vec(),
            Array::Bool(a) => a.shape().to_vec(),
            Array::Bytes(b) => vec![b.len()],
        }
    }

    /// Payload bytes.
    pub fn payload_bytes(&self) -> usize {
        match self {
            Array::Bytes(b) => b.data().len(),
            a => a.shape().iter().product::<usize>() * a.dtype().size(),
        }
    }
}

/// One field of a batch: its data and, for ragged fields, where each instance is.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchField {
    /// `[batch, dims…]` for fixed shapes; `[total, dims…]` (values
    /// concatenated) for ragged fields laid out as offsets; `[batch, max_len,
    /// dims…]` for ragged fields laid out padded.
    pub data: Array,
    /// Ragged, offsets layout: `batch + 1` offsets into the leading dim of `data`.
    pub offsets: Option<Vec<usize>>,
    /// Ragged, padded layout: each instance's length before padding.
    pub lengths: Option<Vec<usize>>,
}

/// A batch of instances: one [`BatchField`] per schema field, plus provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub(crate) schema: Schema,
    pub(crate) fields: Vec<BatchField>,
    pub(crate) origins: Vec<Origin>,
}

macro_rules! typed_view {
    ($(#[$doc:meta] $fn:ident, $variant:ident, $t:ty;)*) => {$(
        #[$doc]
        pub fn $fn(&self, name: &str) -> Result<ArrayViewD<'_, $t>> {
            match &self.field(name)?.data {
                Array::$variant(a) => Ok(a.view()),
                other => Err(self.wrong_type(name, DType::$variant, other.dtype())),
            }
        }
    )*};
}

impl Batch {
    /// Assemble a batch from its parts (as collation or a user's own code
    /// does); checks that there is one field per schema field of the right
    /// type and that every field covers `origins.len()` instances.
    pub fn from_parts(
        schema: &Schema,
        fields: Vec<BatchField>,
        origins: Vec<Origin>,
    ) -> Result<Self> {
        if fields.len() != schema.len() {
            return Err(Error::Schema(format!(
                "batch has {} fields, schema {}",
                fields.len(),
                schema.len()
            )));
        }
        let n = origins.len();
        for (f, bf) in schema.fields().iter().zip(&fields) {
            if bf.data.dtype() != f.dtype {
                return Err(Error::Schema(format!(
                    "batch field `{}` is {}, schema says {}",
                    f.name,
                    bf.data.dtype(),
                    f.dtype
                )));
            }
            let rows = if let Some(o) = &bf.offsets {
                o.len().saturating_sub(1)
            } else if let Some(l) = &bf.lengths {
                l.len()
            } else if f.dtype == DType::Bytes {
                bf.data.shape()[0] / f.unit_elements().max(1)
            } else {
                bf.data.shape().first().copied().unwrap_or(0)
            };
            if rows != n && !(f.dtype == DType::Bytes && f.unit_elements() == 0) {
                return Err(Error::Schema(format!(
                    "batch field `{}` covers {rows} instances, expected {n}",
                    f.name
                )));
            }
        }
        Ok(Batch {
            schema: schema.clone(),
            fields,
            origins,
        })
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    /// True for a batch of no instances.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Where each instance came from, in batch order.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// All fields, in schema order.
    pub fn fields(&self) -> &[BatchField] {
        &self.fields
    }

    /// The field named `name`, or an error listing the fields there are.
    pub fn field(&self, name: &str) -> Result<&BatchField> {
        let i = self
            .schema
            .index_of(name)
            .ok_or_else(|| self.schema.no_such_field(name))?;
        Ok(&self.fields[i])
    }

    fn wrong_type(&self, name: &str, asked: DType, is: DType) -> Error {
        Error::Schema(format!("field `{name}` is {is}, not {asked}"))
    }

    typed_view! {
        /// The f32 field `name` as a view (error: no such field, or not f32).
        f32, F32, f32;
        /// The f64 field `name` as a view.
        f64, F64, f64;
        /// The i64 field `name` as a view.
        i64, I64, i64;
        /// The i32 field `name` as a view.
        i32, I32, i32;
        /// The u8 field `name` as a view.
        u8, U8, u8;
        /// The bool field `name` as a view.
        bool, Bool, bool;
    }

    /// The bytes field `name`.
    pub fn bytes(&self, name: &str) -> Result<&BytesList> {
        match &self.field(name)?.data {
            Array::Bytes(b) => Ok(b),
            other => Err(self.wrong_type(name, DType::Bytes, other.dtype())),
        }
    }

    /// Offsets (LoD) of the ragged field `name`; `None` if it is not laid out so.
    pub fn offsets(&self, name: &str) -> Result<Option<&[usize]>> {
        Ok(self.field(name)?.offsets.as_deref())
    }

    /// Lengths of the padded ragged field `name`; `None` if it is not padded.
    pub fn lengths(&self, name: &str) -> Result<Option<&[usize]>> {
        Ok(self.field(name)?.lengths.as_deref())
    }

    /// Payload bytes of all fields.
    pub fn payload_bytes(&self) -> usize {
        self.fields.iter().map(|f| f.data.payload_bytes()).sum()
    }
}
