//! Generator sources: instances made by user code instead of read from a
//! file (Paddle's *reader creator*), fed through the same pipeline as files.
//!
//! A [`GeneratorSource`] is a name and a creator: a closure that returns a
//! fresh iterator of [`Sample`]s each time it is called — once per pass, and
//! again whenever a reader must resume the source. [`GeneratorFormat`] is the
//! [`Format`] named `gen` that serves them: the input spec `gen:NAME` opens
//! source `NAME`, so a generator is just another entry of a file list and
//! gets the reader pool, shuffle, batching, passes, sharding by record and
//! provenance like a file does. Its records are located as
//! `gen:NAME: record i` (the `i`-th item the iterator yields).
//!
//! This module also owns [`Sample`] (named tensors from user code) and the
//! strict check that a sample fits a schema ([`append_sample`]): every field
//! present (a ragged one may be missing), a convertible element type and
//! exactly the declared dimensions — an error names the field, the expected
//! and the actual shape. Fields the schema does not name are ignored, as in
//! files.
//!
//! A creator must yield the same sequence every time it is called for a
//! resumed read (`start_record` skips that many items) to be exact; the
//! skipped items are generated and dropped.
//!
//! ```
//! use feedline::format::generator::{GeneratorFormat, GeneratorSource, Sample};
//! use feedline::format::{OpenOptions, Registry};
//! use feedline::{Chunk, DType, Schema, Values};
//!
//! let squares = GeneratorSource::new("squares", || {
//!     (0..5).map(|i| Sample::new().with("x", Values::F32(vec![i as f32, (i * i) as f32]), [2]))
//! });
//! let mut gens = GeneratorFormat::new();
//! gens.add(squares).unwrap();
//! let mut registry = Registry::with_builtin();
//! gens.register(&mut registry);
//!
//! let schema = Schema::builder().field("x", DType::F32, [2]).build().unwrap();
//! let opts = OpenOptions { start_record: 2, ..OpenOptions::default() };
//! let mut reader = registry.open("gen:squares", None, &opts).unwrap();
//! let mut chunk = Chunk::new(&schema);
//! assert_eq!(reader.read_chunk(&mut chunk, 100, 1 << 20).unwrap(), 3);
//! assert_eq!(chunk.origins()[0].source.name().as_ref(), "gen:squares");
//! assert_eq!(chunk.origins()[0].record, 2);
//! assert_eq!(chunk.row(0).unwrap().get("x").unwrap().as_f32().unwrap(), &[2.0, 4.0]);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::format::{check_chunk_budget, Format, OpenOptions, RecordReader, Registry};
use crate::provenance::{Location, Origin, SourceId};
use crate::record::{Instance, Record};
use crate::schema::{DType, Dim, Field, Schema};
use crate::values::{Tensor, Values};

/// The format's name, and the prefix of generator specs (`gen:NAME`).
pub const PREFIX: &str = "gen";

/// One instance made by user code: named tensors, before any schema (a
/// [`Record`] without its location).
///
/// ```
/// use feedline::format::generator::Sample;
/// use feedline::Values;
/// let s = Sample::new()
///     .with("image", Values::U8(vec![0; 12]), [2, 2, 3])
///     .with("label", Values::I64(vec![7]), []);
/// assert_eq!(s.get("image").unwrap().shape, vec![2, 2, 3]);
/// assert_eq!(s.payload_bytes(), 12 + 8);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// The fields, in the order given.
    pub fields: Vec<(String, Tensor)>,
}

impl Sample {
    /// No fields yet.
    pub fn new() -> Self {
        Sample { fields: Vec::new() }
    }

    /// With field `name` set to `values` of shape `shape` (C order; `[]` is a
    /// scalar). A field of the same name is replaced.
    pub fn with(
        self,
        name: impl Into<String>,
        values: Values,
        shape: impl IntoIterator<Item = usize>,
    ) -> Self {
        self.with_tensor(
            name,
            Tensor {
                values,
                shape: shape.into_iter().collect(),
            },
        )
    }

    /// With field `name` set to `tensor` (a field of the same name is replaced).
    pub fn with_tensor(mut self, name: impl Into<String>, tensor: Tensor) -> Self {
        self.insert(name, tensor);
        self
    }

