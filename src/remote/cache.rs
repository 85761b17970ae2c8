//! A local cache directory for remote objects (what Mosaic Streaming
//! offers): an object read whole once is kept on disk, and later passes and
//! later runs read the local copy instead of asking the store again.
//!
//! This module owns the directory's layout and its rules:
//! - an entry is one file, `URLHASH-VERSIONHASH-SIZE-CRC.obj`: the hash of
//!   the URL, the hash of its version (the ETag, else the modification
//!   time, as a HEAD request gives them), its size and the CRC-32C of its
//!   bytes. A changed object (new ETag or size) has another name, so it is
//!   fetched again; the stale entry is removed when the new one is in place;
//! - an entry is written while the object is streamed to its reader, into a
//!   temporary file (`.tmp-…`) of the same directory, and becomes an entry
//!   only once every byte arrived: fsync, then an atomic rename. A read that
//!   stops early or fails leaves no entry (its temporary file is removed);
//! - before an entry is used, its length and CRC are checked against its
//!   name; a file that does not match (truncated, corrupt) is removed and
//!   the object is read from the store — a torn or corrupt file is never
//!   read;
//! - the directory is bounded in bytes ([`RemoteCache::max_bytes`]: entries
//!   and temporary files together): room is made before an object is
//!   cached by evicting the least recently used entries (by modification
//!   time, set at every use), never one this process is reading. An
//!   object larger than the bound is streamed without being cached;
//! - several readers and several processes may share a directory: entries
//!   are never written in place (only renamed in whole and removed), and a
//!   reader reads from the file it opened and checked, which stays whole
//!   even if another process evicts it meanwhile (POSIX unlink semantics).
//!   Processes do not know each other's readers, so under contention the
//!   bound can be exceeded by the objects being cached at the same moment.
//!
//! Only streamed reads go through the cache (every format but Parquet, which
//! reads by ranges; see [`crate::remote`]). Without the `remote` feature no
//! object can be fetched: a [`RemoteCache`] can still be named (a
//! pipeline's settings keep one) and measured ([`RemoteCache::used_bytes`]),
//! but it is never filled, so the directory's bookkeeping is unused there.
#![cfg_attr(not(feature = "remote"), allow(dead_code))]

use std::collections::HashMap;
use std::fs::{self, File};
#[cfg(feature = "remote")]
use std::io::Write;
use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};
#[cfg(feature = "remote")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::SystemTime;

use parking_lot::Mutex;

use super::RemoteError;
#[cfg(feature = "remote")]
use super::{Count, RemoteObject};

/// A cache directory for remote objects, bounded in bytes (see the
/// [module](self) for its rules). Cheap to clone: a directory and a bound.
///
/// ```
/// use feedline::remote::cache::RemoteCache;
/// let cache = RemoteCache::new("/tmp/feedline-cache", 10 << 30);
/// assert_eq!(cache.max_bytes(), 10 << 30);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// One entry found in the directory.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

impl RemoteCache {
    /// A cache in `dir` (created when first used) holding at most
    /// `max_bytes`.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        RemoteCache {
            dir: dir.into(),
            max_bytes,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn err(&self, what: impl Into<String>, source: io::Error) -> RemoteError {
        RemoteError::Cache {
            dir: self.dir.clone(),
            what: what.into(),
            source,
        }
    }

    /// Open the object at `url` as a stream from its start: one HEAD
    /// request gives its size and version; a valid entry of that version is
    /// read from disk (no GET), else the object is streamed from the store
    /// and kept once read whole.
    #[cfg(feature = "remote")]
    pub fn open(&self, url: &str) -> Result<Box<dyn Read + Send>, RemoteError> {
        let info = super::head(url)?;
        let count = Count::here();
        let version = match (&info.e_tag, info.mtime_ns) {
            (Some(tag), _) => format!("etag:{tag}"),
            (None, Some(t)) => format!("mtime:{t}"),
            (None, None) => {
                log::debug!("{url}: no ETag nor modification time, not cached");
                return Ok(Box::new(RemoteObject::open_at(url, &info, 0)?));
            }
        };
        let stem = format!("{:016x}-{:016x}-{}", fnv(url), fnv(&version), info.size);
        fs::create_dir_all(&self.dir).map_err(|e| self.err("creating it", e))?;
        if let Some((file, guard)) = self.lookup(&stem, info.size)? {
            count.add(|c| &c.cache_hits, 1);
            count.add(|c| &c.cache_bytes, info.size);
            return Ok(Box::new(Cached {
                file,
                _in_use: guard,
            }));
        }
        let object = RemoteObject::open_at(url, &info, 0)?;
        if info.size > self.max_bytes || !self.make_room(info.size)? {
            log::debug!("{url}: {} bytes do not fit the cache", info.size);
            return Ok(Box::new(object));
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".tmp-{stem}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let file = match File::create(&tmp) {
            Ok(f) => f,
            Err(e) => {
                log::warn!(
                    "remote cache {}: cannot create {}: {e}",
                    self.dir.display(),
                    tmp.display()
                );
                return Ok(Box::new(object));
            }
        };
        Ok(Box::new(Filling {
            object,
            cache: self.clone(),
            fill: Some(Fill {
                file,
                tmp,
                crc: 0,
                written: 0,
            }),
            stem,
            len: info.size,
        }))
    }

