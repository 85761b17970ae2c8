//! The [`Registry`]: the formats a loader knows and the rules that choose
//! one for a path (see the [module docs](super)).

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(feature = "arrow")]
use super::arrow;
#[cfg(feature = "mds")]
use super::mds;
#[cfg(feature = "parquet")]
use super::parquet;
use super::{csv, jsonl, npy, tfrecord, wds, Compression, Format, OpenOptions, RecordReader};
use crate::error::{Error, Feature, Result};
use crate::schema::Schema;

/// The formats known to a loader, and the rules that choose among them.
#[derive(Clone)]
pub struct Registry {
    formats: Vec<Arc<dyn Format>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.formats.iter().map(|x| x.name()))
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::with_builtin()
    }
}

impl Registry {
    /// No formats at all.
    pub fn empty() -> Self {
        Registry {
            formats: Vec::new(),
        }
    }

    /// TFRecord, NPY, NPZ, NPY column groups (`npy-columns:`), JSON Lines,
    /// CSV, TSV, WebDataset tar, Parquet with the `parquet` feature, Arrow
    /// IPC with `arrow` and MDS with `mds`.
    pub fn with_builtin() -> Self {
        let mut r = Self::empty();
        r.register(Arc::new(tfrecord::TfRecordFormat));
        r.register(Arc::new(npy::NpyFormat));
        r.register(Arc::new(npy::NpzFormat));
        r.register(Arc::new(npy::NpyColumnsFormat));
        r.register(Arc::new(jsonl::JsonlFormat));
        r.register(Arc::new(csv::CsvFormat::default()));
        r.register(Arc::new(csv::CsvFormat::tsv()));
        #[cfg(feature = "parquet")]
        r.register(Arc::new(parquet::ParquetFormat));
        #[cfg(feature = "arrow")]
        r.register(Arc::new(arrow::ArrowFormat));
        #[cfg(feature = "mds")]
        r.register(Arc::new(mds::MdsFormat));
        r.register(Arc::new(wds::WdsFormat));
        r
    }

    /// Add a format; a later one with the same name or extension wins.
    pub fn register(&mut self, format: Arc<dyn Format>) {
        self.formats.insert(0, format);
    }

