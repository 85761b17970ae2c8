//! Remote sources on an S3-compatible server: moto's server mode
//! (`moto_server`, from PyPI's `moto[server]`) started on 127.0.0.1 by the
//! test, configured only through the standard environment (AWS_ENDPOINT_URL,
//! AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP).
//! `./test.sh` installs `moto[server]` in its venv and sets
//! `FEEDLINE_MOTO_SERVER` and `FEEDLINE_REQUIRE_S3`, so that the test runs
//! (and a server that cannot start fails it). Run alone without either,
//! it looks for `moto_server` on the PATH and, if there is none, says
//! SKIPPED and checks nothing.
//!
//! The client talks to moto through a fault-injecting proxy of the test's
//! own (loopback only): every 7th request (14 %) gets 503, 429, or its
//! answer cut in the middle — several faults in every run, so that some
//! land on the pipeline's own requests whatever the schedule.
//!
//! Checked: a glob `s3://bucket/train/*.jsonl` expands by listing (only the
//! matching keys, sorted), every record arrives exactly once per pass with
//! 1, 4 and 16 readers while the proxy injects faults, the retries are
//! counted, and a key that does not exist is an error naming its URL.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The moto server, killed when dropped.
struct Moto {
    child: Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `moto_server` (`$FEEDLINE_MOTO_SERVER`, else from the PATH) on a
/// free loopback port; `None` (with the reason printed) when it is not
/// installed — unless `FEEDLINE_REQUIRE_S3` is set (as `./test.sh` does,
/// having installed it): then a missing server fails the test.
fn start_moto() -> Option<Moto> {
    let exe = std::env::var_os("FEEDLINE_MOTO_SERVER").unwrap_or_else(|| "moto_server".into());
    let required = std::env::var_os("FEEDLINE_REQUIRE_S3").is_some();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = match Command::new(&exe)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if required => {
            panic!("FEEDLINE_REQUIRE_S3 is set but {exe:?} cannot start: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: moto_server is not available ({e}); `pip install 'moto[server]'`");
            return None;
        }
    };
    let mut moto = Moto { child, port };
    // Ready when it says it is running (werkzeug logs to stderr).
    let stderr = moto.child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("Running on") => break,
            Some(Ok(_)) => {}
            _ => panic!("moto_server ended before it was running"),
        }
    }
    // Keep draining its log so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Some(moto)
}

/// A proxy on a loopback port in front of `upstream`: one request per
/// connection, relayed whole, except every `every`-th, which gets a 503, a
/// 429 or its answer cut in half (in turn). Returns the port and the count
/// of faults injected.
fn start_proxy(upstream: u16, every: u64) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let injected = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let inj = injected.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let inj = inj.clone();
            std::thread::spawn(move || {
                let _ = relay(conn, upstream, n, every, &inj);
            });
        }
    });
    (port, injected)
}

fn relay(
    client: TcpStream,
    upstream: u16,
    n: u64,
    every: u64,
    injected: &AtomicU64,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut out = client;
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line.trim_end().is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if !lower.starts_with("connection:") {
            head.push_str(&line);
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let fault = n % every == 0;
    if fault {
        injected.fetch_add(1, Ordering::SeqCst);
        match (n / every) % 3 {
            0 => {
                return out.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
            }
            1 => {
                return out.write_all(
                    b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
            }
            _ => {}
        }
    }
    let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
    up.set_read_timeout(Some(Duration::from_secs(30)))?;
    up.write_all(head.as_bytes())?;
    up.write_all(b"Connection: close\r\n\r\n")?;
    up.write_all(&body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    if fault {
        // Cut: the headers and half the rest, then the connection closes.
        let cut = answer.len() - (answer.len() - header_end(&answer)) / 2;
        out.write_all(&answer[..cut])?;
    } else {
        out.write_all(&answer)?;
    }
    Ok(())
}

/// Where the body of an HTTP answer starts.
fn header_end(answer: &[u8]) -> usize {
    answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |i| i + 4)
}

/// One unsigned request to moto (which does not check signatures); the
/// status code.
fn request(port: u16, method: &str, path: &str, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no status in {answer:?}"))
}

fn jsonl(f: u64, rows: u64) -> Vec<u8> {
    (0..rows)
        .map(|r| format!("{{\"id\": {}, \"x\": [{r}.5, 1.0]}}\n", f * 1000 + r))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn s3_glob_lists_and_every_record_arrives_once_per_pass() {
    let Some(moto) = start_moto() else { return };
    let (proxy, injected) = start_proxy(moto.port, 7);
    feedline::remote::set_options(feedline::remote::RemoteOptions {
        part_bytes: 2048,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        ..Default::default()
    });
    // The standard environment, set before any S3 client exists (this
    // binary has this one test).
    for (k, v) in [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{proxy}")),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ] {
        std::env::set_var(k, v);
    }
    assert_eq!(request(moto.port, "PUT", "/bucket", b""), 200);
    for f in 0..4 {
        let key = format!("/bucket/train/part{f}.jsonl");
        assert_eq!(request(moto.port, "PUT", &key, &jsonl(f, 250)), 200);
    }
    assert_eq!(
        request(moto.port, "PUT", "/bucket/train/notes.txt", b"x"),
        200
    );
    assert_eq!(
        request(moto.port, "PUT", "/bucket/other/part9.jsonl", &jsonl(9, 5)),
        200
    );
    let urls: Vec<String> = (0..4)
        .map(|f| format!("s3://bucket/train/part{f}.jsonl"))
        .collect();
    let expanded =
        feedline::plan::expand_inputs(&["s3://bucket/train/*.jsonl".to_string()]).unwrap();
    assert_eq!(expanded, urls);
    let mut want: Vec<(String, u64)> = urls
        .iter()
        .flat_map(|u| (0..250).map(move |r| (u.clone(), r)))
        .collect();
    want.sort();
    for readers in [1, 4, 16] {
        let faults = injected.load(Ordering::SeqCst);
        let s =
            common::each_object_record_once_per_pass("s3://bucket/train/*.jsonl", readers, &want);
        let faults = injected.load(Ordering::SeqCst) - faults;
        // The pipeline's own count (the listing at build is not the
        // pipeline's; a fault on a read-ahead part dropped at the end of a
        // file is not retried).
        let retries = s.remote_retries;
        assert!(
            faults > 0 && retries > 0 && retries <= faults,
            "{readers} readers: {faults} faults injected, {retries} retries counted"
        );
        assert_eq!(s.remote_give_ups, 0, "{readers} readers");
        assert!(s.remote_requests > retries, "{readers} readers: {s:?}");
        assert!(
            s.summary_line().contains(&format!("{retries} retried")),
            "{}",
            s.summary_line()
        );
    }
    common::a_missing_object_is_one_attempt("s3://bucket/train/nope.jsonl");
}