    /// The entries in the directory (not the temporary files), and the
    /// bytes of the temporary files.
    fn scan(&self) -> Result<(Vec<Entry>, u64), RemoteError> {
        let mut entries = Vec::new();
        let mut tmp_bytes = 0;
        let dir = fs::read_dir(&self.dir).map_err(|e| self.err("listing it", e))?;
        for d in dir {
            let d = d.map_err(|e| self.err("listing it", e))?;
            let name = d.file_name();
            let name = name.to_string_lossy();
            let Ok(meta) = d.metadata() else { continue }; // removed meanwhile
            if name.starts_with(".tmp-") {
                tmp_bytes += meta.len();
            } else if name.ends_with(".obj") {
                entries.push(Entry {
                    path: d.path(),
                    bytes: meta.len(),
                    used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
        }
        Ok((entries, tmp_bytes))
    }

    /// The entry `stem-CRC.obj`, opened and checked (length and CRC); a
    /// file that fails the check is removed. Its use is marked (its
    /// modification time) and it is claimed against eviction.
    fn lookup(&self, stem: &str, size: u64) -> Result<Option<(File, InUse)>, RemoteError> {
        let prefix = format!("{stem}-");
        let (entries, _) = self.scan()?;
        for e in entries {
            let name = e.path.file_name().unwrap_or_default().to_string_lossy();
            let Some(crc) = name
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix(".obj"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
            else {
                continue;
            };
            let guard = InUse::claim(&e.path);
            let mut file = match File::open(&e.path) {
                Ok(f) => f,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(self.err(format!("opening {}", e.path.display()), err)),
            };
            match check(&mut file, size, crc) {
                Ok(true) => {
                    // Used now: the last to be evicted.
                    if let Err(err) = file.set_modified(SystemTime::now()) {
                        log::debug!("remote cache: cannot mark {} used: {err}", e.path.display());
                    }
                    file.rewind()
                        .map_err(|err| self.err(format!("reading {}", e.path.display()), err))?;
                    return Ok(Some((file, guard)));
                }
                Ok(false) => {
                    log::warn!(
                        "remote cache: {} does not match its name (length or CRC-32C): removed",
                        e.path.display()
                    );
                    let _ = fs::remove_file(&e.path);
                }
                Err(err) => return Err(self.err(format!("reading {}", e.path.display()), err)),
            }
        }
        Ok(None)
    }

    /// Evict least recently used entries (not in use here) until
    /// `incoming` more bytes fit; false if they cannot.
    fn make_room(&self, incoming: u64) -> Result<bool, RemoteError> {
        let (mut entries, tmp_bytes) = self.scan()?;
        let mut total = tmp_bytes + entries.iter().map(|e| e.bytes).sum::<u64>();
        entries.sort_by(|a, b| (a.used, &a.path).cmp(&(b.used, &b.path)));
        for e in entries {
            if total.saturating_add(incoming) <= self.max_bytes {
                break;
            }
            if InUse::busy(&e.path) {
                continue;
            }
            match fs::remove_file(&e.path) {
                Ok(()) => {
                    log::debug!("remote cache: evicted {}", e.path.display());
                    total -= e.bytes;
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => total -= e.bytes,
                Err(err) => return Err(self.err(format!("evicting {}", e.path.display()), err)),
            }
        }
        Ok(total.saturating_add(incoming) <= self.max_bytes)
    }

    /// Whether a valid entry of the object at `url` in its current version
    /// is in the directory (one HEAD request; the entry is checked but not
    /// marked used).
    #[cfg(feature = "remote")]
    pub fn contains(&self, url: &str) -> Result<bool, RemoteError> {
        let info = super::head(url)?;
        let version = match (&info.e_tag, info.mtime_ns) {
            (Some(tag), _) => format!("etag:{tag}"),
            (None, Some(t)) => format!("mtime:{t}"),
            (None, None) => return Ok(false),
        };
        let prefix = format!("{:016x}-{:016x}-{}-", fnv(url), fnv(&version), info.size);
        if !self.dir.exists() {
            return Ok(false);
        }
        let (entries, _) = self.scan()?;
        Ok(entries.iter().any(|e| {
            e.path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        }))
    }

    /// Bytes of the entries and temporary files in the directory now.
    pub fn used_bytes(&self) -> Result<u64, RemoteError> {
        if !self.dir.exists() {
            return Ok(0);
        }
        let (entries, tmp) = self.scan()?;
        Ok(tmp + entries.iter().map(|e| e.bytes).sum::<u64>())
    }
}

/// Whether `file` holds `size` bytes whose CRC-32C is `crc`.
fn check(file: &mut File, size: u64, crc: u32) -> io::Result<bool> {
    if file.metadata()?.len() != size {
        return Ok(false);
    }
    let mut sum = 0u32;
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sum = crc32c::crc32c_append(sum, &buf[..n]);
        n_total += n as u64;
    }
    Ok(n_total == size && sum == crc)
}

/// 64-bit FNV-1a: a stable name for a URL or a version.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The entries this process is reading, with their readers' count: never
/// evicted.
fn in_use() -> &'static Mutex<HashMap<PathBuf, usize>> {
    static IN_USE: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    IN_USE.get_or_init(Default::default)
}

/// A claim on an entry while it is read.
struct InUse(PathBuf);

impl InUse {
    fn claim(path: &Path) -> InUse {
        *in_use().lock().entry(path.to_path_buf()).or_default() += 1;
        InUse(path.to_path_buf())
    }

    fn busy(path: &Path) -> bool {
        in_use().lock().contains_key(path)
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut map = in_use().lock();
        if let Some(n) = map.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.0);
            }
        }
    }
}

