//! `shuffle_mode` `global` and `block`: every pass an exact permutation of
//! every record of the pass, or of the records within each block of about
//! `shuffle` records (a slice of each file of a group of the pass's files
//! in a permuted order) ([`feedline::global_order`]), read by position
//! through each file's record index ([`feedline::record_index`]).
//!
//! This module owns both modes (they differ only in their order). At settling
//! ([`settle`], called once by `pipeline::prepare`) it indexes every input
//! (in parallel, from the index directory's cache) and puts in place of each
//! file set's files the [`SEGMENTS`] runs of its order: inputs
//! `global-order:TAG/SET/RUN`, read by the [`RunsFormat`] registered for
//! them, whose record `i` is position `i` of the run in the pass being
//! read. The stages downstream see ordinary inputs: the readers read runs
//! as files (a rank reads its stride of every run, so ranks are disjoint
//! and cover the pass), the shuffle stage takes them in run order
//! (deterministic mode, no pool), and what was delivered is a range of
//! positions per run — a checkpoint of the same size for a thousand
//! records or a billion, and an elastic resume goes on with the rest of
//! each run. A run's reader ([`RunReader`]) reads a chunk's records in the
//! order's sequence, each by its position in its file (one positioned
//! read each, the offset-table pages shared); in `block` mode it first
//! reads a block's records of each file with one read where they take at
//! most [`BLOCK_BYTES_HELD`], and serves them from memory until the block
//! ends.
//!
//! A batch's origins name positions of runs; [`real_origin`] gives the
//! file and record each stands for (the command's trace and Python's
//! provenance show those).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::global_order::{segment_range, BlockView, GlobalOrder, SEGMENTS};
use feedline::plan::{RecordStride, ShardBy};
use feedline::record_index::{default_index_dir, IndexKind, RecordIndex};
use feedline::{Chunk, Error, Location, Origin, Record, SourceId};
use rayon::prelude::*;

use crate::config::{PipelineConfig, ShuffleMode, BLOCK_BYTES_HELD};
use crate::error::PipelineError;
use crate::setting::{Setting, SettingError, Value};

/// The format name (and input prefix) of the runs.
pub(crate) const RUNS_FORMAT: &str = "global-order";

/// Files read by position kept open by one run reader, at most.
const OPEN_FILES: usize = 64;

/// Mean bytes of a record above which a block's records are not held:
/// records this large are framed from their ends and left in their files
/// for the batch's copy to read (a read of the whole range would read
/// them twice).
const HELD_RECORD_BYTES: u64 = 64 << 10;

/// Entries of a page of a record index's offset table (32 KiB).
const INDEX_PAGE: u64 = 4096;

/// Pages of offset tables one run reader refers to, at most (8 MiB): the
/// memory a reader's indexes take, whatever the dataset's size.
const INDEX_PAGES_HELD: usize = 256;

/// Pages of offset tables a file set's run readers share, at most (32 MiB):
/// a page is read from its index file once for all of them, not once per
/// run. With [`INDEX_PAGES_HELD`], the indexes of a pipeline hold at most
/// 32 MiB plus 8 MiB per run being read, whatever the dataset's size.
const SHARED_INDEX_PAGES: usize = 1024;

/// A page of an offset table: its file and its number, as one key.
fn page_key(file: usize, page: u64) -> u64 {
    ((file as u64) << 40) ^ page
}

/// Hashes a [`page_key`] by one multiplication (the keys are not chosen by
/// anybody who could make them collide).
#[derive(Default)]
struct PageKeyHasher(u64);

