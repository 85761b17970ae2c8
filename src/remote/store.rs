//! The object-store side of remote sources (the `remote` feature): the
//! clients (one per bucket or origin, built once from the standard
//! environment: `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`, …;
//! `GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_BUCKET`, …), the requests and their
//! retries, and [`RemoteObject`], the stream formats read.
//!
//! Every request runs on one small multi-threaded tokio runtime shared by
//! the process (two worker threads, named `feedline-remote`); a reader
//! waits for its parts on a channel, so it may be any thread, including one
//! that runs an async runtime of its own. What a request counts, and the
//! cache it reads through, come from the scope it starts in
//! ([`super::scoped`]).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::{self, Read};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use object_store::path::Path as StorePath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use parking_lot::Mutex;
use rand::Rng;

use super::{options, scheme, Count, Kind, RemoteError, RemoteOptions};

/// The clients set up so far, by store (`s3://bucket`, `http://host:port`).
fn stores() -> &'static Mutex<HashMap<String, Arc<dyn ObjectStore>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// Forget the clients set up so far: they are set up again on their next
/// use, with the options then in force.
pub(super) fn forget_stores() {
    stores().lock().clear();
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
    let mut stores = stores().lock();
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

/// What a HEAD request tells of an object: the version of it a read is
/// planned with and pinned to (see [`RemoteObject`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its length in bytes.
    pub size: u64,
    /// Its modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: Option<u64>,
    /// Its entity tag, when the store gives one.
    pub e_tag: Option<String>,
    /// Its version, when the store keeps versions (S3 with versioning).
    pub version: Option<String>,
}

impl ObjectInfo {
    /// The entity tag reads are pinned to (`If-Match`): a strong one (a
    /// weak tag, `W/"…"`, never matches `If-Match`).
    pub fn pin(&self) -> Option<&str> {
        self.e_tag.as_deref().filter(|t| !t.starts_with("W/"))
    }
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
            version: meta.version,
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

/// Bytes `start..start + len` of the object at `url`, of the version
/// `info` (its HEAD) describes, by one ranged GET (retried as every request
/// is; a short answer is asked again; an answer of another version is an
/// error: see [`RemoteObject`]).
pub fn read_range(
    url: &str,
    info: &ObjectInfo,
    start: u64,
    len: u64,
) -> Result<bytes::Bytes, RemoteError> {
    let u = parse(url)?;
    let path = u.path(url)?;
    let (store, o) = store_for(&u)?;
    let op = format!("GET {url} bytes {start}..{}", start + len);
    let count = Count::here();
    let version = Arc::new(Pinned {
        url: url.to_string(),
        info: info.clone(),
    });
    block(async move {
        get_part(
            store,
            path,
            o,
            count.clone(),
            op,
            version,
            start,
            start + len,
        )
        .await
        .map_err(|f| f.count(&count))
    })
}

/// The version of an object a read was planned with: every answer must
/// be of it.
#[derive(Debug)]
struct Pinned {
    url: String,
    info: ObjectInfo,
}

impl Pinned {
    /// The options of a GET of `start..end` pinned to this version: its
    /// strong ETag as `If-Match`, its version id where the store has one.
    fn get_options(&self, start: u64, end: u64) -> object_store::GetOptions {
        object_store::GetOptions {
            range: Some((start..end).into()),
            if_match: self.info.pin().map(str::to_string),
            version: self.info.version.clone(),
            ..Default::default()
        }
    }

    /// The answer of `op` is of another version of the object than the one
    /// planned: its total length (`Content-Range`) or its ETag differ.
    fn check(&self, op: &str, meta: &object_store::ObjectMeta) -> Result<(), RemoteError> {
        if meta.size != self.info.size {
            return Err(self.changed(format!(
                "{op} answered for an object of {} bytes (Content-Range), but its HEAD said {} \
                 bytes when its reading was planned",
                meta.size, self.info.size
            )));
        }
        if let (Some(want), Some(got)) = (self.info.pin(), meta.e_tag.as_deref()) {
            if want != got {
                return Err(self.changed(format!(
                    "{op} answered with ETag {got}, but its HEAD said {want} when its reading \
                     was planned"
                )));
            }
        }
        Ok(())
    }

    fn changed(&self, what: String) -> RemoteError {
        RemoteError::Changed {
            url: self.url.clone(),
            what,
        }
    }
}

/// One part, `start..end`, of the version `pinned`, with retries (a
/// give-up is the caller's to count: [`Failed::count`]).
#[allow(clippy::too_many_arguments)]
async fn get_part(
    store: Arc<dyn ObjectStore>,
    path: StorePath,
    o: RemoteOptions,
    count: Count,
    op: String,
    pinned: Arc<Pinned>,
    start: u64,
    end: u64,
) -> Result<bytes::Bytes, Failed> {
    let t0 = Instant::now();
    let want = end - start;
    retrying(&o, &count, &op, |n| {
        let (store, path, op, count) = (store.clone(), path.clone(), &op, &count);
        let pinned = pinned.clone();
        async move {
            let answer = match store.get_opts(&path, pinned.get_options(start, end)).await {
                Ok(r) => r,
                Err(object_store::Error::Precondition { .. }) => {
                    return Attempt::Fail(pinned.changed(format!(
                        "{op}: the store refused it with 412 Precondition Failed: its ETag is no \
                         longer {} (If-Match), the one its HEAD gave when its reading was planned",
                        pinned.info.pin().unwrap_or("?")
                    )))
                }
                Err(e) if transient(&e) => return Attempt::Again(request_error(op, n, t0, e)),
                Err(e) => return Attempt::Fail(request_error(op, n, t0, e)),
            };
            if let Err(e) = pinned.check(op, &answer.meta) {
                return Attempt::Fail(e);
            }
            match answer.bytes().await {
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
/// requested ahead. Its length and version are taken once, at
/// [`open`](Self::open) (a HEAD request), and every part is pinned to
/// them: each GET carries the HEAD's ETag as `If-Match` (and its version id
/// where the store keeps versions), and an answer for an object of another
/// total length (`Content-Range: bytes A-B/TOTAL`) or another ETag — the
/// object was replaced, or the server's HEAD and GET disagree — is an
/// error naming the URL and both lengths or tags ([`RemoteError::Changed`],
/// not retried). So a read never mixes two versions, never stops short of
/// a longer object, and never runs past a shorter one; a cache keeps
/// nothing of it.
pub struct RemoteObject {
    url: String,
    store: Arc<dyn ObjectStore>,
    path: StorePath,
    options: RemoteOptions,
    len: u64,
    /// The version every part must be of.
    pinned: Arc<Pinned>,
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
        Self::open_at(url, &head(url)?, 0)
    }

    /// The object at `url`, of the version `info` (a HEAD's answer)
    /// describes, as a stream from byte `start` on (no HEAD request).
    pub fn open_at(url: &str, info: &ObjectInfo, start: u64) -> Result<Self, RemoteError> {
        let u = parse(url)?;
        let path = u.path(url)?;
        let (store, options) = store_for(&u)?;
        let len = info.size;
        let start = start.min(len);
        let mut r = RemoteObject {
            url: url.to_string(),
            store,
            path,
            options,
            len,
            pinned: Arc::new(Pinned {
                url: url.to_string(),
                info: info.clone(),
            }),
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
            let pinned = self.pinned.clone();
            let part = match spawn(get_part(store, path, o, count, op, pinned, start, end)) {
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
    fn urls_are_parsed() {
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