    /// The format named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Format>> {
        self.formats.iter().find(|f| f.name() == name).cloned()
    }

    /// Names of the registered formats.
    pub fn names(&self) -> Vec<String> {
        self.formats.iter().map(|f| f.name().to_string()).collect()
    }

    /// Choose the format for `spec` (a path, maybe with a `FORMAT:` prefix):
    /// returns the format, the bare path and the compression the extension implies.
    pub fn resolve(
        &self,
        spec: &str,
        explicit: Option<&str>,
    ) -> Result<(Arc<dyn Format>, PathBuf, Compression)> {
        let unknown = |what: String| Error::UnknownFormat {
            path: spec.to_string(),
            what,
        };
        let bare = spec.split_once(':').map_or(spec, |(_, rest)| rest);
        if !Feature::Remote.enabled()
            && (crate::remote::is_remote(spec) || crate::remote::is_remote(bare))
        {
            return Err(Error::not_compiled_in(spec, Feature::Remote));
        }
        if let Some(name) = explicit {
            if let Some(feature) = self.left_out(name, |_| false) {
                return Err(Error::not_compiled_in(spec, feature));
            }
            let f = self.get(name).ok_or_else(|| {
                unknown(format!(
                    "unknown format `{name}` (known: {})",
                    self.names().join(", ")
                ))
            })?;
            let path = PathBuf::from(spec);
            let c = Compression::from_path(&path);
            return Ok((f, path, c));
        }
        if let Some((prefix, rest)) = spec.split_once(':') {
            if let Some(f) = self.get(prefix) {
                let path = PathBuf::from(rest);
                let c = Compression::from_path(&path);
                return Ok((f, path, c));
            }
            if let Some(feature) = self.left_out(prefix, |_| false) {
                return Err(Error::not_compiled_in(spec, feature));
            }
        }
        if let Some((scheme, _)) = spec.split_once("://") {
            let url_like = scheme.len() >= 2
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if url_like && !crate::remote::is_remote(spec) && !Path::new(spec).exists() {
                return Err(unknown(format!(
                    "`{scheme}://` is not a URL scheme feedline reads: inputs are local paths \
                     or s3://, gs://, http:// and https:// URLs"
                )));
            }
        }
        let path = PathBuf::from(spec);
        if path.is_dir() {
            let glob = format!("{}/*", spec.trim_end_matches('/'));
            return Err(unknown(format!(
                "is a directory: give the files in it, e.g. the glob `{glob}` \
                 (or `{glob}.EXT` for one kind)"
            )));
        }
        let c = Compression::from_path(&path);
        let base = if c == Compression::None {
            path.clone()
        } else {
            path.with_extension("")
        };
        let ext = base
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .ok_or_else(|| {
                unknown(
                    "no extension to choose a format by; add a FORMAT: prefix (`npy:PATH`) \
                     or name the format for every file"
                        .into(),
                )
            })?;
        let by_ext = |f: &Arc<dyn Format>| f.extensions().iter().any(|x| *x == ext);
        if let Some(feature) = self.left_out("", |x| x == ext) {
            if !self.formats.iter().any(by_ext) {
                return Err(Error::not_compiled_in(spec, feature));
            }
        }
        let f = self
            .formats
            .iter()
            .find(|f| by_ext(f))
            .cloned()
            .ok_or_else(|| {
                unknown(format!(
                    "no format for extension `.{ext}` (known: {}); add a FORMAT: prefix (`npy:PATH`) \
                     or name the format for every file",
                    self.names().join(", ")
                ))
            })?;
        Ok((f, path, c))
    }

    /// The feature that would give a built-in format this build leaves out,
    /// named `name` or with an extension `ext` accepts, unless a format of
    /// that name is registered (a user's own Parquet reader).
    fn left_out(&self, name: &str, ext: impl Fn(&str) -> bool) -> Option<Feature> {
        /// The built-in formats behind a feature: name, extensions, feature.
        const GATED: &[(&str, &[&str], Feature)] = &[
            ("parquet", &["parquet", "pq"], Feature::Parquet),
            ("arrow", &["arrow", "feather"], Feature::Arrow),
            ("mds", &["mds"], Feature::Mds),
        ];
        GATED
            .iter()
            .find(|(n, exts, f)| {
                !f.enabled() && (*n == name || exts.iter().any(|x| ext(x))) && self.get(n).is_none()
            })
            .map(|(_, _, f)| *f)
    }

    /// Resolve `spec` and open it. An explicit `opts.compression` wins over the extension.
    pub fn open(
        &self,
        spec: &str,
        explicit: Option<&str>,
        opts: &OpenOptions,
    ) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        let (f, path, c) = self.resolve(spec, explicit)?;
        let mut opts = opts.clone();
        opts.compression.get_or_insert(c);
        f.open(&path, &opts)
    }

    /// The schema `spec`'s file declares, if its format has one
    /// ([`Format::infer_schema`]); otherwise read up to `n` records of
    /// `spec` and infer a schema from them. A bad
    /// record ends the sample (the records before it are used); an error
    /// before any record is returned.
    ///
    /// A local input that is not a regular file — a FIFO, `/dev/stdin` or
    /// a pipe such as `<(zcat x.tfrecord.gz)`, a device — is refused
    /// ([`Error::BadFile`] saying to give a schema) before it is opened: it
    /// can be read once, and the records read to infer a schema would be
    /// gone for the reader that opens it next (which would wait for ever
    /// for a writer, or start in the middle of a record).
    pub fn infer_schema(&self, spec: &str, explicit: Option<&str>, n: usize) -> Result<Schema> {
        let (f, path, _) = self.resolve(spec, explicit)?;
        refuse_a_stream(&path)?;
        if let Some(declared) = f.infer_schema(&path) {
            return declared;
        }
        let mut r = self.open(spec, explicit, &OpenOptions::default())?;
        let mut recs = Vec::new();
        while recs.len() < n {
            match r.next_record() {
                Ok(Some(rec)) => recs.push(rec),
                Ok(None) => break,
                Err(e) if !recs.is_empty() => {
                    log::warn!(
                        "schema inferred from the {} records before: {e}",
                        recs.len()
                    );
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if recs.is_empty() {
            return Err(Error::Schema(format!(
                "{spec}: no records to infer a schema from"
            )));
        }
        let n = recs.len();
        Ok(f.infer_from_records(&recs)?.inferred_from(format!(
            "the first {n} record{} of {spec}",
            if n == 1 { "" } else { "s" }
        )))
    }
}

/// Refuse to infer a schema from `path` if it is a local stream (not a
/// regular file, not a directory): see [`Registry::infer_schema`].
fn refuse_a_stream(path: &Path) -> Result<()> {
    if crate::remote::is_remote(&path.to_string_lossy()) {
        return Ok(());
    }
    // `metadata` follows links (`/dev/stdin` → `/proc/self/fd/0` → the
    // pipe) and never opens the file (opening a FIFO waits for a writer).
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => Err(Error::BadFile {
            path: path.to_path_buf(),
            what: "is a stream (a FIFO, a pipe or a device), which can be read only once: \
                   inferring a schema would consume its first records; give the schema \
                   (`--schema FILE` on the command line, `schema=` in Python, \
                   `LoaderBuilder::schema` in Rust)"
                .into(),
        }),
        _ => Ok(()),
    }
}
