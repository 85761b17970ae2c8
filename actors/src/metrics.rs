//! Prometheus metrics of a running pipeline (feature `metrics`): the
//! server ([`MetricsServer`]: one `std` `TcpListener` thread answering
//! `GET /metrics` with the OpenMetrics text that `prometheus-client`
//! encodes), and the metric families, read from the stages' counters at
//! scrape time — nothing here runs per record.
//!
//! A server outlives the pipelines it serves when it is handed from one to
//! the next ([`StartOptions::metrics`](crate::StartOptions::metrics),
//! [`LoaderBuilder::metrics_server`](crate::LoaderBuilder::metrics_server)):
//! a new pipeline's counters are then added to the totals of those before,
//! so that the counters never go down. It stops (its port freed) when its
//! last handle is dropped — with the pipeline or loader that holds it.
//!
//! Without the feature the types are here, and [`MetricsServer::bind`]
//! refuses, naming the feature, as [`PipelineConfig::check`] does.
//!
//! [`PipelineConfig::check`]: crate::PipelineConfig::check

use std::net::SocketAddr;

use crate::config::check_metrics_addr;
use crate::error::PipelineError;

/// A metrics server: `GET /metrics` on its address answers with the
/// OpenMetrics text of the pipeline it serves. Cheap to clone; the last
/// clone dropped stops its thread and frees the port.
#[derive(Clone)]
pub struct MetricsServer {
    #[cfg(feature = "metrics")]
    inner: std::sync::Arc<imp::Inner>,
    #[cfg(not(feature = "metrics"))]
    never: std::convert::Infallible,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.local_addr())
            .finish()
    }
}

impl MetricsServer {
    /// Listen on `addr` (`HOST:PORT`; port 0 picks a free one, see
    /// [`local_addr`](Self::local_addr)). A malformed address is a
    /// setting error; one that cannot be listened on (in use, not this
    /// machine's) is [`PipelineError::Metrics`] naming it.
    pub fn bind(addr: &str) -> Result<MetricsServer, PipelineError> {
        check_metrics_addr(addr).map_err(PipelineError::Config)?;
        #[cfg(feature = "metrics")]
        {
            imp::Inner::bind(addr).map(|inner| MetricsServer {
                inner: std::sync::Arc::new(inner),
            })
        }
        #[cfg(not(feature = "metrics"))]
        unreachable!("check_metrics_addr refuses every address without the feature")
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        #[cfg(feature = "metrics")]
        {
            self.inner.addr
        }
        #[cfg(not(feature = "metrics"))]
        match self.never {}
    }

    /// Serve `stats` from now on (the counters of what it served before
    /// kept in the totals).
    pub(crate) fn attach(&self, source: Source) {
        #[cfg(feature = "metrics")]
        self.inner.attach(source);
        #[cfg(not(feature = "metrics"))]
        {
            let _ = source;
            match self.never {}
        }
    }

    /// The text a scrape gets now (what `GET /metrics` answers).
    pub fn render(&self) -> String {
        #[cfg(feature = "metrics")]
        {
            self.inner.render()
        }
        #[cfg(not(feature = "metrics"))]
        match self.never {}
    }
}

/// What a server reads at scrape time: a pipeline's statistics and the
/// settings that give its gauges their meaning.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Source {
    /// The pipeline's statistics.
    pub stats: crate::stats::Stats,
    /// The pass it started with.
    pub first_pass: u64,
    /// Its settings (passes, the in-flight bound).
    pub config: std::sync::Arc<crate::config::PipelineConfig>,
}

/// The counters of one pipeline, as a scrape adds them up.
#[cfg(feature = "metrics")]
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Totals {
    /// Readers, shuffle, batch maker: records, bytes, busy, idle, blocked (ns).
    pub stages: [[u64; 5]; 3],
    /// Per device: batches, records, waiting (ns).
    pub devices: Vec<[u64; 3]>,
    /// Records skipped as bad.
    pub bad_records: u64,
}

/// The stages' label values, in [`Totals::stages`]' order.
#[cfg(feature = "metrics")]
pub(crate) const STAGES: [&str; 3] = ["readers", "shuffle", "batch_maker"];

#[cfg(feature = "metrics")]
impl Totals {
    /// The counters of `stats` as they stand.
    pub(crate) fn of(stats: &crate::stats::Stats) -> Totals {
        use std::sync::atomic::Ordering::Relaxed;
        let c = stats.counters();
        let stage = |s: &crate::stats::StageCounters| {
            [&s.records, &s.bytes, &s.busy_ns, &s.idle_ns, &s.blocked_ns].map(|a| a.load(Relaxed))
        };
        Totals {
            stages: [stage(&c.readers), stage(&c.shuffle), stage(&c.maker)],
            devices: (c.devices.iter())
                .map(|d| [&d.batches, &d.records, &d.wait_ns].map(|a| a.load(Relaxed)))
                .collect(),
            bad_records: c.bad_records.load(Relaxed),
        }
    }

