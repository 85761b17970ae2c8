//! Remote sources: objects on S3 (`s3://bucket/key`), Google Cloud Storage
//! (`gs://bucket/key`) and plain HTTP(S) servers (`http://host/path`,
//! `https://host/path`), read through the `object_store` crate behind a
//! small blocking facade (the `remote` feature, on by default).
//!
//! This module owns:
//! - recognising a remote URL ([`is_remote`]), in every build, so that a
//!   build without the `remote` feature refuses one clearly
//!   ([`Error::NotCompiledIn`](crate::Error::NotCompiledIn)) instead of
//!   looking for a local file of that name;
//! - the options remote objects are read with ([`RemoteOptions`], [`options`],
//!   [`set_options`]), the local [`cache`] directory, and the counters of
//!   requests, retries, give-ups and bytes: the process's ([`stats`]) and
//!   those of whoever reads inside [`counting`] (a pipeline's
//!   [`RemoteCounters`]), so that pipelines in one process count apart.
//!
//! With the `remote` feature, the object stores (`store.rs`):
//! - `RemoteObject`, a [`Read`](std::io::Read) stream over one object by
//!   ranged GETs of [`RemoteOptions::part_bytes`] (the first few smaller,
//!   ramping up: [`RemoteOptions::part_size`]) with up to
//!   [`RemoteOptions::read_ahead`] parts requested ahead (so at most
//!   `part_bytes × (read_ahead + 1)` bytes are held per reader; never the
//!   whole object);
//! - pinning: every ranged GET of an object carries the ETag its HEAD
//!   gave (`If-Match`) and is checked against the length and ETag the read
//!   was planned with; an answer of another version is an error naming the
//!   URL and both (`RemoteError::Changed`), never a short or mixed read;
//! - retries: every request (HEAD, ranged GET, LIST) that fails with a
//!   time-out, a broken connection, 429, 408 or 5xx is repeated with
//!   exponential backoff and full jitter until [`RemoteOptions::max_attempts`]
//!   attempts or [`RemoteOptions::retry_budget`] time is spent. A part is
//!   delivered only once it has arrived whole, so a retried part never
//!   delivers a byte twice; a part that is short is asked again. After the
//!   budget, the error names the URL and the byte offset the stream reached;
//! - listing a glob (`s3://b/prefix/*.tfrecord`) by listing the prefix
//!   before its first wildcard (`expand_glob`), `head`, `stat` and
//!   `read_range`.
//!
//! All requests run on one small multi-threaded tokio runtime shared by the
//! process (two worker threads, named `feedline-remote`); a reader waits for
//! its parts on a channel, so it may be any thread, including one that runs
//! an async runtime of its own.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub mod cache;
#[cfg(feature = "remote")]
mod store;

#[cfg(feature = "remote")]
pub use store::{expand_glob, head, read_range, stat, ObjectInfo, RemoteObject};

/// The bytes [`read_range`] gives (cheap to clone and to slice).
#[cfg(feature = "remote")]
pub use bytes::Bytes;

use parking_lot::RwLock;

