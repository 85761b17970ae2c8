//! A small HTTP object server for the examples, on 127.0.0.1: serves
//! in-memory objects by GET (with `Range` and `If-Match`) and HEAD, with an ETag, as a
//! static-file server or an object store's HTTP endpoint would — plus an
//! added latency per request (time to first byte) and a shaped link (a
//! token bucket on the bytes written, shared by every connection). It
//! counts requests and bytes so that the example can say what reading
//! cost. One thread per connection; for examples and benchmarks only.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the server behaves.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Added before every answer (time to first byte).
    pub latency: Duration,
    /// The link's rate in bytes per second (`None`: as fast as loopback).
    pub bytes_per_s: Option<f64>,
}

/// A token bucket: at most `rate` bytes per second on average, bursts of
/// at most `burst` bytes.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Wait until `n` bytes may go out (`n` ≤ burst), and take them.
    fn take(bucket: &Mutex<Bucket>, n: usize) {
        loop {
            let wait = {
                let mut b = bucket.lock().unwrap();
                let now = Instant::now();
                b.tokens = (b.tokens + (now - b.last).as_secs_f64() * b.rate).min(b.burst);
                b.last = now;
                if b.tokens >= n as f64 {
                    b.tokens -= n as f64;
                    return;
                }
                Duration::from_secs_f64((n as f64 - b.tokens) / b.rate)
            };
            std::thread::sleep(wait);
        }
    }
}

/// The counters the server keeps.
#[derive(Default)]
pub struct Counts {
    /// Requests answered (HEAD and GET).
    pub requests: AtomicU64,
    /// GET requests.
    pub gets: AtomicU64,
    /// Body bytes sent.
    pub bytes: AtomicU64,
}

/// A running server.
pub struct HttpStore {
    port: u16,
    /// What it has done so far.
    pub counts: Arc<Counts>,
}

/// Bytes written to the socket at once (and taken from the bucket at once).
const SLICE: usize = 64 << 10;

impl HttpStore {
    /// Serve `objects` (by path, e.g. `/data/part-0.tfrecord`) on an
    /// ephemeral port of 127.0.0.1.
    pub fn start(objects: HashMap<String, Vec<u8>>, shape: Shape) -> std::io::Result<HttpStore> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let objects = Arc::new(objects);
        let counts = Arc::new(Counts::default());
        let bucket = shape.bytes_per_s.map(|rate| {
            Arc::new(Mutex::new(Bucket {
                rate,
                // A few slices of burst: the link is shaped at a fine grain.
                burst: (4 * SLICE) as f64,
                tokens: 0.0,
                last: Instant::now(),
            }))
        });
        let c = counts.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (objects, counts, bucket) = (objects.clone(), c.clone(), bucket.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &objects, shape, &counts, bucket.as_deref());
                });
            }
        });
        Ok(HttpStore { port, counts })
    }

    /// The URL of `path` (`data/x.tfrecord`).
    pub fn url(&self, path: &str) -> String {
        format!(
            "http://127.0.0.1:{}/{}",
            self.port,
            path.trim_start_matches('/')
        )
    }
}

/// 64-bit FNV-1a of the bytes: the ETag.
/// One request's line and the headers that matter here.
pub struct Request {
    /// `GET`, `HEAD`, …
    pub method: String,
    /// The path asked for.
    pub path: String,
    /// `Range: bytes=A-B` (B inclusive; `None`: to the end).
    pub range: Option<(u64, Option<u64>)>,
    /// `If-Match: "TAG"` (as sent, quotes included).
    pub if_match: Option<String>,
}