    /// These and `other`'s, added.
    pub(crate) fn plus(&self, other: &Totals) -> Totals {
        let mut sum = self.clone();
        for (s, o) in sum.stages.iter_mut().zip(&other.stages) {
            for (a, b) in s.iter_mut().zip(o) {
                *a += b;
            }
        }
        if sum.devices.len() < other.devices.len() {
            sum.devices.resize(other.devices.len(), [0; 3]);
        }
        for (d, o) in sum.devices.iter_mut().zip(&other.devices) {
            for (a, b) in d.iter_mut().zip(o) {
                *a += b;
            }
        }
        sum.bad_records += other.bad_records;
        sum
    }
}

/// The autotuner's current value of each setting it tunes, for
/// `feedline_autotune_value{setting}`: none without autotuning (the
/// family is registered, with no samples).
#[cfg(feature = "metrics")]
pub(crate) fn autotune_values(stats: &crate::stats::StatsSnapshot) -> Vec<(&'static str, f64)> {
    let Some(a) = &stats.autotune else {
        return Vec::new();
    };
    (crate::tuned::TunedSetting::ALL.iter())
        .map(|s| (s.key(), a.values.get(*s) as f64))
        .collect()
}

#[cfg(feature = "metrics")]
mod imp {
    //! The server's thread and the families' encoding.

    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::Mutex;
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::registry::Registry;

    use super::{autotune_values, Source, Totals, STAGES};
    use crate::error::PipelineError;

    /// How long one client may take to send its request or read the answer.
    const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
    /// The longest request head read.
    const MAX_REQUEST: usize = 8 << 10;

    /// What the thread and the handles share.
    #[derive(Default)]
    struct Shared {
        state: Mutex<State>,
        stop: AtomicBool,
    }

    /// The pipeline served now, and the counters of those served before.
    #[derive(Default)]
    struct State {
        current: Option<Source>,
        before: Totals,
    }

    pub(super) struct Inner {
        pub addr: SocketAddr,
        shared: Arc<Shared>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Inner {
        pub fn bind(addr: &str) -> Result<Inner, PipelineError> {
            let fail = |message: String| PipelineError::Metrics {
                addr: addr.to_string(),
                message,
            };
            let addrs: Vec<SocketAddr> = (addr.to_socket_addrs())
                .map_err(|e| fail(format!("cannot resolve it: {e}")))?
                .collect();
            let listener = TcpListener::bind(&addrs[..]).map_err(|e| {
                let why = match e.kind() {
                    std::io::ErrorKind::AddrInUse => "the port is in use".to_string(),
                    _ => "cannot listen there".to_string(),
                };
                fail(format!("{why} ({e})"))
            })?;
            let local = listener
                .local_addr()
                .map_err(|e| fail(format!("cannot read the address listened on: {e}")))?;
            let shared = Arc::new(Shared::default());
            let serving = shared.clone();
            let thread = std::thread::Builder::new()
                .name("feedline-metrics".into())
                .spawn(move || serve(listener, &serving))
                .map_err(|e| fail(format!("cannot start a thread: {e}")))?;
            log::info!("Prometheus metrics at http://{local}/metrics");
            Ok(Inner {
                addr: local,
                shared,
                thread: Some(thread),
            })
        }

        pub fn attach(&self, source: Source) {
            let mut state = self.shared.state.lock();
            if let Some(old) = state.current.take() {
                state.before = state.before.plus(&Totals::of(&old.stats));
            }
            state.current = Some(source);
        }

        pub fn render(&self) -> String {
            render(&self.shared)
        }
    }