/// What can go wrong with a remote source (each is turned into an
/// [`Error::Io`](crate::Error::Io) naming the URL when a format reads it).
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The text is not a URL of a supported store.
    #[error("`{url}` is not a remote URL: expected s3://BUCKET/KEY, gs://BUCKET/KEY, http://HOST/PATH or https://HOST/PATH ({why})")]
    BadUrl {
        /// The text given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The store client could not be configured (bad environment, …).
    #[cfg(feature = "remote")]
    #[error("cannot set up the client for `{store}`: {source}")]
    Setup {
        /// `s3://bucket`, `gs://bucket` or the HTTP origin.
        store: String,
        /// object_store's error.
        #[source]
        source: object_store::Error,
    },
    /// A request failed for good: a permanent error (not found, denied,
    /// a 4xx other than 408/429) or a transient one after the retry budget.
    #[cfg(feature = "remote")]
    #[error("{op} failed after {attempts} attempt(s) in {elapsed:.1?}: {source}")]
    Request {
        /// What was asked, e.g. `GET bytes 0..8388608`.
        op: String,
        /// Attempts made.
        attempts: usize,
        /// Time spent on them.
        elapsed: Duration,
        /// The last attempt's error.
        #[source]
        source: object_store::Error,
    },
    /// A part came back with another length than asked, more times than the
    /// retry budget allows.
    #[error("{op}: the server sent {got} bytes, {want} were asked for ({attempts} attempt(s))")]
    Short {
        /// What was asked.
        op: String,
        /// Bytes asked for.
        want: u64,
        /// Bytes received in the last attempt.
        got: u64,
        /// Attempts made.
        attempts: usize,
    },
    /// An answer was of another version of the object than the one its
    /// reading was planned with (by a HEAD): another total length or ETag,
    /// or a `412 Precondition Failed` to the HEAD's ETag as `If-Match`. Not
    /// retried: the object changed (or the server's HEAD and GET disagree).
    #[error("{url} changed while it was read (or its server disagrees with itself): {what}; nothing of this read is kept")]
    Changed {
        /// The object's URL.
        url: String,
        /// What was seen, with both lengths or both tags.
        what: String,
    },
    /// Reading the stream failed at `offset` (of `len` bytes).
    #[error("reading at byte offset {offset} of {len}: {source}")]
    At {
        /// The stream position reached: bytes already delivered.
        offset: u64,
        /// The object's length.
        len: u64,
        /// What failed.
        #[source]
        source: Box<RemoteError>,
    },
    /// A glob over a store that cannot list, or that matched nothing.
    #[error("listing `{pattern}`: {what}")]
    List {
        /// The pattern.
        pattern: String,
        /// What went wrong.
        what: String,
    },
    /// An environment variable of [`RemoteOptions::from_env`] is malformed.
    #[error("environment variable {var}={value:?}: expected {expected}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// The background runtime stopped answering (the process is ending).
    #[error("the remote I/O runtime is gone")]
    RuntimeGone,
    /// The background runtime could not be started.
    #[error("cannot start the remote I/O runtime: {0}")]
    Runtime(String),
    /// The local cache directory cannot be used.
    #[error("remote cache directory {}: {what}: {source}", dir.display())]
    Cache {
        /// The directory.
        dir: std::path::PathBuf,
        /// What was being done.
        what: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl RemoteError {
    /// As an [`io::Error`], `NotFound` for a missing object.
    pub fn into_io(self) -> io::Error {
        let kind = if self.is_not_found() {
            io::ErrorKind::NotFound
        } else {
            io::ErrorKind::Other
        };
        io::Error::new(kind, self)
    }

    fn is_not_found(&self) -> bool {
        match self {
            #[cfg(feature = "remote")]
            RemoteError::Request { source, .. } => {
                matches!(source, object_store::Error::NotFound { .. })
            }
            RemoteError::At { source, .. } => source.is_not_found(),
            _ => false,
        }
    }
}

/// How remote objects are read. Defaults: 8 MiB parts, 2 parts ahead, 30 s
/// per request (5 s to connect), 10 attempts within 3 minutes, backoff from
/// 100 ms doubling up to 15 s.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteOptions {
    /// Bytes asked for by one ranged GET.
    pub part_bytes: u64,
    /// Parts requested ahead of the one being read (0: none).
    pub read_ahead: usize,
    /// Time-out of one request, from sending it to the end of its body.
    pub timeout: Duration,
    /// Time-out of connecting.
    pub connect_timeout: Duration,
    /// Attempts of one request at most (≥ 1), the first one included.
    pub max_attempts: usize,
    /// Time after a request's first attempt beyond which it is not retried.
    pub retry_budget: Duration,
    /// The first backoff; each retry doubles it, up to `max_backoff`; the
    /// wait is drawn uniformly below it (full jitter).
    pub initial_backoff: Duration,
    /// The largest backoff.
    pub max_backoff: Duration,
    /// A local cache directory objects are kept in after their first
    /// whole read (none by default; `FEEDLINE_REMOTE_CACHE_DIR` with
    /// `FEEDLINE_REMOTE_CACHE_MAX_BYTES`). A pipeline's own
    /// ([`scoped`]) comes first.
    pub cache: Option<cache::RemoteCache>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            part_bytes: 8 << 20,
            read_ahead: 2,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_attempts: 10,
            retry_budget: Duration::from_secs(180),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            cache: None,
        }
    }
}