    /// Set field `name` to `tensor`, replacing a field of the same name.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        let name = name.into();
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = tensor,
            None => self.fields.push((name, tensor)),
        }
    }

    /// The field named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Payload bytes of all fields.
    pub fn payload_bytes(&self) -> usize {
        self.fields
            .iter()
            .map(|(_, t)| t.values.payload_bytes())
            .sum()
    }

    /// The sample as a record at `location`.
    pub fn into_record(self, location: Location) -> Record {
        Record {
            fields: self.fields,
            location,
        }
    }

    /// An instance's values as a sample, shaped as its schema declares
    /// (a ragged field's leading dimension from its element count).
    pub fn from_instance(inst: &Instance) -> Self {
        let fields = inst
            .schema()
            .fields()
            .iter()
            .zip(inst.values())
            .map(|(f, v)| {
                let shape = if f.is_ragged() {
                    let unit = f.unit_elements();
                    let lead = v.len().checked_div(unit).unwrap_or(0);
                    std::iter::once(lead).chain(f.fixed_dims()).collect()
                } else {
                    f.fixed_dims()
                };
                (
                    f.name.clone(),
                    Tensor {
                        values: v.clone(),
                        shape,
                    },
                )
            })
            .collect();
        Sample { fields }
    }
}

impl From<Vec<(String, Tensor)>> for Sample {
    fn from(fields: Vec<(String, Tensor)>) -> Self {
        Sample { fields }
    }
}

impl From<Record> for Sample {
    fn from(r: Record) -> Self {
        Sample { fields: r.fields }
    }
}

/// What a generator's iterator may yield: a [`Sample`] (or something that
/// becomes one), or a failure of the user's code, which becomes a bad record
/// at that index (handled by the pipeline's error policy).
pub trait IntoSample {
    /// The sample, or the user's error message.
    fn into_sample(self) -> std::result::Result<Sample, String>;
}

impl IntoSample for Sample {
    fn into_sample(self) -> std::result::Result<Sample, String> {
        Ok(self)
    }
}

impl IntoSample for Record {
    fn into_sample(self) -> std::result::Result<Sample, String> {
        Ok(self.into())
    }
}

impl IntoSample for Instance {
    fn into_sample(self) -> std::result::Result<Sample, String> {
        Ok(Sample::from_instance(&self))
    }
}

impl IntoSample for Vec<(String, Tensor)> {
    fn into_sample(self) -> std::result::Result<Sample, String> {
        Ok(self.into())
    }
}

