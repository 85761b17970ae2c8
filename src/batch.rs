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

use std::sync::Arc;

use ndarray::{ArrayD, ArrayView, ArrayViewD, Dimension, ShapeError};

use crate::error::{Error, Result};
use crate::provenance::{Origin, Segment};
use crate::schema::{DType, Schema};
use crate::values::BytesList;

/// Recycling of large batch buffers: when a [`Batch`] is dropped, its field
/// vectors of at least [`MIN_BYTES`] come back here, and collation takes
/// them for the next batch. Multi-megabyte batch buffers would otherwise be
/// fresh memory every time — the allocator maps them and hands them back to
/// the kernel, and every page is faulted in and zeroed again on the next
/// batch (a third of the CPU time on 150 KB records). At most [`MAX_BYTES`]
/// are held, in at most [`MAX_BUFFERS`] vectors per element type; buffers
/// beyond that are freed as usual.
pub(crate) mod recycle {
    use parking_lot::Mutex;

    /// Vectors smaller than this are left to the allocator.
    pub const MIN_BYTES: usize = 256 << 10;
    /// Bytes of capacity held at most, all element types together.
    pub const MAX_BYTES: usize = 96 << 20;
    /// Vectors held at most per element type.
    pub const MAX_BUFFERS: usize = 8;

    static HELD: Mutex<usize> = Mutex::new(0);

    /// An element type whose vectors are recycled.
    pub trait Recycled: Sized + Send + 'static {
        /// The shelf of this type's vectors.
        fn shelf() -> &'static Mutex<Vec<Vec<Self>>>;
    }

    macro_rules! recycled {
        ($($t:ty),*) => {$(
            impl Recycled for $t {
                fn shelf() -> &'static Mutex<Vec<Vec<Self>>> {
                    static SHELF: Mutex<Vec<Vec<$t>>> = Mutex::new(Vec::new());
                    &SHELF
                }
            }
        )*};
    }
    recycled!(f32, f64, i64, i32, u8, bool);

    fn bytes<T>(v: &Vec<T>) -> usize {
        v.capacity() * std::mem::size_of::<T>()
    }

    /// An empty vector with room for `n` elements: a recycled one if one
    /// fits (at most twice as large; the smallest, and of those the last
    /// given back, whose memory is likeliest still in cache), else a new one.
    pub fn take<T: Recycled>(n: usize) -> Vec<T> {
        if n * std::mem::size_of::<T>() >= MIN_BYTES {
            let mut shelf = T::shelf().lock();
            let best = shelf
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, v)| v.capacity() >= n && v.capacity() <= 2 * n)
                .min_by_key(|(_, v)| v.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                let v = shelf.swap_remove(i);
                drop(shelf);
                *HELD.lock() -= bytes(&v);
                return v;
            }
        }
        Vec::with_capacity(n)
    }

    /// Keep `v`'s allocation for a later [`take`], if it is large and there
    /// is room; else free it.
    pub fn give<T: Recycled>(mut v: Vec<T>) {
        let b = bytes(&v);
        if b < MIN_BYTES {
            return;
        }
        {
            let mut held = HELD.lock();
            if *held + b > MAX_BYTES {
                return;
            }
            *held += b;
        }
        v.clear();
        let mut shelf = T::shelf().lock();
        if shelf.len() < MAX_BUFFERS {
            shelf.push(v);
        } else {
            drop(shelf);
            *HELD.lock() -= b;
        }
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn held() -> usize {
        *HELD.lock()
    }
}

/// The alignment, in bytes, of the data of every numeric field of a batch
/// that collation or a transform makes: its first element starts on a
/// 64-byte boundary — a cache line, what JAX and XLA ask of a buffer they
/// take over through DLPack without a copy, and what SIMD code likes (a
/// field with no elements has no data to align).
/// A [`Batch`] made with [`Batch::from_parts`] from the caller's own arrays,
/// or cloned, has whatever alignment those arrays have.
pub const DATA_ALIGN: usize = 64;

/// Batch buffers that start on a [`DATA_ALIGN`]-byte boundary, behind the
/// usual `ArrayD`: the vector is allocated (or recycled) with room for up
/// to `DATA_ALIGN` bytes more than the data, the data is written from the
/// first aligned element on, and the array views the vector from there
/// (`ArrayD` keeps an offset into its vector). No copy, no other
/// allocator: the vector is freed, or recycled, whole as usual.
pub(crate) mod aligned {
    use std::mem::MaybeUninit;

