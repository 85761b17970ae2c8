//! The reader-side stage: a per-record filter and a per-record map (same
//! schema) applied to each chunk a reader makes, before the shuffle — cheap
//! parsing and dropping records where they are read.
//!
//! A filter that drops rows makes a new chunk of the kept rows (rows left
//! in their file stay there); a map rebuilds the chunk from its mapped
//! instances. An error or a panic in either is the record's failure, with
//! its provenance, for the reader's error policy.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::panic::panic_message;
use crate::record::Instance;

use super::BoxError;

type Filter = Arc<dyn Fn(&Instance) -> Result<bool, BoxError> + Send + Sync>;
type Map = Arc<dyn Fn(Instance) -> Result<Instance, BoxError> + Send + Sync>;

/// A record filter and/or map, run on the readers.
#[derive(Clone, Default)]
pub struct RecordStage {
    filter: Option<Filter>,
    map: Option<Map>,
}

impl fmt::Debug for RecordStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// What a chunk became: the kept, mapped rows, and each failed record's error.
#[derive(Debug)]
pub struct StagedChunk {
    /// The rows kept, in order.
    pub chunk: Chunk,
    /// Records whose filter or map failed, in order.
    pub failed: Vec<Error>,
    /// Records the filter dropped.
    pub dropped: usize,
}

/// `f`, a panic becoming an error saying so.
fn guarded<T>(f: impl FnOnce() -> Result<T, BoxError>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(format!("panicked: {}", panic_message(&*p))),
    }
}

impl RecordStage {
    /// Keep the records for which `keep` is true (after any earlier filter).
    pub fn filter<F, E>(mut self, keep: F) -> Self
    where
        F: Fn(&Instance) -> Result<bool, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let before = self.filter.take();
        self.filter = Some(Arc::new(move |inst: &Instance| {
            if let Some(b) = &before {
                if !b(inst)? {
                    return Ok(false);
                }
            }
            keep(inst).map_err(Into::into)
        }));
        self
    }

    /// Map each kept record to another instance of the same schema (after
    /// any earlier map).
    pub fn map<F, E>(mut self, f: F) -> Self
    where
        F: Fn(Instance) -> Result<Instance, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let before = self.map.take();
        self.map = Some(Arc::new(move |inst: Instance| {
            let inst = match &before {
                Some(b) => b(inst)?,
                None => inst,
            };
            f(inst).map_err(Into::into)
        }));
        self
    }

    /// "filter", "map", "filter + map" or "none".
    pub fn describe(&self) -> String {
        match (self.filter.is_some(), self.map.is_some()) {
            (true, true) => "filter + map",
            (true, false) => "filter",
            (false, true) => "map",
            (false, false) => "none",
        }
        .into()
    }

    /// Apply the stage to `chunk`.
    ///
    /// # Errors
    ///
    /// A row that cannot be read out of the chunk (its file shortened, a
    /// deferred checksum), or a mapped instance of another schema.
    pub fn apply(&self, chunk: Chunk) -> Result<StagedChunk> {
        let mut failed = Vec::new();
        let mut keep = Vec::with_capacity(chunk.len());
        let mut mapped = Vec::new();
        for i in 0..chunk.len() {
            let origin = chunk.origins()[i];
            let inst = chunk.row(i)?;
            let fail = |what: String| Error::Transform {
                location: origin.location(),
                transform: "record stage".into(),
                what,
            };
            let out = guarded(|| {
                if let Some(f) = &self.filter {
                    if !f(&inst)? {
                        return Ok(None);
                    }
                }
                match &self.map {
                    Some(m) => m(inst).map(Some),
                    None => Ok(Some(inst)),
                }
            })
            .map_err(fail);
            match out {
                Ok(Some(v)) => {
                    if !v.schema().same(chunk.schema()) {
                        failed.push(Error::Transform {
                            location: origin.location(),
                            transform: "record stage".into(),
                            what: format!(
                                "the map changed the schema to {} (a record map keeps {})",
                                v.schema(),
                                chunk.schema()
                            ),
                        });
                        continue;
                    }
                    keep.push(i);
                    mapped.push(v);
                }
                Ok(None) => {}
                Err(e) => failed.push(e),
            }
        }
        let dropped = chunk.len() - keep.len() - failed.len();
        let chunk = if self.map.is_some() {
            let mut c = Chunk::with_capacity(chunk.schema(), mapped.len());
            for inst in &mapped {
                c.push_instance(inst);
            }
            c
        } else if keep.len() == chunk.len() {
            chunk
        } else {
            chunk.select_rows(&keep)
        };
        Ok(StagedChunk {
            chunk,
            failed,
            dropped,
        })
    }
}
