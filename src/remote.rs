//! Remote sources: objects on S3 (`s3://bucket/key`), Google Cloud Storage
//! (`gs://bucket/key`) and plain HTTP(S) servers (`http://host/path`,
//! `https://host/path`), read through the [`object_store`] crate behind a
//! small blocking facade.
//!
//! This module owns:
//! - recognising a remote URL ([`is_remote`]) and the store it names (one
//!   client per bucket or origin, built once from the standard environment:
//!   `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_REGION`, `AWS_ALLOW_HTTP`, …; `GOOGLE_SERVICE_ACCOUNT`,
//!   `GOOGLE_BUCKET`, …);
//! - [`RemoteObject`], a [`Read`] stream over one object by ranged GETs of
//!   [`RemoteOptions::part_bytes`] (the first few smaller, ramping up:
//!   [`RemoteOptions::part_size`]) with up to [`RemoteOptions::read_ahead`]
//!   parts requested ahead (so at most `part_bytes × (read_ahead + 1)`
//!   bytes are held per reader; never the whole object);
//! - retries: every request (HEAD, ranged GET, LIST) that fails with a
//!   time-out, a broken connection, 429, 408 or 5xx is repeated with
//!   exponential backoff and full jitter until [`RemoteOptions::max_attempts`]
//!   attempts or [`RemoteOptions::retry_budget`] time is spent. A part is
//!   delivered only once it has arrived whole, so a retried part never
//!   delivers a byte twice; a part that is short is asked again. After the
//!   budget, the error names the URL and the byte offset the stream reached;
//! - listing a glob (`s3://b/prefix/*.tfrecord`) by listing the prefix
//!   before its first wildcard ([`expand_glob`]);
//! - counters of requests, retries, give-ups and bytes: the process's
//!   ([`stats`]) and those of whoever reads inside [`counting`] (a
//!   pipeline's [`RemoteCounters`]), so that pipelines in one process count
//!   apart.
//!
//! All requests run on one small multi-threaded tokio runtime shared by the
//! process (two worker threads, named `feedline-remote`); a reader waits for
//! its parts on a channel, so it may be any thread, including one that runs
//! an async runtime of its own.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

pub mod cache;

use object_store::path::Path as StorePath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use parking_lot::{Mutex, RwLock};
use rand::Rng;

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
    /// The most bytes one [`RemoteObject`] holds: the part being read and
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
/// parts a [`RemoteObject`] opened there fetches later, wherever it is read.
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

/// What a [`counting`] / [`scoped`] scope sets for the requests made in it.
#[derive(Clone, Default)]
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
fn current_cache() -> Result<Option<cache::RemoteCache>, RemoteError> {
    if let Some(c) = SCOPE.with(|s| s.borrow().cache.clone()) {
        return Ok(Some(c));
    }
    Ok(options()?.cache)
}

/// Where the requests of one operation are counted: the process and the
/// scope it started in.
#[derive(Clone, Default)]
struct Count(Option<Arc<RemoteCounters>>);

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

struct Global {
    options: RwLock<Option<RemoteOptions>>,
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

fn global() -> &'static Global {
    static G: OnceLock<Global> = OnceLock::new();
    G.get_or_init(|| Global {
        options: RwLock::new(None),
        stores: Mutex::new(HashMap::new()),
    })
}

/// Use `options` from now on (stores already set up are set up again on
/// their next use, with the new time-outs).
pub fn set_options(options: RemoteOptions) {
    let g = global();
    *g.options.write() = Some(options);
    g.stores.lock().clear();
}

/// The options in force: those set by [`set_options`], else
/// [`RemoteOptions::from_env`] (read once).
pub fn options() -> Result<RemoteOptions, RemoteError> {
    let g = global();
    if let Some(o) = g.options.read().as_ref() {
        return Ok(o.clone());
    }
    let o = RemoteOptions::from_env()?;
    *g.options.write() = Some(o.clone());
    Ok(o)
}

/// The process's runtime for remote requests, started on first use.
fn runtime() -> Result<&'static tokio::runtime::Runtime, RemoteError> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("feedline-remote")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| RemoteError::Runtime(e.clone()))
}