impl RemoteOptions {
    /// The most bytes one `RemoteObject` (a stream) holds: the part being read and
    /// the parts requested ahead, `part_bytes × (read_ahead + 1)`.
    pub fn held_bytes(&self) -> u64 {
        self.part_bytes
            .max(1)
            .saturating_mul(self.read_ahead as u64 + 1)
    }

    /// The size of a stream's part number `n` (0-based): the first parts
    /// ramp up, doubling from `max(part_bytes / 8, 1 MiB)` to `part_bytes`
    /// (8 MiB parts: 1, 2, 4, 8, 8, … MiB), so that the first records of an
    /// object arrive after a small GET rather than a whole part, while the
    /// rest is read in large parts (few requests per GB).
    pub fn part_size(&self, n: u32) -> u64 {
        let full = self.part_bytes.max(1);
        let first = (full / 8).max(1 << 20).min(full);
        first.checked_shl(n).map_or(full, |s| s.min(full))
    }

    /// The defaults, overridden by `FEEDLINE_REMOTE_PART_BYTES`,
    /// `FEEDLINE_REMOTE_READ_AHEAD`, `FEEDLINE_REMOTE_TIMEOUT_MS`,
    /// `FEEDLINE_REMOTE_ATTEMPTS`, `FEEDLINE_REMOTE_RETRY_BUDGET_MS` and
    /// `FEEDLINE_REMOTE_CACHE_DIR` + `FEEDLINE_REMOTE_CACHE_MAX_BYTES` where
    /// set. A malformed value is an error naming the variable.
    pub fn from_env() -> Result<Self, RemoteError> {
        fn num(var: &'static str, min: u64) -> Result<Option<u64>, RemoteError> {
            match std::env::var(var) {
                Err(_) => Ok(None),
                Ok(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n >= min => Ok(Some(n)),
                    _ => Err(RemoteError::BadEnv {
                        var,
                        value: v,
                        expected: if min == 0 {
                            "a whole number"
                        } else {
                            "a whole number ≥ 1"
                        },
                    }),
                },
            }
        }
        let mut o = RemoteOptions::default();
        if let Some(n) = num("FEEDLINE_REMOTE_PART_BYTES", 1)? {
            o.part_bytes = n;
        }
        if let Some(n) = num("FEEDLINE_REMOTE_READ_AHEAD", 0)? {
            o.read_ahead = n as usize;
        }
        if let Some(n) = num("FEEDLINE_REMOTE_TIMEOUT_MS", 1)? {
            o.timeout = Duration::from_millis(n);
        }
        if let Some(n) = num("FEEDLINE_REMOTE_ATTEMPTS", 1)? {
            o.max_attempts = n as usize;
        }
        if let Some(n) = num("FEEDLINE_REMOTE_RETRY_BUDGET_MS", 0)? {
            o.retry_budget = Duration::from_millis(n);
        }
        let max = num("FEEDLINE_REMOTE_CACHE_MAX_BYTES", 1)?;
        match std::env::var_os("FEEDLINE_REMOTE_CACHE_DIR") {
            Some(dir) if !dir.is_empty() => {
                let max = max.ok_or(RemoteError::BadEnv {
                    var: "FEEDLINE_REMOTE_CACHE_MAX_BYTES",
                    value: String::new(),
                    expected: "the cache's bound in bytes, with FEEDLINE_REMOTE_CACHE_DIR",
                })?;
                o.cache = Some(cache::RemoteCache::new(dir, max));
            }
            _ if max.is_some() => {
                return Err(RemoteError::BadEnv {
                    var: "FEEDLINE_REMOTE_CACHE_DIR",
                    value: String::new(),
                    expected: "a directory, with FEEDLINE_REMOTE_CACHE_MAX_BYTES",
                })
            }
            _ => {}
        }
        Ok(o)
    }
}