    use ndarray::{s, ArrayD, IxDyn, ShapeError};

    use super::{recycle, DATA_ALIGN};

    /// A vector being filled whose elements from `start` on are the data,
    /// element `start` on a [`DATA_ALIGN`]-byte boundary.
    #[derive(Debug)]
    pub struct AlignedVec<T> {
        vec: Vec<T>,
        start: usize,
    }

    impl<T: recycle::Recycled + Copy + Default> AlignedVec<T> {
        /// An empty buffer with room for `n` elements, aligned (a recycled
        /// allocation if one fits).
        pub fn with_capacity(n: usize) -> Self {
            let size = std::mem::size_of::<T>();
            // At least one element more, so that there is an allocation
            // (its address, not a dangling one, is what is aligned).
            let mut vec = recycle::take::<T>(n + DATA_ALIGN / size);
            // The address is a multiple of align_of::<T>() == size_of::<T>()
            // for the batch element types, so whole elements reach the boundary.
            let misaligned = vec.as_ptr() as usize % DATA_ALIGN;
            let start = if misaligned == 0 {
                0
            } else {
                (DATA_ALIGN - misaligned) / size
            };
            debug_assert!(start + n <= vec.capacity());
            vec.resize(start, T::default());
            AlignedVec { vec, start }
        }

        /// Elements of data so far.
        pub fn len(&self) -> usize {
            self.vec.len() - self.start
        }

        /// The room after the data (no more than asked for at creation is
        /// ever needed: the vector must not grow, which would move it).
        pub fn spare_capacity_mut(&mut self) -> &mut [MaybeUninit<T>] {
            self.vec.spare_capacity_mut()
        }

        /// Set the length of the data.
        ///
        /// # Safety
        /// As [`Vec::set_len`]: the first `n` data elements are initialised
        /// and fit in the capacity.
        pub unsafe fn set_len(&mut self, n: usize) {
            // SAFETY: the caller's promise, shifted by the initialised pad.
            unsafe { self.vec.set_len(self.start + n) }
        }

        /// `n` data elements, those added set to `value` (within the room
        /// asked for at creation).
        pub fn resize(&mut self, n: usize, value: T) {
            assert!(
                self.start + n <= self.vec.capacity(),
                "an aligned buffer must not grow past its capacity"
            );
            self.vec.resize(self.start + n, value);
        }

        /// The data.
        pub fn as_mut_slice(&mut self) -> &mut [T] {
            &mut self.vec[self.start..]
        }

        /// Keep the first `n` data elements.
        pub fn truncate(&mut self, n: usize) {
            self.vec.truncate(self.start + n);
        }

