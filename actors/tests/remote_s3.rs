//! Remote sources on an S3-compatible server (issue 19): moto's server mode
//! (`moto_server`, from PyPI's `moto[server]`) started on 127.0.0.1 by the
//! test, configured only through the standard environment (AWS_ENDPOINT_URL,
//! AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP).
//! Without `moto_server` on the PATH the test says so and checks nothing
//! else (CI does not install it).
//!
//! Checked: a glob `s3://bucket/train/*.jsonl` expands by listing (only the
//! matching keys, sorted), every record arrives exactly once per pass with 1
//! and 4 readers, and a key that does not exist is an error naming its URL.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};

use feedline_actors::{ErrorPolicy, Loader};

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

/// Start `moto_server` on a free loopback port; `None` (with the reason
/// printed) when it is not installed.
fn start_moto() -> Option<Moto> {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = match Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
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
    // The standard environment, set before any S3 client exists (this
    // binary has this one test).
    for (k, v) in [
        (
            "AWS_ENDPOINT_URL",
            format!("http://127.0.0.1:{}", moto.port),
        ),
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
    for readers in [1, 4] {
        let loader = Loader::builder()
            .files(["s3://bucket/train/*.jsonl"])
            .readers(readers)
            .batch(32)
            .shuffle(100)
            .passes(2)
            .shard_from_env(false)
            .error_policy(ErrorPolicy::Fail)
            .build()
            .unwrap_or_else(|e| panic!("{readers} readers: {e}"));
        let mut per_pass: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
        for d in loader {
            let d = d.unwrap_or_else(|e| panic!("{readers} readers: {e}"));
            per_pass.entry(d.pass).or_default().extend(
                d.batch
                    .origins()
                    .iter()
                    .map(|o| (o.source.name().to_string(), o.record)),
            );
        }
        assert_eq!(per_pass.len(), 2, "{readers} readers");
        for (pass, mut got) in per_pass {
            got.sort();
            assert!(
                got == want,
                "{readers} readers, pass {pass}: not each record once"
            );
        }
    }
    let missing = "s3://bucket/train/nope.jsonl";
    let e = Loader::builder()
        .files([missing])
        .shard_from_env(false)
        .build()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains(missing) && e.contains("1 attempt(s)"), "{e}");
}
