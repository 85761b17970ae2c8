//! # feedline
//!
//! Feeds training data to deep-learning trainers: files go in; shuffled,
//! batched, shape-checked tensors come out, pass after pass, with no instance
//! lost or repeated within a pass.
//!
//! This is the core crate (no actix): the data model ([`Schema`],
//! [`Instance`], [`Chunk`], [`Batch`]), the file [`format`](mod@format)s and their
//! registry, collation, and the pipeline parts the actor crate
//! `feedline-actors` is made of.
//!
//! To load training data, start with `feedline-actors`: its `Loader`
//! (`Loader::builder().files("data/train-*.tfrecord").batch(256).build()?`,
//! then `for delivered in loader`) runs readers, shuffle, batching and
//! passes on threads of its own, and its prelude
//! (`use feedline_actors::prelude::*;`) re-exports what a training loop
//! needs from here. This crate is the low level below it, as the example
//! shows; a [`Batch`]'s fields are read as typed views
//! ([`Batch::view`]).
//!
//! ## Data model
//!
//! - A [`Schema`] names fields; each has a [`DType`] and a shape whose leading
//!   dimension may be variable (ragged).
//! - A format reads [`Record`]s (schema-free); conformed to a schema they are
//!   [`Instance`]s, and many instances travel together as a columnar [`Chunk`].
//! - [`collate`] turns rows of chunks into a [`Batch`]: one contiguous
//!   `ndarray` per field.
//!
//! ## Features
//!
//! TFRecord, npy/npz, JSON Lines, CSV/TSV and WebDataset tar are always in.
//! Cargo features, on by default, add the heavy parts: `parquet` (Parquet
//! files, through arrow-rs), `arrow` (Arrow IPC files and Hugging Face
//! `save_to_disk` directories, through arrow-rs), `mds` (Mosaic Streaming
//! MDS datasets) and `remote` (`s3://`, `gs://`, `http(s)://` inputs,
//! through object_store and tokio). Without
//! one, an input that needs it is refused with
//! [`Error::NotCompiledIn`], which names the feature to enable; URLs are
//! recognised in every build ([`remote::is_remote`]).
//!
//! ## Example
//!
//! ```
//! use feedline::format::{OpenOptions, Registry};
//! use feedline::{collate_chunks, Chunk, DType, Schema};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("data.jsonl");
//! std::fs::write(&path, "{\"x\": [1.0, 2.0], \"y\": 3}\n{\"x\": [4.0, 5.0], \"y\": 6}\n").unwrap();
//! let schema = Schema::builder()
//!     .field("x", DType::F32, [2])
//!     .field("y", DType::I64, [])
//!     .build()
//!     .unwrap();
//! let mut reader = Registry::with_builtin()
//!     .open(path.to_str().unwrap(), None, &OpenOptions::default())
//!     .unwrap();
//! let mut chunk = Chunk::new(&schema);
//! reader.read_chunk(&mut chunk, 1024, 1 << 20).unwrap();
//! let batch = collate_chunks(&schema, [&chunk]).unwrap();
//! assert_eq!(batch.f32("x").unwrap().shape(), &[2, 2]);
//! assert_eq!(batch.i64("y").unwrap().as_slice().unwrap(), &[3, 6]);
//! ```

#![warn(missing_docs)]
#![allow(clippy::new_without_default)]

mod backing;
mod batch;
mod chunk;
mod collate;
mod dataset_dir;
mod error;
pub mod format;
mod infer;
mod input;
mod provenance;
mod record;
mod rows;
mod schema;
mod values;

pub use batch::{Array, Batch, BatchField, Element, DATA_ALIGN};
pub use chunk::{Chunk, Column, RowRef};
pub use collate::{collate, collate_chunks, collate_rows};
pub use error::{Error, Feature, Result};
pub use provenance::{Location, Origin, Segment, SourceId};
pub use record::{Instance, Record};
pub use schema::{DType, Dim, Field, Ragged, Schema, SchemaBuilder};
pub use values::{BytesList, Tensor, Values};

pub mod batch_policy;
pub mod checkpoint;
pub mod feed_queue;
pub mod global_order;
pub mod pack;
pub mod plan;
pub mod reader;
pub mod record_index;
pub mod remote;
pub mod shuffle;
pub mod synthetic;
#[cfg(feature = "tokenize")]
pub mod tokenize;
pub mod transform;

// For the workspace's other crates (the actor pipeline reads its stages'
// panics with it), not part of the API.
#[doc(hidden)]
pub mod panic;