        /// The data as an array of `shape` (its element count must be the
        /// data's), still aligned: no copy.
        pub fn into_array(self, shape: &[usize]) -> Result<ArrayD<T>, ShapeError> {
            let len = self.vec.len();
            let whole = ArrayD::from_shape_vec(IxDyn(&[len]), self.vec)?;
            whole
                .slice_move(s![self.start..])
                .into_shape_with_order(IxDyn(shape))
        }
    }
}

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
    /// A copy of `data` as an array of `shape` whose first element is on a
    /// [`DATA_ALIGN`]-byte boundary, in a recycled batch buffer when one
    /// fits: for a batch assembled with [`Batch::from_parts`] from borrowed
    /// data (one copy, as `to_vec` would make, but aligned as collated
    /// batches are). An error if `shape` does not hold `data.len()` elements.
    ///
    /// ```
    /// use feedline::{Array, DATA_ALIGN};
    /// let a = Array::aligned_copy(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// let Array::F32(x) = &a else { unreachable!() };
    /// assert_eq!(x.as_ptr() as usize % DATA_ALIGN, 0);
    /// assert_eq!(x.shape(), &[2, 2]);
    /// assert!(Array::aligned_copy(&[1u8, 2, 3], &[2, 2]).is_err());
    /// ```
    pub fn aligned_copy<T: Element>(
        data: &[T],
        shape: &[usize],
    ) -> std::result::Result<Array, ShapeError> {
        T::aligned_copy(data, shape)
    }

    /// An array of `shape` whose first element is on a [`DATA_ALIGN`]-byte
    /// boundary, in a recycled batch buffer when one fits, zeroed and then
    /// written by `fill` (given all its elements, in row-major order): for
    /// a field computed in place, such as an image expanded from its
    /// pixels, without fresh memory for every batch.
    ///
    /// ```
    /// use feedline::{Array, DATA_ALIGN};
    /// let a = Array::aligned_filled(&[2, 3], |out: &mut [f32]| {
    ///     for (i, v) in out.iter_mut().enumerate() {
    ///         *v = i as f32;
    ///     }
    /// });
    /// let Array::F32(x) = &a else { unreachable!() };
    /// assert_eq!(x.as_ptr() as usize % DATA_ALIGN, 0);
    /// assert_eq!(x[[1, 2]], 5.0);
    /// ```
    pub fn aligned_filled<T: Element>(shape: &[usize], mut fill: impl FnMut(&mut [T])) -> Array {
        T::aligned_filled(shape, &mut fill)
            .expect("an array of `shape` has the product of `shape` elements")
    }

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
///
/// When a batch is dropped, its large field buffers are kept (up to 96 MiB
/// in all) for the next batches that collation makes, so that they need not
/// be faulted in afresh.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub(crate) schema: Schema,
    pub(crate) fields: Vec<BatchField>,
    /// Boxed, not a `Vec`: a batch stays small enough to travel in errors
    /// (`PushError<Batch>`) by value.
    pub(crate) origins: Box<[Origin]>,
    /// The last `padded` rows repeat earlier instances (equalize padding).
    pub(crate) padded: usize,
    /// A packed batch's document pieces (see [`crate::pack`]); `None` for
    /// a batch of instances.
    pub(crate) segments: Option<Arc<Vec<Segment>>>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        fn array<T: recycle::Recycled>(a: ArrayD<T>) {
            recycle::give(a.into_raw_vec_and_offset().0);
        }
        for f in self.fields.drain(..) {
            match f.data {
                Array::F32(a) => array(a),
                Array::F64(a) => array(a),
                Array::I64(a) => array(a),
                Array::I32(a) => array(a),
                Array::U8(a) => array(a),
                Array::Bool(a) => array(a),
                Array::Bytes(b) => recycle::give(b.into_parts().0),
            }
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type of batch data: `f32`, `f64`, `i64`, `i32`, `u8`,
/// `bool` — the types [`Batch::view`] can give.
pub trait Element: sealed::Sealed + Sized + 'static {
    /// The schema's name of the type.
    const DTYPE: DType;
    /// The data, if it is of this type.
    #[doc(hidden)]
    fn of(array: &Array) -> Option<ArrayViewD<'_, Self>>;
    /// `data` copied into an aligned array of `shape` (see [`Array::aligned_copy`]).
    #[doc(hidden)]
    fn aligned_copy(data: &[Self], shape: &[usize]) -> std::result::Result<Array, ShapeError>;
    /// An aligned array of `shape`, zeroed, then written by `fill` (see
    /// [`Array::aligned_filled`]).
    #[doc(hidden)]
    fn aligned_filled(
        shape: &[usize],
        fill: &mut dyn FnMut(&mut [Self]),
    ) -> std::result::Result<Array, ShapeError>;
}