/// An entry read from disk.
struct Cached {
    file: File,
    _in_use: InUse,
}

impl Read for Cached {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }
}

/// The temporary file an object is copied into as it is streamed.
struct Fill {
    file: File,
    tmp: PathBuf,
    crc: u32,
    written: u64,
}

/// An object streamed from the store and copied into the cache.
#[cfg(feature = "remote")]
struct Filling {
    object: RemoteObject,
    cache: RemoteCache,
    /// `None` once committed or abandoned.
    fill: Option<Fill>,
    stem: String,
    len: u64,
}

#[cfg(feature = "remote")]
impl Filling {
    /// Give up caching this object: its temporary file is removed.
    fn abandon(&mut self, why: &str) {
        if let Some(f) = self.fill.take() {
            log::debug!("remote cache: {} not kept: {why}", self.object.url());
            drop(f.file);
            let _ = fs::remove_file(&f.tmp);
        }
    }

    /// Every byte arrived: make the temporary file an entry.
    fn commit(&mut self) {
        let Some(f) = self.fill.take() else { return };
        let name = format!("{}-{:08x}.obj", self.stem, f.crc);
        let to = self.cache.dir.join(&name);
        let done = f.file.sync_all().and_then(|()| {
            drop(f.file);
            fs::rename(&f.tmp, &to)
        });
        if let Err(e) = done {
            log::warn!("remote cache: cannot keep {}: {e}", to.display());
            let _ = fs::remove_file(&f.tmp);
            return;
        }
        if let Ok(d) = File::open(&self.cache.dir) {
            let _ = d.sync_all();
        }
        log::debug!("remote cache: {} kept as {name}", self.object.url());
        // Older versions of the object go; the bound is kept.
        let url_prefix = &self.stem[..17];
        if let Ok((entries, _)) = self.cache.scan() {
            for e in entries {
                let n = e.path.file_name().unwrap_or_default().to_string_lossy();
                if n.starts_with(url_prefix) && n != name && !InUse::busy(&e.path) {
                    let _ = fs::remove_file(&e.path);
                }
            }
        }
        if let Err(e) = self.cache.make_room(0) {
            log::warn!("{e}");
        }
    }
}

#[cfg(feature = "remote")]
impl Read for Filling {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.object.read(buf) {
            Ok(n) => n,
            Err(e) => {
                self.abandon("the read failed");
                return Err(e);
            }
        };
        if let Some(f) = &mut self.fill {
            if n > 0 {
                if let Err(e) = f.file.write_all(&buf[..n]) {
                    log::warn!("remote cache: writing {}: {e}", f.tmp.display());
                    self.abandon("the cache file could not be written");
                    return Ok(n);
                }
                f.crc = crc32c::crc32c_append(f.crc, &buf[..n]);
                f.written += n as u64;
            }
            if f.written == self.len {
                self.commit();
            } else if n == 0 {
                self.abandon("the stream ended short");
            }
        }
        Ok(n)
    }
}

#[cfg(feature = "remote")]
impl Drop for Filling {
    fn drop(&mut self) {
        self.abandon("the object was not read to its end");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_checked_by_length_and_crc() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.obj");
        fs::write(&p, b"hello world").unwrap();
        let crc = crc32c::crc32c(b"hello world");
        assert!(check(&mut File::open(&p).unwrap(), 11, crc).unwrap());
        assert!(!check(&mut File::open(&p).unwrap(), 12, crc).unwrap());
        fs::write(&p, b"hello worle").unwrap();
        assert!(!check(&mut File::open(&p).unwrap(), 11, crc).unwrap());
        assert_ne!(fnv("a"), fnv("b"));
    }
}