/// Start `fut` on the runtime; its result arrives on the returned channel
/// (the handle stops it).
fn spawn<T: Send + 'static>(
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<(mpsc::Receiver<T>, tokio::task::AbortHandle), RemoteError> {
    let (tx, rx) = mpsc::sync_channel(1);
    let task = runtime()?.spawn(async move {
        let _ = tx.send(fut.await);
    });
    Ok((rx, task.abort_handle()))
}

/// Run `fut` on the runtime and wait for it (from any thread).
fn block<T: Send + 'static>(
    fut: impl Future<Output = Result<T, RemoteError>> + Send + 'static,
) -> Result<T, RemoteError> {
    spawn(fut)?.0.recv().map_err(|_| RemoteError::RuntimeGone)?
}

/// Which kind of store a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    S3,
    Gcs,
    Http,
}

/// A parsed remote URL: the store (`s3://bucket`, `http://host:port`) and
/// the key in it.
#[derive(Clone, Debug)]
struct Url {
    kind: Kind,
    /// `s3://bucket`, `gs://bucket`, `http://host:port`.
    store: String,
    /// The bucket, or the origin for HTTP.
    authority: String,
    /// The key: the path after the authority, without its leading `/`.
    key: String,
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

fn parse(url: &str) -> Result<Url, RemoteError> {
    let bad = |why: &str| RemoteError::BadUrl {
        url: url.to_string(),
        why: why.to_string(),
    };
    let (kind, rest) = scheme(url).ok_or_else(|| bad("unknown scheme"))?;
    let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return Err(bad(match kind {
            Kind::Http => "no host",
            _ => "no bucket",
        }));
    }
    let scheme_text = &url[..url.len() - rest.len() - 3];
    let store = format!("{}://{authority}", scheme_text.to_ascii_lowercase());
    Ok(Url {
        kind,
        authority: if kind == Kind::Http {
            store.clone()
        } else {
            authority.to_string()
        },
        store,
        key: key.to_string(),
    })
}

impl Url {
    fn path(&self, whole: &str) -> Result<StorePath, RemoteError> {
        let p = if self.kind == Kind::Http {
            StorePath::from_url_path(&self.key)
        } else {
            StorePath::parse(&self.key)
        };
        p.map_err(|e| RemoteError::BadUrl {
            url: whole.to_string(),
            why: format!("bad key `{}`: {e}", self.key),
        })
    }
}

fn build_store(url: &Url, o: &RemoteOptions) -> Result<Arc<dyn ObjectStore>, RemoteError> {
    // Retries are ours (counted, one budget for every request kind), so
    // object_store makes one attempt per request.
    let retry = RetryConfig {
        max_retries: 0,
        ..RetryConfig::default()
    };
    let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
    let setup = |source| RemoteError::Setup {
        store: url.store.clone(),
        source,
    };
    let store: Arc<dyn ObjectStore> = match url.kind {
        Kind::S3 => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            use object_store::ClientConfigKey;
            Arc::new(
                AmazonS3Builder::from_env()
                    .with_bucket_name(&url.authority)
                    .with_retry(retry)
                    .with_config(
                        AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                        ms(o.timeout),
                    )
                    .with_config(
                        AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                        ms(o.connect_timeout),
                    )
                    .build()
                    .map_err(setup)?,
            )
        }
        Kind::Gcs => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            use object_store::ClientConfigKey;
            Arc::new(
                GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(&url.authority)
                    .with_retry(retry)
                    .with_config(
                        GoogleConfigKey::Client(ClientConfigKey::Timeout),
                        ms(o.timeout),
                    )
                    .with_config(
                        GoogleConfigKey::Client(ClientConfigKey::ConnectTimeout),
                        ms(o.connect_timeout),
                    )
                    .build()
                    .map_err(setup)?,
            )
        }
        Kind::Http => Arc::new(
            object_store::http::HttpBuilder::new()
                .with_url(&url.authority)
                .with_retry(retry)
                .with_client_options(
                    ClientOptions::new()
                        .with_allow_http(true)
                        .with_timeout(o.timeout)
                        .with_connect_timeout(o.connect_timeout),
                )
                .build()
                .map_err(setup)?,
        ),
    };
    Ok(store)
}

/// The store for `url` (built on first use) and the options in force.
fn store_for(url: &Url) -> Result<(Arc<dyn ObjectStore>, RemoteOptions), RemoteError> {
    let o = options()?;
    let g = global();
    let mut stores = g.stores.lock();
    if let Some(s) = stores.get(&url.store) {
        return Ok((s.clone(), o));
    }
    let s = build_store(url, &o)?;
    log::debug!("remote store {} set up", url.store);
    stores.insert(url.store.clone(), s.clone());
    Ok((s, o))
}