impl<T: IntoSample, E: fmt::Display> IntoSample for std::result::Result<T, E> {
    fn into_sample(self) -> std::result::Result<Sample, String> {
        match self {
            Ok(t) => t.into_sample(),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The iterator a creator returns, type-erased.
pub type SampleIter = Box<dyn Iterator<Item = std::result::Result<Sample, String>> + Send>;

type Creator = Arc<dyn Fn() -> SampleIter + Send + Sync>;

/// A named reader creator.
#[derive(Clone)]
pub struct GeneratorSource {
    name: String,
    creator: Creator,
}

impl fmt::Debug for GeneratorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GeneratorSource({:?})", self.name)
    }
}

impl GeneratorSource {
    /// Source `name` made by `creator`, which is called for a fresh iterator
    /// at the start of every pass (and when a reader resumes the source).
    pub fn new<F, I>(name: impl Into<String>, creator: F) -> Self
    where
        F: Fn() -> I + Send + Sync + 'static,
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: IntoSample + 'static,
    {
        let creator: Creator = Arc::new(move || -> SampleIter {
            Box::new(creator().into_iter().map(IntoSample::into_sample))
        });
        GeneratorSource {
            name: name.into(),
            creator,
        }
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The input spec that reads it: `gen:NAME`.
    pub fn spec(&self) -> String {
        format!("{PREFIX}:{}", self.name)
    }

    /// A fresh iterator (calls the creator).
    pub fn iter(&self) -> SampleIter {
        (self.creator)()
    }

    /// Check the name: not empty, no surrounding white space, no glob
    /// characters (`*`, `?`, `[`: input specs with them are expanded as globs).
    pub fn check_name(name: &str) -> Result<()> {
        if name.is_empty() || name.trim() != name {
            return Err(Error::Config(format!(
                "generator source name {name:?}: empty or with surrounding white space"
            )));
        }
        if name.contains(['*', '?', '[']) {
            return Err(Error::Config(format!(
                "generator source name {name:?}: `*`, `?` and `[` are not allowed (they make a glob pattern)"
            )));
        }
        Ok(())
    }
}

/// The `gen` format: serves the generator sources it holds by name.
///
/// Register it with [`register`](Self::register), which keeps any `gen`
/// format registered before as a fallback for names this one lacks.
#[derive(Clone, Default)]
pub struct GeneratorFormat {
    sources: BTreeMap<String, GeneratorSource>,
    fallback: Option<Arc<dyn Format>>,
}

impl fmt::Debug for GeneratorFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratorFormat")
            .field("sources", &self.sources.keys().collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl GeneratorFormat {
    /// No sources.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a source; an error if its name is invalid or already taken.
    pub fn add(&mut self, source: GeneratorSource) -> Result<()> {
        GeneratorSource::check_name(&source.name)?;
        if self.sources.contains_key(&source.name) {
            return Err(Error::Config(format!(
                "two generator sources are named `{}`",
                source.name
            )));
        }
        self.sources.insert(source.name.clone(), source);
        Ok(())
    }

    /// The names of the sources, sorted.
    pub fn names(&self) -> Vec<String> {
        self.sources.keys().cloned().collect()
    }

    /// The input specs of the sources (`gen:NAME`), sorted by name.
    pub fn specs(&self) -> Vec<String> {
        self.sources.values().map(GeneratorSource::spec).collect()
    }

    /// Register on `registry`, chaining any `gen` format already there.
    pub fn register(mut self, registry: &mut Registry) {
        self.fallback = registry.get(PREFIX);
        registry.register(Arc::new(self));
    }
}

impl Format for GeneratorFormat {
    fn name(&self) -> &str {
        PREFIX
    }

    fn extensions(&self) -> &[&str] {
        &[]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        let name = path.to_string_lossy();
        let Some(source) = self.sources.get(name.as_ref()) else {
            if let Some(f) = &self.fallback {
                return f.open(path, opts);
            }
            let known = self.names();
            return Err(Error::UnknownFormat {
                path: format!("{PREFIX}:{name}"),
                what: format!(
                    "no generator source named `{name}` (known: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            });
        };
        let mut reader = GeneratorReader {
            source: SourceId::intern(&source.spec()),
            iter: source.iter(),
            next: 0,
            done: false,
        };
        while reader.next < opts.start_record {
            if reader.iter.next().is_none() {
                reader.done = true;
                break;
            }
            reader.next += 1;
        }
        Ok(Box::new(reader))
    }
}

/// Reads a generator's iterator as records `0, 1, …` of `gen:NAME`.
struct GeneratorReader {
    source: SourceId,
    iter: SampleIter,
    next: u64,
    done: bool,
}

impl GeneratorReader {
    /// The next item with its location; `None` at the end.
    fn next_item(&mut self) -> Option<(Location, std::result::Result<Sample, String>)> {
        if self.done {
            return None;
        }
        match self.iter.next() {
            None => {
                self.done = true;
                None
            }
            Some(item) => {
                let loc = Location::new(self.source, self.next, None);
                self.next += 1;
                Some((loc, item))
            }
        }
    }
}

fn generator_failed(loc: Location, e: String) -> Error {
    Error::corrupt(loc, format!("the generator failed: {e}"))
}

impl RecordReader for GeneratorReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        match self.next_item() {
            None => Ok(None),
            Some((loc, Ok(s))) => Ok(Some(s.into_record(loc))),
            Some((loc, Err(e))) => Err(generator_failed(loc, e)),
        }
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        check_chunk_budget(max_records, max_bytes)?;
        let mut n = 0;
        while n < max_records && (n == 0 || chunk.payload_bytes() < max_bytes) {
            match self.next_item() {
                None => break,
                Some((loc, Ok(s))) => {
                    append_sample(chunk, &s, Origin::new(loc.source, loc.record))?;
                    n += 1;
                }
                Some((loc, Err(e))) => return Err(generator_failed(loc, e)),
            }
        }
        Ok(n)
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    /// A failed item is consumed: the iterator goes on with the next one.
    fn can_continue(&self) -> bool {
        true
    }

    fn len_hint(&self) -> Option<u64> {
        match self.iter.size_hint() {
            (lo, Some(hi)) if lo == hi && !self.done => Some(self.next + lo as u64),
            _ if self.done => Some(self.next),
            _ => None,
        }
    }
}

/// `[2, 3] f32`: a shape and element type as errors show them.
pub fn describe_shape(shape: &[usize], dtype: DType) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}] {dtype}", dims.join(", "))
}

/// Whether `tensor` fits field `f` exactly: a convertible element type, a
/// shape whose element count matches its values, and the field's dimensions
/// (any leading extent for a ragged field). Byte strings decoded into a `u8`
/// field are checked by their byte count only. `Err` describes the tensor.
pub fn check_tensor(f: &Field, t: &Tensor) -> std::result::Result<(), String> {
    let actual = || describe_shape(&t.shape, t.values.dtype());
    if !t.values.convertible_to(f.dtype) {
        return Err(actual());
    }
    let unit = f.unit_elements();
    if t.values.dtype() == DType::Bytes && f.dtype == DType::U8 {
        let n = t.values.converted_len(DType::U8);
        let fits = if f.is_ragged() {
            if unit == 0 {
                n == 0
            } else {
                n % unit == 0
            }
        } else {
            n == unit
        };
        return if fits {
            Ok(())
        } else {
            Err(format!("{} holding {n} bytes", actual()))
        };
    }
    let held: usize = t.shape.iter().product();
    if held != t.values.len() {
        return Err(format!(
            "{} holding {} elements (the shape has {held})",
            actual(),
            t.values.len()
        ));
    }
    let fits = if f.is_ragged() {
        t.shape.len() == f.shape.len()
            && f.shape[1..]
                .iter()
                .zip(&t.shape[1..])
                .all(|(d, &n)| *d == Dim::Fixed(n))
    } else {
        t.shape.len() == f.shape.len()
            && f.shape
                .iter()
                .zip(&t.shape)
                .all(|(d, &n)| *d == Dim::Fixed(n))
    };
    if fits {
        Ok(())
    } else {
        Err(actual())
    }
}

/// Append `sample` to `chunk` as one row with `origin`, checked strictly
/// against the chunk's schema ([`check_tensor`]) and converted to its element
/// types. On error nothing is appended, and the error names the origin, the
/// field, the expected and the actual shape.
///
/// ```
/// use feedline::format::generator::{append_sample, Sample};
/// use feedline::{Chunk, DType, Origin, Schema, SourceId, Values};
/// let schema = Schema::builder().field("x", DType::F32, [2, 2]).build().unwrap();
/// let mut chunk = Chunk::new(&schema);
/// let origin = Origin::new(SourceId::intern("push"), 3);
/// let bad = Sample::new().with("x", Values::F32(vec![0.0; 4]), [4]);
/// let e = append_sample(&mut chunk, &bad, origin).unwrap_err();
/// assert_eq!(e.to_string(), "push: record 3: field `x`: expected [2, 2] f32, got [4] f32");
/// assert!(chunk.is_empty());
/// let good = Sample::new().with("x", Values::F64(vec![1.0; 4]), [2, 2]);
/// append_sample(&mut chunk, &good, origin).unwrap();
/// assert_eq!(chunk.len(), 1);
/// ```
pub fn append_sample(chunk: &mut Chunk, sample: &Sample, origin: Origin) -> Result<()> {
    let schema: Schema = chunk.schema().clone();
    let field_error = |f: &Field, actual: String| Error::Field {
        location: origin.location(),
        field: f.name.clone(),
        expected: f.describe(),
        actual,
    };
    for (i, f) in schema.fields().iter().enumerate() {
        match sample.get(&f.name) {
            None if f.is_ragged() => {}
            None => {
                chunk.rollback_row();
                return Err(field_error(f, "no such field in the sample".into()));
            }
            Some(t) => {
                if let Err(actual) = check_tensor(f, t) {
                    chunk.rollback_row();
                    return Err(field_error(f, actual));
                }
                if let Err(e) = t.values.append_converted(chunk.values_mut(i)) {
                    chunk.rollback_row();
                    return Err(field_error(f, e));
                }
            }
        }
    }
    chunk
        .commit_row(origin)
        .map_err(|(i, actual)| field_error(&schema.fields()[i], actual))
}