    impl Drop for Inner {
        fn drop(&mut self) {
            self.shared.stop.store(true, Ordering::SeqCst);
            // Wake the accept: a connection of our own (to loopback when
            // listening on every address).
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    fn serve(listener: TcpListener, shared: &Shared) {
        for stream in listener.incoming() {
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            match stream {
                Ok(s) => {
                    if let Err(e) = answer(s, shared) {
                        log::debug!("metrics: a client's request failed: {e}");
                    }
                }
                Err(e) => log::debug!("metrics: accept failed: {e}"),
            }
        }
    }

    /// Read one request head and answer it; the connection is closed after.
    fn answer(mut s: TcpStream, shared: &Shared) -> std::io::Result<()> {
        s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        s.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        let mut words = line.lines().next().unwrap_or("").split_whitespace();
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let (status, kind, body) = match (method, path) {
            ("GET", "/metrics") => (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                render(shared),
            ),
            ("GET", _) => (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "feedline serves its metrics at /metrics\n".to_string(),
            ),
            _ => (
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                "only GET /metrics\n".to_string(),
            ),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(response.as_bytes())?;
        s.flush()
    }

    fn render(shared: &Shared) -> String {
        let families = {
            let state = shared.state.lock();
            Families::read(&state)
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(families));
        let mut text = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }

    /// Every value of a scrape, read at once.
    #[derive(Debug)]
    struct Families {
        totals: Totals,
        queue_depth: u64,
        pass: Option<u64>,
        bound: Option<u64>,
        autotune: Vec<(&'static str, f64)>,
    }

    impl Families {
        fn read(state: &State) -> Families {
            let Some(source) = &state.current else {
                return Families {
                    totals: state.before.clone(),
                    queue_depth: 0,
                    pass: None,
                    bound: None,
                    autotune: Vec::new(),
                };
            };
            let snap = source.stats.snapshot();
            let config = &source.config;
            let mut pass = source.first_pass.saturating_add(snap.passes_done);
            if config.order.passes != crate::config::ENDLESS {
                pass = pass.min(config.order.passes.saturating_sub(1));
            }
            // With autotuning: the bound of the values in force.
            let tuned = snap.autotune.as_ref().map(|a| a.applied(config));
            let in_force = tuned.as_ref().unwrap_or(config);
            let bound = (snap.readers.records > 0)
                .then(|| in_force.in_flight_bound_bytes(config.record_bytes_of_run(&snap)) as u64);
            Families {
                totals: state.before.plus(&Totals::of(&source.stats)),
                queue_depth: snap.feed_queue_depth,
                pass: Some(pass),
                bound,
                autotune: autotune_values(&snap),
            }
        }
    }

    fn seconds(ns: u64) -> f64 {
        ns as f64 / 1e9
    }

    impl Collector for Families {
        fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let t = &self.totals;
            // (name without `_total`, help, column of Totals::stages, in seconds)
            let by_stage = [
                ("feedline_records", "Records through each stage.", 0, false),
                (
                    "feedline_bytes",
                    "Payload bytes through each stage (the batch maker: of the batches it made).",
                    1,
                    false,
                ),
                (
                    "feedline_stage_busy_seconds",
                    "Seconds each stage worked (summed over its readers or workers).",
                    2,
                    true,
                ),
                (
                    "feedline_stage_idle_seconds",
                    "Seconds each stage waited for input.",
                    3,
                    true,
                ),
                (
                    "feedline_stage_blocked_seconds",
                    "Seconds each stage waited for the next stage to take its output.",
                    4,
                    true,
                ),
            ];
            for (name, help, col, in_seconds) in by_stage {
                let mut m = e.encode_descriptor(
                    name,
                    help,
                    None,
                    prometheus_client::metrics::MetricType::Counter,
                )?;
                for (stage, values) in STAGES.iter().zip(&t.stages) {
                    let labels = [("stage", *stage)];
                    let fam = m.encode_family(&labels)?;
                    match in_seconds {
                        true => ConstCounter::new(seconds(values[col])).encode(fam)?,
                        false => ConstCounter::new(values[col]).encode(fam)?,
                    }
                }
            }
            let by_device = [
                (
                    "feedline_batches",
                    "Batches each device (consumer) received.",
                    0,
                    false,
                ),
                (
                    "feedline_device_wait_seconds",
                    "Seconds each device waited for a batch after its first.",
                    2,
                    true,
                ),
            ];
            for (name, help, col, in_seconds) in by_device {
                let mut m = e.encode_descriptor(
                    name,
                    help,
                    None,
                    prometheus_client::metrics::MetricType::Counter,
                )?;
                for (device, values) in t.devices.iter().enumerate() {
                    let device = device.to_string();
                    let labels = [("device", device.as_str())];
                    let fam = m.encode_family(&labels)?;
                    match in_seconds {
                        true => ConstCounter::new(seconds(values[col])).encode(fam)?,
                        false => ConstCounter::new(values[col]).encode(fam)?,
                    }
                }
            }
            let bad = ConstCounter::new(t.bad_records);
            bad.encode(e.encode_descriptor(
                "feedline_bad_records",
                "Records skipped as bad under the skip policy.",
                None,
                bad.metric_type(),
            )?)?;
            let gauges = [
                (
                    "feedline_feed_queue_depth",
                    "Batches in the feed queue now (all lanes).",
                    Some(self.queue_depth),
                ),
                (
                    "feedline_pass",
                    "The 0-based pass the pipeline is making (the last once all are made).",
                    self.pass,
                ),
                (
                    "feedline_in_flight_bound_bytes",
                    "The stated bound of the bytes in flight, for the records' sizes so far.",
                    self.bound,
                ),
            ];
            for (name, help, value) in gauges {
                let g = ConstGauge::new(value.unwrap_or(0) as i64);
                let m = e.encode_descriptor(name, help, None, g.metric_type())?;
                if value.is_some() {
                    g.encode(m)?;
                }
            }
            let mut m = e.encode_descriptor(
                "feedline_autotune_value",
                "The value the autotuner chose for each setting it tunes.",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (setting, value) in &self.autotune {
                let labels = [("setting", *setting)];
                ConstGauge::new(*value).encode(m.encode_family(&labels)?)?;
            }
            Ok(())
        }
    }
}