/// Whether an error of one attempt is worth another: time-outs, broken
/// connections, 408, 429 and 5xx are; a missing object, a denial, another
/// 4xx or an unsupported operation are not.
fn transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    match e {
        E::NotFound { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::NotImplemented { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. } => false,
        _ => {
            // A status in the message chain decides; none (a transport
            // error, a cut body, a time-out) is transient.
            let mut text = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(s) = src {
                text.push_str(": ");
                text.push_str(&s.to_string());
                src = s.source();
            }
            match status_in(&text) {
                Some(s) => s == 408 || s == 429 || s >= 500,
                None => true,
            }
        }
    }
}

/// The HTTP status an object_store error text reports ("… status 503 …").
fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status ")?;
    let digits: String = text[at + 7..]
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|s| (100..600).contains(s))
}

/// The outcome of one attempt.
enum Attempt<T> {
    Done(T),
    /// Retry (a transient error, or a short part: the `RemoteError` to give
    /// if the budget is spent).
    Again(RemoteError),
    Fail(RemoteError),
}

/// A request that failed for good, and whether it was given up (a
/// transient failure with the retry budget spent) rather than refused.
struct Failed {
    error: RemoteError,
    gave_up: bool,
}

impl Failed {
    /// The error, the give-up counted in `count`: done where the failure
    /// reaches a reader, so that parts asked ahead and then let go (their
    /// object failed before them) count nothing.
    fn count(self, count: &Count) -> RemoteError {
        if self.gave_up {
            count.add(|c| &c.give_ups, 1);
        }
        self.error
    }
}

/// Run `attempt` until it succeeds, fails for good, or the budget is spent
/// (the give-up counted).
async fn with_retries<T, F, Fut>(
    o: &RemoteOptions,
    count: &Count,
    op: &str,
    attempt: F,
) -> Result<T, RemoteError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    retrying(o, count, op, attempt)
        .await
        .map_err(|f| f.count(count))
}

/// Run `attempt` until it succeeds, fails for good, or the budget is spent
/// (the give-up left for the caller to count).
async fn retrying<T, F, Fut>(
    o: &RemoteOptions,
    count: &Count,
    op: &str,
    mut attempt: F,
) -> Result<T, Failed>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    let start = Instant::now();
    let mut backoff = o.initial_backoff;
    let mut n = 0;
    loop {
        n += 1;
        count.add(|c| &c.requests, 1);
        let e = match attempt(n).await {
            Attempt::Done(v) => return Ok(v),
            Attempt::Fail(error) => {
                return Err(Failed {
                    error,
                    gave_up: false,
                })
            }
            Attempt::Again(e) => e,
        };
        let elapsed = start.elapsed();
        if n >= o.max_attempts.max(1) || elapsed >= o.retry_budget {
            log::debug!("{op}: given up after {n} attempt(s) in {elapsed:.1?}: {e}");
            return Err(Failed {
                error: e,
                gave_up: true,
            });
        }
        count.add(|c| &c.retries, 1);
        let wait = rand::thread_rng().gen_range(Duration::ZERO..=backoff);
        log::debug!("{op}: attempt {n} failed ({e}); again in {wait:.1?}");
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(o.max_backoff);
    }
}

fn request_error(op: &str, n: usize, start: Instant, source: object_store::Error) -> RemoteError {
    RemoteError::Request {
        op: op.to_string(),
        attempts: n,
        elapsed: start.elapsed(),
        source,
    }
}

/// Size and modification time (nanoseconds since the Unix epoch) of the
/// object at `url`, by a HEAD request (retried as every request is).
pub fn stat(url: &str) -> Result<(u64, Option<u64>), RemoteError> {
    head(url).map(|h| (h.size, h.mtime_ns))
}

/// What a HEAD request tells of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its length in bytes.
    pub size: u64,
    /// Its modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: Option<u64>,
    /// Its entity tag, when the store gives one.
    pub e_tag: Option<String>,
}