/// Counters of remote requests: the process's (see [`stats`]) or one
/// pipeline's ([`RemoteCounters::snapshot`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Requests sent (attempts, retries included).
    pub requests: u64,
    /// Attempts that failed transiently and were retried.
    pub retries: u64,
    /// Requests given up after a transient failure because the retry
    /// budget ([`RemoteOptions::max_attempts`], [`RemoteOptions::retry_budget`])
    /// was spent, counted where the failure reaches a reader: a stream's
    /// parts asked ahead and let go when an earlier part failed count
    /// nothing, so one object that dies is one give-up.
    pub give_ups: u64,
    /// Bytes received in parts delivered.
    pub bytes: u64,
    /// Objects read from the local cache instead of the store
    /// ([`cache::RemoteCache`]).
    pub cache_hits: u64,
    /// Bytes read from the local cache.
    pub cache_bytes: u64,
}

/// One owner's counters of remote requests (a pipeline's): what is counted
/// in [`RemoteStats`]. Requests made on a thread inside [`counting`] are
/// counted here as well as in the process's totals ([`stats`]); so are the
/// parts a `RemoteObject` opened there fetches later, wherever it is read.
#[derive(Debug, Default)]
pub struct RemoteCounters {
    requests: AtomicU64,
    retries: AtomicU64,
    give_ups: AtomicU64,
    bytes: AtomicU64,
    cache_hits: AtomicU64,
    cache_bytes: AtomicU64,
}

impl RemoteCounters {
    /// New counters at zero, to hand to [`counting`].
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The counts so far.
    pub fn snapshot(&self) -> RemoteStats {
        RemoteStats {
            requests: self.requests.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            give_ups: self.give_ups.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            cache_bytes: self.cache_bytes.load(Ordering::Relaxed),
        }
    }
}

/// The process's totals.
static PROCESS: RemoteCounters = RemoteCounters {
    requests: AtomicU64::new(0),
    retries: AtomicU64::new(0),
    give_ups: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    cache_hits: AtomicU64::new(0),
    cache_bytes: AtomicU64::new(0),
};

/// The process's counters so far (every pipeline's, and requests made
/// outside any [`counting`] scope).
pub fn stats() -> RemoteStats {
    PROCESS.snapshot()
}

/// What a [`counting`] / [`scoped`] scope sets for the requests made in it
/// (read by the object stores: without the `remote` feature nothing is).
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
struct Scope {
    counters: Option<Arc<RemoteCounters>>,
    cache: Option<cache::RemoteCache>,
}

thread_local! {
    /// The scope this thread is in.
    static SCOPE: std::cell::RefCell<Scope> = std::cell::RefCell::new(Scope::default());
}

/// Run `f`, counting the remote requests it makes on this thread (and the
/// later parts of the objects it opens) in `counters` too. Scopes nest: the
/// innermost counts; the previous one is back when `f` returns or unwinds.
pub fn counting<R>(counters: &Arc<RemoteCounters>, f: impl FnOnce() -> R) -> R {
    scoped(counters, None, f)
}

/// As [`counting`], and the objects `f` opens as streams go through `cache`
/// when it is given (else through the cache of the [options](options) in
/// force, if any).
pub fn scoped<R>(
    counters: &Arc<RemoteCounters>,
    cache: Option<&cache::RemoteCache>,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(Option<Scope>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take().unwrap_or_default();
            SCOPE.with(|s| *s.borrow_mut() = prev);
        }
    }
    let new = Scope {
        counters: Some(counters.clone()),
        cache: cache.cloned(),
    };
    let prev = SCOPE.with(|s| std::mem::replace(&mut *s.borrow_mut(), new));
    let _restore = Restore(Some(prev));
    f()
}

/// The cache the current scope reads through: the scope's, else the
/// options'.
#[cfg(feature = "remote")]
fn current_cache() -> Result<Option<cache::RemoteCache>, RemoteError> {
    if let Some(c) = SCOPE.with(|s| s.borrow().cache.clone()) {
        return Ok(Some(c));
    }
    Ok(options()?.cache)
}

