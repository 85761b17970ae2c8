//! The Prometheus metrics (feature `metrics`, `LoaderBuilder::metrics_addr`):
//! a scrape after a run counts what the consumer received, agrees with
//! `stats()`, and names every family; a port in use is an error naming the
//! address, a malformed one a setting error; the port is free again once
//! the loader is dropped; counters go on across loaders sharing a server.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use feedline_actors::{Loader, MetricsServer, PipelineError};

/// `GET path` on `addr`: the status line and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("the server listens");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The samples of an OpenMetrics text: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    (text.lines())
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("NAME VALUE");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

fn files(dir: &std::path::Path) -> Vec<String> {
    common::jsonl_files(dir, &[300, 250, 177])
}

#[test]
fn a_scrape_after_a_run_counts_what_the_consumer_received() {
    let dir = tempfile::tempdir().unwrap();
    let mut loader = Loader::builder()
        .files(files(dir.path()))
        .batch(32)
        .shuffle(100)
        .passes(2)
        .readers(2)
        .metrics_addr("127.0.0.1:0")
        .build()
        .unwrap();
    let (mut records, mut batches) = (0u64, 0u64);
    for d in loader.iter() {
        let d = d.unwrap();
        records += d.batch.len() as u64;
        batches += 1;
    }
    let addr = loader.metrics_server().expect("serving").local_addr();
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let m = samples(&body);
    assert_eq!(records, 2 * 727);
    let stats = loader.stats();
    for stage in ["readers", "shuffle", "batch_maker"] {
        let key = format!("feedline_records_total{{stage=\"{stage}\"}}");
        assert_eq!(m[&key], records as f64, "{key} in\n{body}");
    }
    assert_eq!(m["feedline_batches_total{device=\"0\"}"], batches as f64);
    // And with stats(), counter by counter.
    assert_eq!(
        m["feedline_batches_total{device=\"0\"}"],
        stats.devices[0].batches as f64
    );
    assert_eq!(
        m["feedline_bytes_total{stage=\"readers\"}"],
        stats.readers.payload_bytes as f64
    );
    let busy = m["feedline_stage_busy_seconds_total{stage=\"readers\"}"];
    let from_stats = stats.readers.busy * stats.elapsed_s * stats.readers_count as f64;
    assert!(
        (busy - from_stats).abs() < 0.05 + 0.05 * from_stats,
        "{busy} vs {from_stats}"
    );
    assert_eq!(m["feedline_bad_records_total"], 0.0);
    assert_eq!(m["feedline_pass"], 1.0, "the last pass, once all are made");
    assert!(m["feedline_in_flight_bound_bytes"] > 0.0);
    for family in [
        "feedline_records",
        "feedline_bytes",
        "feedline_stage_busy_seconds",
        "feedline_stage_idle_seconds",
        "feedline_stage_blocked_seconds",
        "feedline_batches",
        "feedline_device_wait_seconds",
        "feedline_bad_records",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} counter\n")),
            "{family}:\n{body}"
        );
    }
    for family in [
        "feedline_feed_queue_depth",
        "feedline_pass",
        "feedline_in_flight_bound_bytes",
        "feedline_autotune_value",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} gauge\n")),
            "{family}:\n{body}"
        );
    }
    assert!(body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    // Any other path is not found.
    assert_eq!(get(addr, "/").0, "HTTP/1.1 404 Not Found");
}

#[test]
fn a_port_in_use_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let e = Loader::builder()
        .files(files(dir.path()))
        .metrics_addr(addr.clone())
        .build()
        .unwrap_err();
    assert!(matches!(e, PipelineError::Metrics { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&addr) && text.contains("in use"), "{text}");
}

#[test]
fn a_malformed_address_is_a_setting_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        "localhost",
        "127.0.0.1:99999",
        ":9464",
        "127.0.0.1:",
        "a b:80",
        "::1:80",
    ] {
        let e = Loader::builder()
            .files(files(dir.path()))
            .metrics_addr(bad)
            .build()
            .unwrap_err();
        let PipelineError::Config(c) = &e else {
            panic!("{bad}: {e:?}");
        };
        let text = c.to_string();
        assert!(
            text.contains("metrics_addr") && text.contains(bad),
            "{text}"
        );
        assert!(text.contains("HOST:PORT"), "{text}");
    }
}

#[test]
fn the_port_is_free_again_once_the_loader_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let loader = Loader::builder()
        .files(files(dir.path()))
        .passes(1000)
        .metrics_addr("127.0.0.1:0")
        .build()
        .unwrap();
    let addr = loader.metrics_server().unwrap().local_addr();
    assert!(TcpListener::bind(addr).is_err(), "in use while it runs");
    assert_eq!(get(addr, "/metrics").0, "HTTP/1.1 200 OK");
    drop(loader);
    TcpListener::bind(addr).expect("free again after the drop");
}

#[test]
fn counters_go_on_across_loaders_sharing_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = MetricsServer::bind("127.0.0.1:0").unwrap();
    let mut received = 0u64;
    for seed in 0..2 {
        let loader = Loader::builder()
            .files(files(dir.path()))
            .batch(50)
            .seed(seed)
            .metrics_server(server.clone())
            .build()
            .unwrap();
        for d in loader {
            received += d.unwrap().batch.len() as u64;
        }
        let m = samples(&server.render());
        assert_eq!(
            m["feedline_records_total{stage=\"readers\"}"],
            received as f64
        );
    }
    assert_eq!(received, 2 * 727);
    let (status, body) = get(server.local_addr(), "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(
        samples(&body)["feedline_records_total{stage=\"batch_maker\"}"],
        1454.0
    );
}