/// Size, modification time and entity tag of the object at `url`, by a
/// HEAD request (retried as every request is).
pub fn head(url: &str) -> Result<ObjectInfo, RemoteError> {
    let u = parse(url)?;
    let path = u.path(url)?;
    let (store, o) = store_for(&u)?;
    let op = format!("HEAD {url}");
    let count = Count::here();
    block(async move {
        let start = Instant::now();
        let meta = with_retries(&o, &count, &op, |n| {
            let (store, path, op) = (store.clone(), path.clone(), &op);
            async move {
                match store.head(&path).await {
                    Ok(m) => Attempt::Done(m),
                    Err(e) if transient(&e) => Attempt::Again(request_error(op, n, start, e)),
                    Err(e) => Attempt::Fail(request_error(op, n, start, e)),
                }
            }
        })
        .await?;
        let mtime = meta
            .last_modified
            .timestamp_nanos_opt()
            .and_then(|n| u64::try_from(n).ok());
        Ok(ObjectInfo {
            size: meta.size,
            mtime_ns: mtime,
            e_tag: meta.e_tag,
        })
    })
}

/// Expand a glob over an object store (`s3://b/data/*.tfrecord`): list the
/// keys under the text before the first wildcard and keep those the
/// pattern matches (`*` and `?` do not cross a `/`), sorted, as URLs.
/// Plain HTTP servers cannot list (object_store asks by WebDAV); that is an
/// error naming the pattern.
pub fn expand_glob(pattern: &str) -> Result<Vec<String>, RemoteError> {
    let u = parse(pattern)?;
    let list_err = |what: String| RemoteError::List {
        pattern: pattern.to_string(),
        what,
    };
    let matcher = glob::Pattern::new(&u.key)
        .map_err(|e| list_err(format!("bad pattern at character {}: {}", e.pos, e.msg)))?;
    let wild = u.key.find(['*', '?', '[']).unwrap_or(u.key.len());
    let dir = u.key[..wild].rfind('/').map_or("", |i| &u.key[..i]);
    let prefix = StorePath::parse(dir).map_err(|e| list_err(format!("bad prefix `{dir}`: {e}")))?;
    let (store, o) = store_for(&u)?;
    let op = format!("LIST {}/{dir}", u.store);
    let count = Count::here();
    let keys = block(async move {
        use futures_util_shim::collect;
        let start = Instant::now();
        with_retries(&o, &count, &op, |n| {
            let (store, prefix, op) = (store.clone(), prefix.clone(), &op);
            async move {
                let p = (!prefix.as_ref().is_empty()).then_some(&prefix);
                match collect(store.list(p)).await {
                    Ok(v) => Attempt::Done(v),
                    Err(e) if transient(&e) => Attempt::Again(request_error(op, n, start, e)),
                    Err(e) => Attempt::Fail(request_error(op, n, start, e)),
                }
            }
        })
        .await
    })
    .map_err(|e| list_err(e.to_string()))?;
    let opts = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let mut found: Vec<String> = keys
        .into_iter()
        .filter(|k| matcher.matches_with(k, opts))
        .map(|k| format!("{}/{k}", u.store))
        .collect();
    if found.is_empty() {
        return Err(list_err("matches no object".into()));
    }
    found.sort();
    Ok(found)
}

/// Bytes `start..start + len` of the object at `url` by one ranged GET
/// (retried as every request is; a short answer is asked again).
pub fn read_range(url: &str, start: u64, len: u64) -> Result<bytes::Bytes, RemoteError> {
    let u = parse(url)?;
    let path = u.path(url)?;
    let (store, o) = store_for(&u)?;
    let op = format!("GET {url} bytes {start}..{}", start + len);
    let count = Count::here();
    block(async move {
        get_part(store, path, o, count.clone(), op, start, start + len)
            .await
            .map_err(|f| f.count(&count))
    })
}

/// One part, `start..end`, with retries (a give-up is the caller's to
/// count: [`Failed::count`]).
async fn get_part(
    store: Arc<dyn ObjectStore>,
    path: StorePath,
    o: RemoteOptions,
    count: Count,
    op: String,
    start: u64,
    end: u64,
) -> Result<bytes::Bytes, Failed> {
    let t0 = Instant::now();
    let want = end - start;
    retrying(&o, &count, &op, |n| {
        let (store, path, op, count) = (store.clone(), path.clone(), &op, &count);
        async move {
            match store.get_range(&path, start..end).await {
                Ok(b) if b.len() as u64 == want => {
                    count.add(|c| &c.bytes, want);
                    Attempt::Done(b)
                }
                Ok(b) => Attempt::Again(RemoteError::Short {
                    op: op.clone(),
                    want,
                    got: b.len() as u64,
                    attempts: n,
                }),
                Err(e) if transient(&e) => Attempt::Again(request_error(op, n, t0, e)),
                Err(e) => Attempt::Fail(request_error(op, n, t0, e)),
            }
        }
    })
    .await
}