impl std::hash::Hasher for PageKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, k: u64) {
        self.0 = (k ^ (k >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Pages of offset tables by [`page_key`].
type Pages = HashMap<u64, Arc<[u64]>, std::hash::BuildHasherDefault<PageKeyHasher>>;

/// In `block` mode, one block's records of the remote objects it spans,
/// fetched once (one ranged GET per object): (first byte, bytes) by file;
/// `None` where the fetch failed (each reader then reads its records one
/// GET at a time, and their errors name them).
#[cfg(feature = "remote")]
type RemoteBlock = OnceLock<Option<HashMap<usize, (u64, feedline::remote::Bytes)>>>;

/// One file set as the global order reads it.
pub(crate) struct GlobalSet {
    /// The set's index (the order's stream).
    set: u64,
    /// The order's seed.
    seed: u64,
    /// Records per block in `block` mode (`None`: `global`, every record
    /// permuted).
    block: Option<u64>,
    /// The set's files as given.
    files: Vec<String>,
    /// Each file's format and path, resolved.
    formats: Vec<(Arc<dyn Format>, PathBuf)>,
    /// Each file's name as its records carry it (its path, interned once).
    sources: Vec<SourceId>,
    /// Each file's record index.
    indexes: Vec<RecordIndex>,
    /// Records per file.
    counts: Vec<u64>,
    /// How files are opened.
    open: OpenOptions,
    /// The latest pass's order (made once per pass per process).
    order: RwLock<Option<(u64, Arc<GlobalOrder>)>>,
    /// Pages of the offset tables that its run readers share (at most
    /// [`SHARED_INDEX_PAGES`]).
    pages: parking_lot::Mutex<Pages>,
    /// In `block` mode, the blocks of remote objects that its run readers
    /// hold, by (pass, the block's first position): a block that several
    /// runs span is fetched once while any of their readers holds it, not
    /// once per run. Weak, so a block lives only while a reader holds it
    /// (within that reader's [`BLOCK_BYTES_HELD`]) or is the pipeline's
    /// last one fetched ([`LastRemoteBlock`]).
    #[cfg(feature = "remote")]
    remote_blocks: parking_lot::Mutex<HashMap<(u64, u64), std::sync::Weak<RemoteBlock>>>,
    /// The last blocks of remote objects fetched for any run reader of the
    /// pipeline (shared by its sets): the one a reader entered, kept for
    /// the next run in it (so one reader too reads a block that runs span
    /// with one fetch), and those after it, fetched ahead.
    #[cfg(feature = "remote")]
    last_remote: LastRemoteBlocks,
}

/// Bytes of blocks of remote objects a pipeline keeps besides its
/// readers' own: the block entered last and those after it, fetched
/// ahead (at most [`BLOCK_BYTES_HELD`] of them).
#[cfg(feature = "remote")]
const REMOTE_BYTES_KEPT: u64 = 2 * BLOCK_BYTES_HELD;

/// Blocks of remote objects fetched ahead of the one entered, at most (a
/// small block's GETs are many and small: several in flight hide their
/// latency).
#[cfg(feature = "remote")]
const REMOTE_BLOCKS_AHEAD: usize = 4;

/// The last blocks of remote objects fetched for a pipeline's run readers,
/// with their bytes, newest last, within [`REMOTE_BYTES_KEPT`] together
/// (one list for all its sets: with each reader's own block, at most
/// `readers + 2` times [`BLOCK_BYTES_HELD`] are held).
#[cfg(feature = "remote")]
type LastRemoteBlocks =
    Arc<parking_lot::Mutex<std::collections::VecDeque<(Arc<RemoteBlock>, u64)>>>;

/// One ranged GET of a block: file, URL, object version, bytes `offset..stop`.
#[cfg(feature = "remote")]
type RemotePart<'a> = (
    usize,
    std::borrow::Cow<'a, str>,
    &'a feedline::remote::ObjectInfo,
    u64,
    u64,
);

impl GlobalSet {
    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Page `page` of file `file`'s offset table: the shared one, else read
    /// from the index file (and shared while there is room).
    fn page(&self, file: usize, page: u64) -> feedline::Result<Arc<[u64]>> {
        let key = page_key(file, page);
        if let Some(p) = self.pages.lock().get(&key) {
            return Ok(p.clone());
        }
        let entries: Arc<[u64]> = self.indexes[file]
            .offsets(page * INDEX_PAGE, INDEX_PAGE)?
            .into();
        let mut shared = self.pages.lock();
        if shared.len() >= SHARED_INDEX_PAGES {
            shared.clear();
        }
        shared.insert(key, entries.clone());
        Ok(entries)
    }

    fn order(&self, pass: u64) -> Result<Arc<GlobalOrder>, Error> {
        if let Some((p, o)) = &*self.order.read().expect("order lock") {
            if *p == pass {
                return Ok(o.clone());
            }
        }
        let o = Arc::new(match self.block {
            None => GlobalOrder::new(&self.counts, self.seed, pass, self.set)?,
            Some(b) => GlobalOrder::blocks(&self.counts, b, self.seed, pass, self.set)?,
        });
        *self.order.write().expect("order lock") = Some((pass, o.clone()));
        Ok(o)
    }

    /// The block of remote objects at `key` (pass, first position) that
    /// another run reader holds, else a new one to fetch.
    #[cfg(feature = "remote")]
    fn remote_block(&self, key: (u64, u64)) -> Arc<RemoteBlock> {
        let mut blocks = self.remote_blocks.lock();
        if let Some(b) = blocks.get(&key).and_then(std::sync::Weak::upgrade) {
            return b;
        }
        blocks.retain(|_, b| b.strong_count() > 0);
        let b = Arc::new(RemoteBlock::new());
        blocks.insert(key, Arc::downgrade(&b));
        b
    }

    /// Keep `block` (of `bytes`, entered or being fetched ahead) among the
    /// pipeline's last blocks, letting go of the oldest while they take
    /// more than [`REMOTE_BYTES_KEPT`].
    #[cfg(feature = "remote")]
    fn keep_last(&self, block: &Arc<RemoteBlock>, bytes: u64) {
        let mut kept = self.last_remote.lock();
        if kept.iter().any(|(b, _)| Arc::ptr_eq(b, block)) {
            return;
        }
        kept.push_back((block.clone(), bytes));
        while kept.len() > 1 && kept.iter().map(|(_, n)| n).sum::<u64>() > REMOTE_BYTES_KEPT {
            kept.pop_front();
        }
    }

    /// Whether the block at `key` is held or being fetched.
    #[cfg(feature = "remote")]
    fn has_remote_block(&self, key: (u64, u64)) -> bool {
        (self.remote_blocks.lock().get(&key)).is_some_and(|b| b.strong_count() > 0)
    }

    /// Forget the block at `key` (its fetch failed): the next reader to
    /// ask fetches it anew.
    #[cfg(feature = "remote")]
    fn forget_remote_block(&self, key: (u64, u64)) {
        self.remote_blocks.lock().remove(&key);
    }

    /// The ranged GETs of `view`'s records of remote objects: one per
    /// object whose slice holds two records or more, while they take at
    /// most [`BLOCK_BYTES_HELD`] together and their records are not large
    /// ones; `span` gives a slice's bytes.
    #[cfg(feature = "remote")]
    fn remote_parts(
        &self,
        view: &BlockView,
        mut span: impl FnMut(usize, u64, u64) -> feedline::Result<Option<(u64, u64)>>,
    ) -> feedline::Result<Vec<RemotePart<'_>>> {
        let mut parts = Vec::new();
        let mut bytes = 0;
        for &(file, first, end) in view.slices() {
            let Some(info) = self.indexes[file].remote_info() else {
                continue;
            };
            if end - first < 2 {
                continue;
            }
            let Some((offset, stop)) = span(file, first, end)? else {
                continue;
            };
            if bytes + (stop - offset) > BLOCK_BYTES_HELD
                || (stop - offset) / (end - first) >= HELD_RECORD_BYTES
            {
                continue;
            }
            bytes += stop - offset;
            parts.push((
                file,
                self.formats[file].1.to_string_lossy(),
                info,
                offset,
                stop,
            ));
        }
        Ok(parts)
    }

    /// Bytes of records `first..last` of `file`, through the shared pages.
    #[cfg(feature = "remote")]
    fn shared_span(
        &self,
        file: usize,
        first: u64,
        last: u64,
    ) -> feedline::Result<Option<(u64, u64)>> {
        if !self.indexes[file].has_offsets() {
            return Ok(None);
        }
        let at = |i: u64| -> feedline::Result<u64> {
            let page = self.page(file, i / INDEX_PAGE)?;
            (page.get((i % INDEX_PAGE) as usize).copied()).ok_or_else(|| Error::BadFile {
                path: self.formats[file].1.clone(),
                what: format!(
                    "record {i} asked of an index of {} records",
                    self.counts[file]
                ),
            })
        };
        let (start, end) = (at(first)?, at(last)?);
        self.indexes[file].checked_span(first, start, end).map(Some)
    }

    /// Fetch the block of `view` into `block`, its GETs side by side on
    /// threads of their own; `None` in the block (and the error returned)
    /// if one failed.
    #[cfg(feature = "remote")]
    fn fetch_block(&self, block: &RemoteBlock, parts: &[RemotePart<'_>]) -> Option<Error> {
        let mut failed = None;
        block.get_or_init(|| {
            let got: Vec<feedline::Result<(usize, u64, feedline::remote::Bytes)>> =
                std::thread::scope(|s| {
                    let gets: Vec<_> = (parts.iter())
                        .map(|(file, url, info, offset, stop)| {
                            s.spawn(move || {
                                feedline::remote::read_range(url, info, *offset, stop - offset)
                                    .map(|b| (*file, *offset, b))
                                    .map_err(|e| Error::io(url.as_ref(), e.into_io()))
                            })
                        })
                        .collect();
                    (gets.into_iter())
                        .map(|g| g.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                        .collect()
                });
            match got.into_iter().collect::<feedline::Result<Vec<_>>>() {
                Ok(parts) => Some(parts.into_iter().map(|(f, o, b)| (f, (o, b))).collect()),
                Err(e) => {
                    failed = Some(e);
                    None
                }
            }
        });
        failed
    }

    /// Fetch the blocks after `view` of `pass`'s `order` ahead, each on a
    /// thread of its own, unless being fetched or held already: at most
    /// [`REMOTE_BLOCKS_AHEAD`], of [`BLOCK_BYTES_HELD`] together, and none
    /// past the pass's end; each kept among the last blocks from the start
    /// (the bound counts it while it is fetched).
    #[cfg(feature = "remote")]
    fn fetch_ahead(self: &Arc<Self>, pass: u64, order: &Arc<GlobalOrder>, view: &BlockView) {
        let mut next = view.end();
        let mut ahead = 0;
        for _ in 0..REMOTE_BLOCKS_AHEAD {
            if next >= order.len() {
                return;
            }
            let Some(next_view) = order.block_view(next) else {
                return;
            };
            let at = next;
            next = next_view.end();
            if self.has_remote_block((pass, at)) {
                continue;
            }
            let Ok(parts) = self.remote_parts(&next_view, |f, a, b| self.shared_span(f, a, b))
            else {
                return; // the reader that enters it names the error
            };
            let bytes: u64 = parts.iter().map(|p| p.4 - p.3).sum();
            if parts.is_empty() || ahead + bytes > BLOCK_BYTES_HELD {
                return;
            }
            ahead += bytes;
            let block = self.remote_block((pass, at));
            self.keep_last(&block, bytes);
            let set = self.clone();
            let spawned = std::thread::Builder::new()
                .name("feedline-block-ahead".into())
                .spawn(move || {
                    let parts = set.remote_parts(&next_view, |f, a, b| set.shared_span(f, a, b));
                    let failed = match parts {
                        Ok(parts) => set.fetch_block(&block, &parts),
                        Err(e) => Some(e),
                    };
                    // The reader that enters it fetches it anew (and its
                    // error names the object).
                    if let Some(e) = failed {
                        log::debug!("block at {at} of pass {pass} fetched ahead: {e}");
                        set.forget_remote_block((pass, at));
                    }
                });
            if spawned.is_err() {
                self.forget_remote_block((pass, at));
                return;
            }
        }
    }
}

/// Every run of every settled pipeline in this process, by its source id:
/// its set and run number ([`real_origin`] reads it).
type RunTable = RwLock<HashMap<SourceId, (Arc<GlobalSet>, u64)>>;

/// Every run of every settled pipeline in this process (see [`runs`]).
fn runs() -> &'static RunTable {
    static RUNS: OnceLock<RunTable> = OnceLock::new();
    RUNS.get_or_init(Default::default)
}

/// The file and record that `origin` of a batch of `pass` stands for: in
/// `global` mode a batch's origins name positions of the pass's order (a
/// run and a position in it); any other origin is its own.
///
/// ```
/// use feedline::{Origin, SourceId};
/// let o = Origin::new(SourceId::intern("data/a.tfrecord"), 3);
/// assert_eq!(feedline_actors::real_origin(0, o), o);
/// ```
pub fn real_origin(pass: u64, origin: Origin) -> Origin {
    real_origins(pass, &[origin])[0]
}

/// [`real_origin`] of each of `origins` (a batch's, of `pass`), the table
/// of runs read once and each run's place in the order found once.
///
/// ```
/// use feedline::{Origin, SourceId};
/// let o = [Origin::new(SourceId::intern("data/a.tfrecord"), 3)];
/// assert_eq!(feedline_actors::real_origins(0, &o), o);
/// ```
pub fn real_origins(pass: u64, origins: &[Origin]) -> Vec<Origin> {
    /// A run of the order: its set, the pass's order, and its positions.
    type Run = Option<(Arc<GlobalSet>, Arc<GlobalOrder>, u64, u64)>;
    let table = runs().read().expect("runs lock");
    if table.is_empty() {
        return origins.to_vec();
    }
    let mut last: Option<(SourceId, Run)> = None;
    (origins.iter())
        .map(|&o| {
            if last.as_ref().is_none_or(|(s, _)| *s != o.source) {
                let run = table.get(&o.source).and_then(|(set, run)| {
                    let order = set.order(pass).ok()?;
                    let (start, end) = segment_range(order.len(), *run);
                    Some((set.clone(), order, start, end))
                });
                last = Some((o.source, run));
            }
            match last.as_ref().and_then(|(_, run)| run.as_ref()) {
                Some((set, order, start, end)) if o.record < end - start => {
                    let (file, record) = order.locate(start + o.record);
                    Origin::new(set.sources[file], record)
                }
                _ => o,
            }
        })
        .collect()
}

/// The files behind a settled global order's runs (`config`'s inputs), as
/// their records name them, with their record counts, in order; `None`
/// when `config`'s inputs are no runs.
pub(crate) fn real_files(config: &PipelineConfig) -> Option<Vec<(String, u64)>> {
    let prefix = format!("{RUNS_FORMAT}:");
    let table = runs().read().expect("runs lock");
    let mut sets: Vec<Arc<GlobalSet>> = Vec::new();
    for f in (config.inputs.files.iter()).chain(config.inputs.sets.iter().flat_map(|s| &s.files)) {
        let (set, _) = table.get(&SourceId::intern(f.strip_prefix(&prefix)?))?;
        if !sets.iter().any(|s| Arc::ptr_eq(s, set)) {
            sets.push(set.clone());
        }
    }
    Some(
        (sets.iter())
            .flat_map(|s| {
                (s.formats.iter().zip(&s.counts))
                    .map(|((_, path), &n)| (path.to_string_lossy().into_owned(), n))
            })
            .collect(),
    )
}

/// A stable tag of a set's order: its files, counts, seed and block (so that a
/// checkpoint's run names are those of the same inputs and seed).
fn tag_of(sets: &[Arc<GlobalSet>]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for s in sets {
        eat(&s.seed.to_le_bytes());
        if let Some(b) = s.block {
            eat(b"block");
            eat(&b.to_le_bytes());
        }
        for (f, c) in s.files.iter().zip(&s.counts) {
            eat(f.as_bytes());
            eat(&c.to_le_bytes());
        }
        eat(b"/");
    }
    format!("{h:016x}")
}

/// How `path` of `format` is indexed; an input that cannot be read by
/// position is refused naming it and the modes that read it.
fn index_kind(
    mode: &str,
    spec: &str,
    format: &dyn Format,
    path: &Path,
    c: feedline::format::Compression,
) -> Result<IndexKind, PipelineError> {
    let refuse = |why: String| {
        PipelineError::config(
            SettingError::says(format!("{spec}: {why}: "))
                .with(Setting::ShuffleMode, Value::text(mode))
                .text(" reads records by position; ")
                .with(Setting::ShuffleMode, Value::text("buffer"))
                .text(" (the default) reads it"),
        )
    };
    let remote =
        feedline::remote::is_remote(spec) || feedline::remote::is_remote(&path.to_string_lossy());
    if c != feedline::format::Compression::None {
        return Err(refuse(format!("it is {c:?}-compressed")));
    }
    if remote {
        if !cfg!(feature = "remote") {
            return Err(refuse("remote inputs need the `remote` feature".into()));
        }
        if format.name() != "tfrecord" {
            return Err(refuse(format!(
                "a remote input is read by position only as uncompressed TFRecord, not {}",
                format.name()
            )));
        }
        return Ok(IndexKind::TfRecordFrames);
    }
    if !path.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    Ok(match format.name() {
        "tfrecord" => IndexKind::TfRecordFrames,
        "jsonl" => IndexKind::JsonLines,
        _ => IndexKind::Count,
    })
}

/// Index the files of one set and make its [`GlobalSet`].
fn index_set(
    config: &PipelineConfig,
    set: u64,
    seed: u64,
    block: Option<u64>,
    files: &[String],
    dir: &Path,
    #[cfg(feature = "remote")] last_remote: &LastRemoteBlocks,
) -> Result<GlobalSet, PipelineError> {
    let mode = config.order.shuffle_mode.name();
    let registry = &config.inputs.registry;
    let explicit = config.inputs.format.as_deref();
    let mut open = config.reading.open.clone();
    open.start_record = 0;
    // Large rows stay in their files (a chunk's column refers to several)
    // with their CRCs checked on the batch's copy, as the readers do —
    // where the bad-record policy lets a check wait.
    open.defer_checksums &= crate::bad_records::checksums_may_wait(&config.faults.error_policy);
    let resolved: Vec<(Arc<dyn Format>, PathBuf, IndexKind)> = files
        .iter()
        .map(|spec| {
            let (f, path, c) = registry.resolve(spec, explicit)?;
            let c = open.compression.unwrap_or(c);
            let kind = index_kind(mode, spec, f.as_ref(), &path, c)?;
            Ok((f, path, kind))
        })
        .collect::<Result<_, PipelineError>>()?;
    let indexes: Vec<RecordIndex> = resolved
        .par_iter()
        .map(|(f, path, kind)| {
            #[cfg(feature = "remote")]
            {
                let url = path.to_string_lossy();
                if feedline::remote::is_remote(&url) {
                    return RecordIndex::open_or_build_remote(&url, *kind, dir);
                }
            }
            RecordIndex::open_or_build(path, *kind, dir, || {
                let mut o = open.clone();
                o.compression = Some(feedline::format::Compression::None);
                let mut r = f.open(path, &o)?;
                if let Some(n) = r.len_hint() {
                    return Ok(n);
                }
                r.skip_to(u64::MAX)?;
                Ok(r.next_index())
            })
        })
        .collect::<Result<_, Error>>()?;
    let counts = indexes.iter().map(|i| i.records()).collect();
    Ok(GlobalSet {
        set,
        seed,
        block,
        files: files.to_vec(),
        sources: (resolved.iter())
            .map(|(_, p, _)| SourceId::intern(&p.to_string_lossy()))
            .collect(),
        formats: resolved.into_iter().map(|(f, p, _)| (f, p)).collect(),
        indexes,
        counts,
        open,
        order: RwLock::new(None),
        pages: Default::default(),
        #[cfg(feature = "remote")]
        remote_blocks: Default::default(),
        #[cfg(feature = "remote")]
        last_remote: last_remote.clone(),
    })
}

/// Settle a `global` pipeline (its inputs expanded, its schema known): index
/// every input, and give each file set its runs in place of its files,
/// read in run order by stride (the rank's share), deterministically,
/// without a pool.
pub(crate) fn settle(config: &mut PipelineConfig) -> Result<(), PipelineError> {
    let dir = (config.reading.index_dir.clone()).unwrap_or_else(default_index_dir);
    let seed = config.order.seed;
    let mode = config.order.shuffle_mode;
    // Block mode's blocks are of `shuffle` records (the pool's size in
    // buffer mode); the settings' check refused 0.
    let block = (mode == ShuffleMode::Block).then_some(config.order.shuffle.max(1) as u64);
    #[cfg(feature = "remote")]
    let last_remote = LastRemoteBlocks::default();
    let index = |set: u64, files: &[String]| {
        index_set(
            config,
            set,
            seed,
            block,
            files,
            &dir,
            #[cfg(feature = "remote")]
            &last_remote,
        )
        .map(Arc::new)
    };
    let sets: Vec<Arc<GlobalSet>> = if config.inputs.sets.is_empty() {
        vec![index(0, &config.inputs.files)?]
    } else {
        (config.inputs.sets.iter().enumerate())
            .map(|(i, s)| index(i as u64, &s.files))
            .collect::<Result<_, _>>()?
    };
    let tag = tag_of(&sets);
    let format = Arc::new(RunsFormat {
        sets: sets.clone(),
        tag: tag.clone(),
    });
    let mut all = Vec::new();
    {
        let mut table = runs().write().expect("runs lock");
        for (i, s) in sets.iter().enumerate() {
            let names: Vec<String> = (0..SEGMENTS)
                .map(|run| {
                    let path = format!("{tag}/{i}/{run}");
                    table.insert(SourceId::intern(&path), (s.clone(), run));
                    format!("{RUNS_FORMAT}:{path}")
                })
                .collect();
            if let Some(fs) = config.inputs.sets.get_mut(i) {
                fs.files = names.clone();
            }
            all.extend(names);
        }
    }
    log::info!(
        "shuffle_mode {}: {} records in {} sets indexed under {}",
        mode.name(),
        sets.iter().map(|s| s.total()).sum::<u64>(),
        sets.len(),
        dir.display()
    );
    let mut registry: Registry = config.inputs.registry.clone();
    registry.register(format);
    config.inputs.registry = registry;
    config.inputs.files = all;
    config.inputs.format = None;
    config.inputs.shard_by = ShardBy::Record;
    config.order.shuffle_files = false;
    config.order.deterministic = true;
    config.order.shuffle = 0;
    config.order.min_pool = None;
    // A checkpoint is a range of positions per run: no snapshot of a draw.
    config.resume.snapshot_every = 0;
    Ok(())
}

/// `config` (a `global` pipeline's, as given) with its inputs expanded and
/// settled as [`settle`] does: the inputs a checkpoint of it names.
pub(crate) fn as_runs(config: &PipelineConfig) -> Result<PipelineConfig, PipelineError> {
    let mut c = config.clone();
    let prefix = format!("{RUNS_FORMAT}:");
    if (c.inputs.files.iter()).any(|f| f.starts_with(&prefix)) {
        return Ok(c); // settled already
    }
    if c.inputs.sets.is_empty() {
        c.inputs.files = feedline::plan::expand_inputs(&c.inputs.files)?;
    } else {
        for s in &mut c.inputs.sets {
            s.files = feedline::plan::expand_inputs(&s.files)?;
        }
    }
    settle(&mut c)?;
    Ok(c)
}

/// The format of the runs of one settled pipeline's orders.
pub(crate) struct RunsFormat {
    sets: Vec<Arc<GlobalSet>>,
    tag: String,
}

impl Format for RunsFormat {
    fn name(&self) -> &str {
        RUNS_FORMAT
    }

    fn extensions(&self) -> &[&str] {
        &[]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> feedline::Result<Box<dyn RecordReader>> {
        let name = path.to_string_lossy();
        let bad = || {
            Error::Config(format!(
                "{RUNS_FORMAT}:{name}: not a run of this pipeline's order"
            ))
        };
        let mut parts = name.split('/');
        let (Some(tag), Some(set), Some(run), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let set: usize = set.parse().map_err(|_| bad())?;
        let run: u64 = run.parse().map_err(|_| bad())?;
        if tag != self.tag || set >= self.sets.len() || run >= SEGMENTS {
            return Err(bad());
        }
        let s = self.sets[set].clone();
        let order = s.order(opts.pass)?;
        let (start, end) = segment_range(order.len(), run);
        Ok(Box::new(RunReader {
            source: SourceId::intern(&name),
            set: s,
            #[cfg(feature = "remote")]
            pass: opts.pass,
            order,
            start,
            len: end - start,
            keep: opts.keep,
            next: opts.start_record,
            readers: HashMap::new(),
            checked: Vec::new(),
            avg_bytes: 0,
            pages: Pages::default(),
            held: None,
            view: None,
            #[cfg(feature = "remote")]
            remote_held: None,
        }))
    }
}

/// Reads one run of a pass's order: record `i` is the record at position
/// `start + i` of the order; only the positions its stride keeps.
pub(crate) struct RunReader {
    source: SourceId,
    set: Arc<GlobalSet>,
    /// The pass whose order it reads (remote blocks are shared by it).
    #[cfg(feature = "remote")]
    pass: u64,
    order: Arc<GlobalOrder>,
    start: u64,
    len: u64,
    keep: RecordStride,
    /// The next position of the run (not yet read).
    next: u64,
    /// Files open for reading by position (at most [`OPEN_FILES`]).
    readers: HashMap<usize, Box<dyn RecordReader>>,
    /// Files checked unchanged since they were indexed.
    checked: Vec<usize>,
    /// Payload bytes of a record, as the last chunk had them.
    avg_bytes: usize,
    /// Pages of the files' offset tables, by (file, page).
    pages: Pages,
    /// In `block` mode: the block being read, and the files whose records
    /// in it were looked at (their readers hold those records where they
    /// could) with the bytes held.
    held: Option<(u64, Vec<usize>, u64)>,
    /// In `block` mode, the block being read, looked up once.
    view: Option<BlockView>,
    /// In `block` mode, the block's records of remote objects, read with
    /// one ranged GET per object, shared with the other run readers in
    /// the block ([`GlobalSet::remote_block`]).
    #[cfg(feature = "remote")]
    remote_held: Option<Arc<RemoteBlock>>,
}

impl RunReader {
    /// The file and record at position `p` of the run: in `block` mode
    /// through the block being read (looked up once per block).
    fn locate(&mut self, p: u64) -> (usize, u64) {
        let at = self.start + p;
        if self.order.block().is_none() {
            return self.order.locate(at);
        }
        if !self.view.as_ref().is_some_and(|v| v.holds(at)) {
            self.view = self.order.block_view(at);
        }
        match &self.view {
            Some(v) => v.locate(at),
            None => self.order.locate(at),
        }
    }

    /// In `block` mode, before position `p`'s record of `file` is read:
    /// on a new block, let go of the last block's files (their readers and
    /// the bytes they hold); on the first record of `file` in this block,
    /// have its reader hold the block's records of the file, read at once,
    /// where they take at most what is left of [`BLOCK_BYTES_HELD`], are
    /// not large ones ([`HELD_RECORD_BYTES`]) and the reader can. A range
    /// that cannot be held is read a record at a time, as in `global` mode
    /// (whose errors name the record).
    fn hold_block(&mut self, p: u64, file: usize) -> feedline::Result<()> {
        let Some(view) = self.view.as_ref().filter(|v| v.holds(self.start + p)) else {
            return Ok(());
        };
        let block = view.first();
        let Some((first, end)) = view.records_of(file) else {
            return Ok(());
        };
        match &mut self.held {
            Some((b, files, _)) if *b == block => {
                if files.contains(&file) {
                    return Ok(());
                }
                files.push(file);
            }
            last => {
                if let Some((_, files, _)) = last.take() {
                    for f in files {
                        self.readers.remove(&f);
                    }
                }
                #[cfg(feature = "remote")]
                {
                    self.remote_held = None;
                }
                *last = Some((block, vec![file], 0));
                #[cfg(feature = "remote")]
                self.fetch_remote_block()?;
            }
        }
        #[cfg(feature = "remote")]
        if self.set.indexes[file].remote_info().is_some() {
            return Ok(()); // fetched with its block, or read a record at a time
        }
        if end - first < 2 {
            return Ok(());
        }
        let Some((offset, stop)) = self.span(file, first, end)? else {
            return Ok(());
        };
        let held = self.held.as_ref().map_or(0, |h| h.2);
        if held + (stop - offset) > BLOCK_BYTES_HELD
            || (stop - offset) / (end - first) >= HELD_RECORD_BYTES
        {
            return Ok(());
        }
        let r = self.reader_at(file, first, end - 1)?;
        if r.hold_span(offset, stop)? {
            if let Some(h) = &mut self.held {
                h.2 += stop - offset;
            }
        }
        Ok(())
    }

    /// The first position at or after `i` the stride keeps.
    fn kept_from(&self, i: u64) -> u64 {
        let RecordStride { offset, step } = self.keep;
        if step <= 1 {
            return i;
        }
        let r = i % step;
        if r <= offset {
            i - r + offset
        } else {
            i - r + step + offset
        }
    }

    /// Entry `i` of file `file`'s offset table, from the pages held.
    fn offset(&mut self, file: usize, i: u64) -> feedline::Result<u64> {
        let page = i / INDEX_PAGE;
        let key = page_key(file, page);
        let entries = match self.pages.get(&key) {
            Some(p) => p,
            None => {
                if self.pages.len() >= INDEX_PAGES_HELD {
                    self.pages.clear();
                }
                let p = self.set.page(file, page)?;
                self.pages.entry(key).or_insert(p)
            }
        };
        (entries.get((i - page * INDEX_PAGE) as usize).copied()).ok_or_else(|| Error::BadFile {
            path: self.set.formats[file].1.clone(),
            what: format!(
                "record {i} asked of an index of {} records",
                self.set.counts[file]
            ),
        })
    }

    /// Bytes of records `first..last` of `file` (`None` where its index has no offsets).
    fn span(&mut self, file: usize, first: u64, last: u64) -> feedline::Result<Option<(u64, u64)>> {
        if !self.set.indexes[file].has_offsets() {
            return Ok(None);
        }
        let (start, end) = (self.offset(file, first)?, self.offset(file, last)?);
        self.set.indexes[file]
            .checked_span(first, start, end)
            .map(Some)
    }

    /// The reader of file `file`, positioned at `record` (reading on from
    /// there), through the record index where it has offsets.
    fn reader_at(
        &mut self,
        file: usize,
        record: u64,
        last: u64,
    ) -> feedline::Result<&mut Box<dyn RecordReader>> {
        if !self.checked.contains(&file) {
            self.set.indexes[file].check_unchanged()?;
            self.checked.push(file);
        }
        if self.readers.len() >= OPEN_FILES && !self.readers.contains_key(&file) {
            self.readers.clear();
        }
        let span = self.span(file, record, last + 1)?;
        let reopen = match self.readers.get_mut(&file) {
            None => true,
            Some(r) => match span {
                Some((offset, end)) => !r.seek_indexed(record, offset, end)?,
                None if r.next_index() <= record => {
                    r.skip_to(record)?;
                    false
                }
                None => true,
            },
        };
        if reopen {
            let (format, path) = &self.set.formats[file];
            let mut o = self.set.open.clone();
            o.start_record = if span.is_some() { 0 } else { record };
            o.compression = Some(feedline::format::Compression::None);
            let mut r = format.open(path, &o)?;
            if let Some((offset, end)) = span {
                if !r.seek_indexed(record, offset, end)? {
                    r.skip_to(record)?;
                }
            }
            self.readers.insert(file, r);
        }
        Ok(self.readers.get_mut(&file).expect("inserted"))
    }

    /// On entering a block: its records of every remote object, from
    /// another run reader in the block or fetched ahead
    /// ([`GlobalSet::remote_block`]), else fetched at once, one ranged GET
    /// per object, the GETs side by side ([`GlobalSet::remote_parts`]);
    /// the bytes held (and counted in this reader's share) until the block
    /// ends; and the next block fetched ahead. (The GETs run on threads of
    /// their own, so the pipeline's remote counters do not count them; the
    /// process's do.)
    #[cfg(feature = "remote")]
    fn fetch_remote_block(&mut self) -> feedline::Result<()> {
        let Some(view) = self.view.clone() else {
            return Ok(());
        };
        let set = self.set.clone();
        let parts = set.remote_parts(&view, |f, a, b| self.span(f, a, b))?;
        if parts.is_empty() {
            return Ok(());
        }
        let key = (self.pass, view.first());
        let mut block = set.remote_block(key);
        if let Some(e) = set.fetch_block(&block, &parts) {
            set.forget_remote_block(key);
            return Err(e);
        }
        if block.get().is_some_and(|b| b.is_none()) {
            // Fetched ahead, and that failed: fetch it here, where an
            // error reaches the reader.
            set.forget_remote_block(key);
            block = set.remote_block(key);
            if let Some(e) = set.fetch_block(&block, &parts) {
                set.forget_remote_block(key);
                return Err(e);
            }
        }
        set.keep_last(&block, parts.iter().map(|p| p.4 - p.3).sum());
        set.fetch_ahead(self.pass, &self.order, &view);
        if let (Some(Some(parts)), Some((_, files, held))) = (block.get(), &mut self.held) {
            let mut o = set.open.clone();
            o.start_record = 0;
            o.compression = Some(feedline::format::Compression::None);
            for (&file, (_, b)) in parts {
                if !files.contains(&file) {
                    files.push(file);
                }
                *held += b.len() as u64;
                // One reader of the block's bytes per object (its decoder
                // made once), let go with the block.
                let r = feedline::format::tfrecord::TfRecordReader::from_bytes(
                    b.clone(),
                    set.sources[file],
                    &o,
                );
                self.readers.insert(file, Box::new(r));
            }
        }
        self.remote_held = Some(block);
        Ok(())
    }

    /// Read record `record` of file `file` into `chunk`: from its reader,
    /// positioned through the record index, or for a remote object from
    /// the block's bytes held, else with one ranged GET.
    fn read_one(&mut self, file: usize, record: u64, chunk: &mut Chunk) -> feedline::Result<usize> {
        #[cfg(feature = "remote")]
        if self.set.indexes[file].remote_info().is_some() {
            let set = self.set.clone();
            let info = set.indexes[file].remote_info().expect("remote");
            let url = set.formats[file].1.to_string_lossy();
            let Some((offset, end)) = self.span(file, record, record + 1)? else {
                return Err(Error::Config(format!(
                    "{url}: a remote input without offsets"
                )));
            };
            let bad = |e: Error| Error::BadFile {
                path: url.as_ref().into(),
                what: format!("record {record} at byte {offset}: {e}"),
            };
            let held = (self.remote_held.as_ref())
                .and_then(|b| b.get())
                .and_then(|parts| parts.as_ref()?.get(&file))
                .filter(|(base, b)| offset >= *base && end - base <= b.len() as u64);
            if let (Some((base, _)), Some(r)) = (held, self.readers.get_mut(&file)) {
                // From the block's bytes, by their offset in them.
                r.seek_indexed(record, offset - base, end - base)
                    .map_err(bad)?;
                return r.read_chunk(chunk, 1, usize::MAX).map_err(bad);
            }
            let bytes = feedline::remote::read_range(&url, info, offset, end - offset)
                .map_err(|e| Error::io(url.as_ref(), e.into_io()))?;
            let mut o = self.set.open.clone();
            o.start_record = 0;
            o.compression = Some(feedline::format::Compression::None);
            let mut r = feedline::format::tfrecord::TfRecordReader::from_bytes(
                bytes,
                self.set.sources[file],
                &o,
            );
            return r.read_chunk(chunk, 1, usize::MAX).map_err(bad);
        }
        self.reader_at(file, record, record)
            .and_then(|r| r.read_chunk(chunk, 1, usize::MAX))
    }

    /// Read positions `positions` (kept ones, ascending) into `chunk`, in
    /// that order, each straight from its file by its record index, named
    /// as a position of this run: every one up to the first that fails
    /// (its error returned), `self.next` past the last read (the failed one
    /// included).
    fn read_positions(&mut self, chunk: &mut Chunk, positions: &[u64]) -> feedline::Result<usize> {
        let set = self.set.clone();
        let mut n = 0;
        for &p in positions {
            let (file, record) = self.locate(p);
            self.next = p + 1;
            let before = chunk.len();
            let got = self
                .hold_block(p, file)
                .and_then(|()| self.read_one(file, record, chunk));
            let failed = match got {
                Ok(_) if chunk.len() > before => None,
                Ok(_) => Some(Error::BadFile {
                    path: set.formats[file].1.clone(),
                    what: format!(
                        "record {record} is past the file's end (its record index says {} records)",
                        set.counts[file]
                    ),
                }),
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                // A file changed since it was indexed says so; after an
                // error its reader's position is unknown.
                self.readers.remove(&file);
                return Err(match set.indexes[file].check_unchanged() {
                    Err(changed) => changed,
                    Ok(()) => e,
                });
            }
            chunk.rename_row(before, Origin::new(self.source, p));
            n += 1;
        }
        Ok(n)
    }
}

impl RecordReader for RunReader {
    fn next_record(&mut self) -> feedline::Result<Option<Record>> {
        let i = self.kept_from(self.next);
        if i >= self.len {
            self.next = self.len;
            return Ok(None);
        }
        let (file, record) = self.locate(i);
        self.next = i + 1;
        let r = self.reader_at(file, record, record)?;
        let mut rec = r.next_record()?.ok_or_else(|| Error::BadFile {
            path: self.set.formats[file].1.clone(),
            what: format!("record {record} is past the file's end"),
        })?;
        rec.location = Location::new(self.source, i, None);
        Ok(Some(rec))
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> feedline::Result<usize> {
        feedline::format::check_chunk_budget(max_records, max_bytes)?;
        // Sized by the bytes of the records read so far: one record first.
        let by_bytes = max_bytes.checked_div(self.avg_bytes).unwrap_or(1);
        let m = max_records.min(by_bytes.max(1));
        let mut positions = Vec::with_capacity(m);
        let mut i = self.kept_from(self.next);
        while positions.len() < m && i < self.len {
            positions.push(i);
            i = self.kept_from(i + 1);
        }
        if positions.is_empty() {
            self.next = self.len;
            return Ok(0);
        }
        let bytes_before = chunk.payload_bytes();
        let rows_before = chunk.len();
        let read = self.read_positions(chunk, &positions);
        let n = chunk.len() - rows_before;
        if let Some(avg) = (chunk.payload_bytes() - bytes_before).checked_div(n) {
            self.avg_bytes = avg.max(1);
        }
        read
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    fn skip_to(&mut self, record: u64) -> feedline::Result<()> {
        self.next = self.next.max(record.min(self.len));
        Ok(())
    }

    /// Every position is read apart: a bad record costs itself.
    fn can_continue(&self) -> bool {
        true
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }

    fn max_records_left(&self) -> Option<u64> {
        Some(self.keep.count_from(self.next.min(self.len), self.len))
    }
}
