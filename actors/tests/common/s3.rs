//! moto's S3 server (`moto_server`) for the tests that need one, and a
//! fault-injecting proxy in front of it (see `remote_s3.rs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The moto server, killed when dropped.
pub struct Moto {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
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
pub fn start_moto() -> Option<Moto> {
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
pub fn start_proxy(upstream: u16, every: u64) -> (u16, Arc<AtomicU64>) {
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

pub fn relay(
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
pub fn header_end(answer: &[u8]) -> usize {
    answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |i| i + 4)
}

/// One unsigned request to moto (which does not check signatures); the
/// status code.
pub fn request(port: u16, method: &str, path: &str, body: &[u8]) -> u16 {
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