/// Draining an object_store listing without a `futures` dependency.
mod futures_util_shim {
    use std::future::poll_fn;
    use std::pin::Pin;

    use object_store::ObjectMeta;

    type Listing = Pin<
        Box<dyn futures_core::Stream<Item = object_store::Result<ObjectMeta>> + Send + 'static>,
    >;

    /// Every key of `list`, or its first error.
    pub(super) async fn collect(mut list: Listing) -> object_store::Result<Vec<String>> {
        let mut out = Vec::new();
        while let Some(m) = poll_fn(|cx| list.as_mut().poll_next(cx)).await {
            out.push(m?.location.to_string());
        }
        Ok(out)
    }
}

/// A part on its way: where its bytes arrive, and how to stop asking.
type Part = (
    mpsc::Receiver<Result<bytes::Bytes, Failed>>,
    Option<tokio::task::AbortHandle>,
);

/// One remote object read as a stream by ranged GETs of
/// [`RemoteOptions::part_bytes`], with [`RemoteOptions::read_ahead`] parts
/// requested ahead. Its length is taken once, at [`open`](Self::open).
pub struct RemoteObject {
    url: String,
    store: Arc<dyn ObjectStore>,
    path: StorePath,
    options: RemoteOptions,
    len: u64,
    /// Offset of the next part to request.
    next: u64,
    /// Parts requested, in order.
    pending: VecDeque<Part>,
    /// The part being read and how much of it was delivered.
    part: bytes::Bytes,
    used: usize,
    /// Bytes delivered: the stream position.
    pos: u64,
    /// The error that ended the stream (given again on every later read).
    failed: Option<String>,
    /// Where its requests are counted: the scope it was opened in.
    count: Count,
    /// Parts requested so far (the first ones are smaller: see
    /// [`RemoteOptions::part_size`]).
    parts_asked: u32,
}

impl std::fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteObject")
            .field("url", &self.url)
            .field("len", &self.len)
            .field("pos", &self.pos)
            .finish()
    }
}

impl RemoteObject {
    /// Open the object at `url`: one HEAD request for its length (retried
    /// as every request is); the first part is requested at once, the
    /// parts ahead at the first read.
    pub fn open(url: &str) -> Result<Self, RemoteError> {
        let (len, _) = stat(url)?;
        Self::open_at(url, len, 0)
    }

    /// Open the object at `url` as a stream from its start, through the
    /// local cache of the current scope or options if there is one
    /// ([`cache::RemoteCache::open`]): a cached copy whose size and ETag
    /// (or modification time) match the HEAD's is read from disk; else the
    /// object is streamed and kept once read whole.
    pub fn open_cached(url: &str) -> Result<Box<dyn Read + Send>, RemoteError> {
        match current_cache()? {
            Some(c) => c.open(url),
            None => Ok(Box::new(Self::open(url)?)),
        }
    }

    /// The object at `url`, known to be `len` bytes long, as a stream from
    /// byte `start` on (no HEAD request).
    pub fn open_at(url: &str, len: u64, start: u64) -> Result<Self, RemoteError> {
        let u = parse(url)?;
        let path = u.path(url)?;
        let (store, options) = store_for(&u)?;
        let start = start.min(len);
        let mut r = RemoteObject {
            url: url.to_string(),
            store,
            path,
            options,
            len,
            next: start,
            pending: VecDeque::new(),
            part: bytes::Bytes::new(),
            used: 0,
            pos: start,
            failed: None,
            count: Count::here(),
            parts_asked: 0,
        };
        // Only the first part at once: until it arrives, parts ahead would
        // share the link with it (and with every other reader's first
        // part), delaying the first records; the first read asks for them.
        r.request_first();
        Ok(r)
    }

    /// The object's length when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the object was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The URL it was opened by.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Request the first part of the stream (and none ahead).
    fn request_first(&mut self) {
        let ahead = std::mem::replace(&mut self.options.read_ahead, 0);
        self.request_ahead(1);
        self.options.read_ahead = ahead;
    }