#[cfg(feature = "remote")]
impl RemoteObject {
    /// Open the object at `url` as a stream from its start, through the
    /// local cache of the current scope or options if there is one
    /// ([`cache::RemoteCache::open`]): a cached copy whose size and ETag
    /// (or modification time) match the HEAD's is read from disk; else the
    /// object is streamed and kept once read whole.
    pub fn open_cached(url: &str) -> Result<Box<dyn std::io::Read + Send>, RemoteError> {
        match current_cache()? {
            Some(c) => c.open(url),
            None => Ok(Box::new(Self::open(url)?)),
        }
    }
}

/// Where the requests of one operation are counted: the process and the
/// scope it started in.
#[cfg(feature = "remote")]
#[derive(Clone, Default)]
struct Count(Option<Arc<RemoteCounters>>);

#[cfg(feature = "remote")]
impl Count {
    /// The current thread's scope.
    fn here() -> Self {
        Count(SCOPE.with(|s| s.borrow().counters.clone()))
    }

    fn add(&self, field: impl Fn(&RemoteCounters) -> &AtomicU64, n: u64) {
        field(&PROCESS).fetch_add(n, Ordering::Relaxed);
        if let Some(c) = &self.0 {
            field(c).fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The options set by [`set_options`] or read from the environment.
fn global_options() -> &'static RwLock<Option<RemoteOptions>> {
    static OPTIONS: OnceLock<RwLock<Option<RemoteOptions>>> = OnceLock::new();
    OPTIONS.get_or_init(|| RwLock::new(None))
}

/// Use `options` from now on (stores already set up are set up again on
/// their next use, with the new time-outs).
pub fn set_options(options: RemoteOptions) {
    *global_options().write() = Some(options);
    #[cfg(feature = "remote")]
    store::forget_stores();
}

/// The options in force: those set by [`set_options`], else
/// [`RemoteOptions::from_env`] (read once).
pub fn options() -> Result<RemoteOptions, RemoteError> {
    let g = global_options();
    if let Some(o) = g.read().as_ref() {
        return Ok(o.clone());
    }
    let o = RemoteOptions::from_env()?;
    *g.write() = Some(o.clone());
    Ok(o)
}

/// Which kind of store a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    S3,
    Gcs,
    Http,
}

/// Whether `spec` is a remote URL (`s3://`, `gs://`, `http://`,
/// `https://`), by its scheme.
pub fn is_remote(spec: &str) -> bool {
    scheme(spec).is_some()
}

fn scheme(spec: &str) -> Option<(Kind, &str)> {
    let (s, rest) = spec.split_once("://")?;
    let kind = match s.to_ascii_lowercase().as_str() {
        "s3" | "s3a" => Kind::S3,
        "gs" => Kind::Gcs,
        "http" | "https" => Kind::Http,
        _ => return None,
    };
    Some((kind, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_parts_ramp_up_to_the_part_size() {
        let o = RemoteOptions::default();
        let mib = 1 << 20;
        let sizes: Vec<u64> = (0..6).map(|n| o.part_size(n)).collect();
        assert_eq!(sizes, [mib, 2 * mib, 4 * mib, 8 * mib, 8 * mib, 8 * mib]);
        assert_eq!(o.part_size(200), 8 * mib);
        let small = RemoteOptions {
            part_bytes: 4096,
            ..RemoteOptions::default()
        };
        assert_eq!((small.part_size(0), small.part_size(5)), (4096, 4096));
        let big = RemoteOptions {
            part_bytes: 64 * mib,
            ..RemoteOptions::default()
        };
        assert_eq!((big.part_size(0), big.part_size(3)), (8 * mib, 64 * mib));
    }

    #[test]
    fn urls_are_recognised_by_their_scheme() {
        assert!(is_remote("s3://b/k.tfrecord"));
        assert!(is_remote("s3a://b/k.tfrecord"));
        assert!(is_remote("gs://b/k"));
        assert!(is_remote("HTTPS://h/x"));
        assert!(is_remote("http://h/x"));
        assert!(!is_remote("tfrecord:/x"));
        assert!(!is_remote("/tmp/s3://x"));
        assert!(!is_remote("ftp://h/x"));
    }
}