macro_rules! element {
    ($($t:ty => $variant:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn of(array: &Array) -> Option<ArrayViewD<'_, Self>> {
                match array {
                    Array::$variant(a) => Some(a.view()),
                    _ => None,
                }
            }
            fn aligned_copy(
                data: &[Self],
                shape: &[usize],
            ) -> std::result::Result<Array, ShapeError> {
                let mut v = aligned::AlignedVec::<$t>::with_capacity(data.len());
                let room = &mut v.spare_capacity_mut()[..data.len()];
                // SAFETY: `room` has room for `data.len()` elements (asked for
                // above) and does not overlap `data` (a new or recycled buffer);
                // those elements are then initialised.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), room.as_mut_ptr().cast::<$t>(), data.len());
                    v.set_len(data.len());
                }
                Ok(Array::$variant(v.into_array(shape)?))
            }
            fn aligned_filled(
                shape: &[usize],
                fill: &mut dyn FnMut(&mut [Self]),
            ) -> std::result::Result<Array, ShapeError> {
                let n = shape.iter().product();
                let mut v = aligned::AlignedVec::<$t>::with_capacity(n);
                v.resize(n, <$t>::default());
                fill(v.as_mut_slice());
                Ok(Array::$variant(v.into_array(shape)?))
            }
        }
    )*};
}
element!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, u8 => U8, bool => Bool);

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
            origins: origins.into_boxed_slice(),
            padded: 0,
            segments: None,
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

    /// The field `name` as a view of element type `T` and dimension `D`
    /// (`Ix1` … `Ix6`, or `IxDyn`), without `into_dimensionality`. The
    /// leading axis is the batch's: a field of schema shape `[3, 32, 32]`
    /// is an `Ix4` view `[batch, 3, 32, 32]`, a scalar `[]` an `Ix1` view.
    /// A ragged field's data is laid out as its [`offsets`](Self::offsets)
    /// or [`lengths`](Self::lengths) say (values concatenated: `[total, …]`;
    /// padded: `[batch, max_len, …]`).
    ///
    /// Errors say which: no such field (listing those there are), another
    /// element type, or another number of dimensions — field, asked and actual.
    ///
    /// ```
    /// use feedline::{collate, Chunk, DType, Error, Instance, Origin, Schema, SourceId, Values};
    /// use ndarray::{Ix1, Ix4};
    /// let schema = Schema::builder()
    ///     .field("image", DType::F32, [3, 2, 2])
    ///     .field("label", DType::I64, [])
    ///     .build()?;
    /// let mut chunk = Chunk::new(&schema);
    /// for i in 0..2 {
    ///     let values = vec![Values::F32(vec![i as f32; 12]), Values::I64(vec![i])];
    ///     let origin = Origin::new(SourceId::intern("mem"), i as u64);
    ///     chunk.push_instance(&Instance::new(&schema, values, origin)?);
    /// }
    /// let batch = collate(&schema, (0..2).map(|i| (&chunk, i)))?;
    ///
    /// let images = batch.view::<f32, Ix4>("image")?;   // ArrayView4<f32>
    /// assert_eq!(images.dim(), (2, 3, 2, 2));
    /// assert_eq!(images[[1, 2, 1, 1]], 1.0);
    /// let labels = batch.view::<i64, Ix1>("label")?;   // ArrayView1<i64>
    /// assert_eq!(labels.to_vec(), [0, 1]);
    ///
    /// let rank = batch.view::<f32, Ix1>("image").unwrap_err();
    /// assert_eq!(
    ///     rank.to_string(),
    ///     "batch field `image`: asked for f32 with 1 dimension (Ix1), but it is \
    ///      f32 [2, 3, 2, 2]: 4 dimensions, the batch's and the schema shape [3, 2, 2]"
    /// );
    /// let dtype = batch.view::<u8, Ix4>("image").unwrap_err();
    /// assert!(matches!(dtype, Error::View { .. }), "{dtype}");
    /// assert!(dtype.to_string().contains("asked for u8"), "{dtype}");
    /// let missing = batch.view::<f32, Ix4>("images").unwrap_err();
    /// assert!(missing.to_string().contains("image, label"), "{missing}");
    /// # Ok::<(), feedline::Error>(())
    /// ```
    pub fn view<T: Element, D: Dimension>(&self, name: &str) -> Result<ArrayView<'_, T, D>> {
        let i = self
            .schema
            .index_of(name)
            .ok_or_else(|| self.schema.no_such_field(name))?;
        let field = &self.schema.fields()[i];
        let bf = &self.fields[i];
        let asked = || {
            let dims = match D::NDIM {
                Some(n) => format!(
                    "with {n} dimension{} (Ix{n})",
                    if n == 1 { "" } else { "s" }
                ),
                None => "with any number of dimensions (IxDyn)".to_string(),
            };
            format!("{} {dims}", T::DTYPE)
        };
        let actual = || {
            let shape = bf.data.shape();
            let schema_shape = crate::schema::shape_string(&field.shape);
            let what = if bf.offsets.is_some() {
                format!("the ragged schema shape {schema_shape}, all rows' values concatenated (see offsets)")
            } else if bf.lengths.is_some() {
                format!(
                    "the batch's and the ragged schema shape {schema_shape}, padded (see lengths)"
                )
            } else {
                format!("the batch's and the schema shape {schema_shape}")
            };
            format!(
                "{} {shape:?}: {} dimension{}, {what}",
                bf.data.dtype(),
                shape.len(),
                if shape.len() == 1 { "" } else { "s" },
            )
        };
        let view_error = || Error::View {
            field: name.to_string(),
            asked: asked(),
            actual: actual(),
        };
        let dynamic = T::of(&bf.data).ok_or_else(view_error)?;
        dynamic.into_dimensionality::<D>().map_err(|_| view_error())
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

    /// Rows at the end of this batch that are padding: instances repeated
    /// so that every data-parallel rank runs as many batches
    /// (`Equalize::Pad`), which evaluation should not count twice. Padding
    /// rows always come last in a pass, so they are the batch's last rows.
    pub fn padded_rows(&self) -> usize {
        self.padded
    }

    /// One flag per row: true for a real instance, false for padding (see
    /// [`padded_rows`](Self::padded_rows)) — multiply a per-row loss or
    /// metric by it.
    ///
    /// ```
    /// use feedline::{collate, Chunk, DType, Instance, Origin, Schema, SourceId, Values};
    /// let schema = Schema::builder().field("y", DType::I64, []).build()?;
    /// let mut chunk = Chunk::new(&schema);
    /// for i in 0..3 {
    ///     let origin = Origin::new(SourceId::intern("mem"), i);
    ///     chunk.push_instance(&Instance::new(&schema, vec![Values::I64(vec![i as i64])], origin)?);
    /// }
    /// let batch = collate(&schema, [0, 1, 2, 0].map(|i| (&chunk, i)))?.with_padded_rows(1)?;
    /// assert_eq!(batch.mask().to_vec(), [true, true, true, false]);
    /// let real = batch.i64("y")?.iter().zip(batch.mask()).filter(|(_, m)| *m).count();
    /// assert_eq!(real, 3);
    /// assert!(batch.clone().with_padded_rows(5).is_err());
    /// # Ok::<(), feedline::Error>(())
    /// ```
    pub fn mask(&self) -> ndarray::Array1<bool> {
        let real = self.len() - self.padded;
        ndarray::Array1::from_shape_fn(self.len(), |i| i < real)
    }

    /// Mark the last `n` rows as padding (as the pipeline does); an error
    /// if the batch has fewer rows.
    pub fn with_padded_rows(mut self, n: usize) -> Result<Self> {
        if n > self.len() {
            return Err(Error::Config(format!(
                "{n} padding rows marked in a batch of {} rows",
                self.len()
            )));
        }
        self.padded = n;
        Ok(self)
    }

    /// The same batch, packed from the document pieces `segments` (see
    /// [`crate::pack`]).
    pub fn with_segments(mut self, segments: Vec<Segment>) -> Self {
        self.segments = Some(Arc::new(segments));
        self
    }

    /// A packed batch's document pieces, row by row ([`crate::pack`]):
    /// which document, which tokens of it; `None` for a batch of
    /// instances, whose [`origins`](Self::origins) say it all.
    pub fn segments(&self) -> Option<&[Segment]> {
        self.segments.as_deref().map(Vec::as_slice)
    }

    /// Payload bytes of all fields.
    pub fn payload_bytes(&self) -> usize {
        self.fields.iter().map(|f| f.data.payload_bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::recycle::{self, Recycled, MAX_BYTES, MIN_BYTES};
    use crate::chunk::Chunk;
    use crate::collate::collate;
    use crate::provenance::{Origin, SourceId};
    use crate::record::Instance;
    use crate::schema::{DType, Schema};
    use crate::values::Values;

    /// Sizes no other test uses, so that the shared shelves give back ours.
    const ODD: usize = (3 << 20) + 12_345;

    #[test]
    fn a_dropped_batch_gives_its_buffers_to_the_next_one() {
        let schema = Schema::builder()
            .field("img", DType::U8, [ODD / 4])
            .field("label", DType::I64, [1])
            .build()
            .unwrap();
        let mut chunk = Chunk::new(&schema);
        for i in 0..4u8 {
            let o = Origin::new(SourceId::intern("recycle"), i as u64);
            let values = vec![Values::U8(vec![i; ODD / 4]), Values::I64(vec![i as i64])];
            chunk.push_instance(&Instance::new(&schema, values, o).unwrap());
        }
        let first = collate(&schema, (0..4).map(|i| (&chunk, i))).unwrap();
        let ptr = first.u8("img").unwrap().as_ptr();
        drop(first);
        let second = collate(&schema, (0..4).rev().map(|i| (&chunk, i))).unwrap();
        let img = second.u8("img").unwrap();
        assert_eq!(img.as_ptr(), ptr, "the buffer was recycled");
        assert_eq!(img.shape(), &[4, ODD / 4]);
        for (k, row) in img.outer_iter().enumerate() {
            assert!(row.iter().all(|&b| b == 3 - k as u8), "row {k}");
        }
        assert_eq!(
            second.i64("label").unwrap().as_slice().unwrap(),
            &[3, 2, 1, 0]
        );
    }

    #[test]
    fn the_shelves_are_bounded_and_skip_small_vectors() {
        // No other test recycles f64 vectors.
        let shelved = || <f64 as Recycled>::shelf().lock().len();
        recycle::give(Vec::<f64>::with_capacity(MIN_BYTES / 8 - 1));
        assert_eq!(shelved(), 0, "small vectors are left to the allocator");
        recycle::give(Vec::<f64>::with_capacity(MIN_BYTES / 8));
        assert_eq!(shelved(), 1);
        assert_eq!(
            recycle::take::<f64>(MIN_BYTES / 8).capacity(),
            MIN_BYTES / 8
        );
        assert_eq!(shelved(), 0);
        for _ in 0..3 * (MAX_BYTES / (ODD + 1)) {
            recycle::give(Vec::<i32>::with_capacity(ODD / 4 + 1));
            assert!(recycle::held() <= MAX_BYTES);
        }
        let v: Vec<i32> = recycle::take(ODD / 4);
        assert!(v.is_empty() && v.capacity() >= ODD / 4);
    }

    /// `Array::aligned_copy` of every element type and of sizes either side
    /// of the recycling threshold: the same values, the shape asked for, the
    /// first element on a DATA_ALIGN boundary.
    #[test]
    fn an_aligned_copy_keeps_the_values_and_starts_on_the_boundary() {
        use super::{Array, Element, DATA_ALIGN};
        fn check<T: Element + Copy + PartialEq + std::fmt::Debug>(data: &[T]) {
            let shape = [2, data.len() / 2];
            let a = Array::aligned_copy(data, &shape).unwrap();
            let v = T::of(&a).unwrap();
            assert_eq!(v.shape(), &shape);
            assert_eq!(v.as_ptr() as usize % DATA_ALIGN, 0, "{:?}", T::DTYPE);
            assert_eq!(v.iter().copied().collect::<Vec<T>>(), data);
            assert!(Array::aligned_copy(data, &[data.len() + 1]).is_err());
        }
        for n in [2, 6, 2 * 40_000, 2 * (MIN_BYTES + 7)] {
            check(&(0..n).map(|i| i as f32).collect::<Vec<_>>());
            check(&(0..n).map(|i| i as f64 * 0.5).collect::<Vec<_>>());
            check(&(0..n).map(|i| i as i64 - 3).collect::<Vec<_>>());
            check(&(0..n).map(|i| i as i32 * 7).collect::<Vec<_>>());
            check(&(0..n).map(|i| (i % 251) as u8).collect::<Vec<_>>());
            check(&(0..n).map(|i| i % 3 == 0).collect::<Vec<_>>());
        }
    }

    #[test]
    fn an_imagenet_batch_buffer_is_recycled() {
        // f32 [64, 3, 224, 224] (38.5 MB): the transformed batches of the
        // ImageNet workload; at 32 MiB it was never kept, and every batch
        // faulted in 38.5 MB afresh (sys time was a third of the CPU time).
        // As many bytes, in bool vectors, which no other test recycles.
        let n = 64 * 3 * 224 * 224 * std::mem::size_of::<f32>();
        recycle::give(Vec::<bool>::with_capacity(n));
        assert_eq!(<bool as Recycled>::shelf().lock().len(), 1, "kept");
        assert!(recycle::held() >= n);
        let again: Vec<bool> = recycle::take(n);
        assert_eq!(again.capacity(), n);
        assert_eq!(<bool as Recycled>::shelf().lock().len(), 0, "taken");
    }
}