    /// Request parts until `read_ahead + extra` are on their way (or the
    /// end): `extra` is 1 while no part is held (the one to read next).
    fn request_ahead(&mut self, extra: usize) {
        while self.pending.len() < self.options.read_ahead + extra && self.next < self.len {
            let start = self.next;
            let end = (start + self.options.part_size(self.parts_asked)).min(self.len);
            self.parts_asked += 1;
            self.next = end;
            let (store, path, o) = (self.store.clone(), self.path.clone(), self.options.clone());
            let op = format!("GET {} bytes {start}..{end}", self.url);
            let count = self.count.clone();
            let part = match spawn(get_part(store, path, o, count, op, start, end)) {
                Ok((rx, task)) => (rx, Some(task)),
                Err(e) => {
                    // Given to the read that reaches this part.
                    let (tx, rx) = mpsc::sync_channel(1);
                    let _ = tx.send(Err(Failed {
                        error: e,
                        gave_up: false,
                    }));
                    (rx, None)
                }
            };
            self.pending.push_back(part);
        }
    }
}

impl RemoteObject {
    /// Stop the requests on their way (their parts would not be read).
    fn stop(&mut self) {
        for (_, task) in self.pending.drain(..) {
            if let Some(task) = task {
                task.abort();
            }
        }
    }
}

impl Drop for RemoteObject {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Read for RemoteObject {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = &self.failed {
            return Err(io::Error::other(e.clone()));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        if self.used == self.part.len() {
            // The part read is let go before the next is asked for: at
            // most `read_ahead + 1` parts are held, the one read included.
            self.part = bytes::Bytes::new();
            self.used = 0;
            self.request_ahead(1);
            let Some(next) = self.pending.pop_front() else {
                return Ok(0);
            };
            let got = next.0.recv().unwrap_or(Err(Failed {
                error: RemoteError::RuntimeGone,
                gave_up: false,
            }));
            match got.map_err(|f| f.count(&self.count)) {
                Ok(b) => {
                    self.part = b;
                    self.used = 0;
                    self.request_ahead(0);
                }
                Err(e) => {
                    let e = RemoteError::At {
                        offset: self.pos,
                        len: self.len,
                        source: Box::new(e),
                    };
                    self.failed = Some(e.to_string());
                    self.stop();
                    return Err(e.into_io());
                }
            }
        }
        let n = buf.len().min(self.part.len() - self.used);
        buf[..n].copy_from_slice(&self.part[self.used..self.used + n]);
        self.used += n;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_and_parsed() {
        assert!(is_remote("s3://b/k.tfrecord"));
        assert!(is_remote("HTTPS://h/x"));
        assert!(!is_remote("tfrecord:/x"));
        assert!(!is_remote("/tmp/s3://x"));
        let u = parse("s3://bucket/a/b.tar").unwrap();
        assert_eq!((u.kind, u.store.as_str()), (Kind::S3, "s3://bucket"));
        assert_eq!(
            (u.authority.as_str(), u.key.as_str()),
            ("bucket", "a/b.tar")
        );
        let u = parse("http://127.0.0.1:9/d/x.jsonl").unwrap();
        assert_eq!(u.authority, "http://127.0.0.1:9");
        assert_eq!(u.key, "d/x.jsonl");
        let e = parse("gs:///k").unwrap_err().to_string();
        assert!(e.contains("gs:///k") && e.contains("no bucket"), "{e}");
    }

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
    fn statuses_decide_what_is_retried() {
        assert_eq!(
            status_in("Server returned non-2xx status code: 503 Service Unavailable"),
            Some(503)
        );
        assert_eq!(
            status_in("Client error with status 404 Not Found"),
            Some(404)
        );
        assert_eq!(status_in("connection reset"), None);
        let generic = |m: &str| object_store::Error::Generic {
            store: "HTTP",
            source: m.to_string().into(),
        };
        assert!(transient(&generic(
            "Server error, status 503 Service Unavailable"
        )));
        assert!(transient(&generic(
            "Client error with status 429 Too Many Requests"
        )));
        assert!(!transient(&generic(
            "Client error with status 400 Bad Request"
        )));
        assert!(transient(&generic("error decoding response body")));
    }
}