/// Read the next request on a connection (its body, if any, read and
/// dropped); `None` when the client closed it.
pub fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut range = None;
    let mut if_match = None;
    let mut body_len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((h, ""));
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "range" {
            range = v.strip_prefix("bytes=").and_then(|r| {
                let (a, b) = r.split_once('-')?;
                Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()))
            });
        } else if k == "content-length" {
            body_len = v.parse().unwrap_or(0);
        } else if k == "if-match" {
            if_match = Some(v.to_string());
        }
    }
    let mut body = vec![0u8; body_len];
    reader.read_exact(&mut body)?;
    Ok(Some(Request {
        method,
        path,
        range,
        if_match,
    }))
}

/// The entity tag of `etag` as the answers write it (`"…"`, 16 hex digits).
pub fn etag_text(etag: u64) -> String {
    format!("\"{etag:016x}\"")
}

/// If the request's `If-Match` does not name `etag` (`*` names any),
/// answer 412 Precondition Failed and return true.
pub fn precondition_failed(
    out: &mut impl Write,
    if_match: Option<&str>,
    etag: u64,
) -> std::io::Result<bool> {
    let Some(m) = if_match else {
        return Ok(false);
    };
    let tag = etag_text(etag);
    if m.split(',').map(str::trim).any(|t| t == "*" || t == tag) {
        return Ok(false);
    }
    write!(
        out,
        "HTTP/1.1 412 Precondition Failed\r\nETag: {tag}\r\nContent-Length: 0\r\n\r\n"
    )?;
    Ok(true)
}

/// Answer the head of a GET or HEAD of an object of `total` bytes whose
/// entity tag is `etag`: 206 with its Content-Range for `range`, else 200;
/// the bytes `lo..hi` the body is to hold, or `None` when `range` is not
/// satisfiable (a 416 was written instead).
pub fn write_head(
    out: &mut impl Write,
    range: Option<(u64, Option<u64>)>,
    total: u64,
    etag: u64,
) -> std::io::Result<Option<(u64, u64)>> {
    let (status, lo, hi) = match range {
        Some((a, b)) => {
            let hi = b.map_or(total, |b| (b + 1).min(total));
            if a >= hi {
                write!(
                    out,
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{total}\r\nContent-Length: 0\r\n\r\n"
                )?;
                return Ok(None);
            }
            ("206 Partial Content", a, hi)
        }
        None => ("200 OK", 0, total),
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\n\
         Last-Modified: Wed, 25 Nov 2026 10:00:00 GMT\r\nETag: {}\r\n",
        hi - lo,
        etag_text(etag)
    );
    if range.is_some() {
        head.push_str(&format!("Content-Range: bytes {lo}-{}/{total}\r\n", hi - 1));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    Ok(Some((lo, hi)))
}

fn tag(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn serve(
    conn: TcpStream,
    objects: &HashMap<String, Vec<u8>>,
    shape: Shape,
    counts: &Counts,
    bucket: Option<&Mutex<Bucket>>,
) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    let mut tags: HashMap<String, u64> = HashMap::new();
    loop {
        let Some(Request {
            method,
            path,
            range,
            if_match,
        }) = read_request(&mut reader)?
        else {
            return Ok(());
        };
        counts.requests.fetch_add(1, Ordering::Relaxed);
        if !shape.latency.is_zero() {
            std::thread::sleep(shape.latency);
        }
        let Some(data) = objects.get(&path) else {
            write!(out, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        let total = data.len() as u64;
        let etag = *tags.entry(path.clone()).or_insert_with(|| tag(data));
        if precondition_failed(&mut out, if_match.as_deref(), etag)? {
            continue;
        }
        let Some((lo, hi)) = write_head(&mut out, range, total, etag)? else {
            continue;
        };
        if method == "HEAD" {
            continue;
        }
        counts.gets.fetch_add(1, Ordering::Relaxed);
        for slice in data[lo as usize..hi as usize].chunks(SLICE) {
            if let Some(b) = bucket {
                Bucket::take(b, slice.len());
            }
            out.write_all(slice)?;
            counts
                .bytes
                .fetch_add(slice.len() as u64, Ordering::Relaxed);
        }
    }
}
