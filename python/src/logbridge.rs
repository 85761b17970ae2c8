//! The library's `log` records in Python's `logging`, under the logger
//! `"feedline"` (`feedline.actors.supervisor`, `feedline.format.tfrecord`,
//! `feedline.vision…`; other crates' records under `feedline.deps.CRATE`).
//!
//! Records are made on the pipeline's threads, which never touch a Python
//! object (they would have to take the GIL, and a thread that holds it may
//! be waiting for them): the [`Bridge`] queues each record (at most
//! [`QUEUE_MAX`]; past that they are counted, and the count reported), and
//! the queue is emptied into `logging` on the Python side, with the GIL held,
//! whenever Python calls into the module — a loader's construction, each
//! `next()` (one atomic load when the queue is empty), `len()`, `close()`,
//! and the interpreter's exit. Rust's level filter follows the effective
//! level of the `"feedline"` logger, read at each loader's construction (so
//! `logging.getLogger("feedline").setLevel(logging.DEBUG)`, or pytest's
//! `caplog.at_level`, before building a loader lets its debug records through).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use pyo3::prelude::*;

/// Records queued at most; later ones are counted as dropped.
pub const QUEUE_MAX: usize = 4096;

struct Rec {
    level: log::Level,
    logger: String,
    message: String,
}

/// The `log` implementation: a bounded queue for the Python side.
struct Bridge {
    queue: Mutex<VecDeque<Rec>>,
    /// Set while the queue holds records (read without the lock).
    pending: AtomicBool,
    dropped: AtomicU64,
}

static BRIDGE: Bridge = Bridge {
    queue: Mutex::new(VecDeque::new()),
    pending: AtomicBool::new(false),
    dropped: AtomicU64::new(0),
};

/// The Python logger's name for a Rust log target.
fn logger_name(target: &str) -> String {
    let (krate, rest) = target.split_once("::").unwrap_or((target, ""));
    let base = match krate {
        "feedline" => "feedline".to_string(),
        "feedline_actors" => "feedline.actors".to_string(),
        "feedline_vision" => "feedline.vision".to_string(),
        other => format!("feedline.deps.{other}"),
    };
    if rest.is_empty() {
        base
    } else {
        format!("{base}.{}", rest.replace("::", "."))
    }
}

impl log::Log for Bridge {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= QUEUE_MAX {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back(Rec {
            level: record.level(),
            logger: logger_name(record.target()),
            message: record.args().to_string(),
        });
        self.pending.store(true, Ordering::Release);
    }

    fn flush(&self) {}
}

/// Make the bridge the process's `log` logger (once; if another logger was
/// set first, that one stays).
pub fn install() {
    if log::set_logger(&BRIDGE).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

/// Python's level number of a Rust level.
fn py_level(l: log::Level) -> u32 {
    match l {
        log::Level::Error => 40,
        log::Level::Warn => 30,
        log::Level::Info => 20,
        log::Level::Debug => 10,
        log::Level::Trace => 5,
    }
}

/// Let through the Rust records the `"feedline"` logger would emit.
pub fn sync_level(py: Python<'_>) -> PyResult<()> {
    let level: u32 = py
        .import("logging")?
        .call_method1("getLogger", ("feedline",))?
        .call_method0("getEffectiveLevel")?
        .extract()?;
    log::set_max_level(match level {
        0..=5 => log::LevelFilter::Trace,
        6..=10 => log::LevelFilter::Debug,
        11..=20 => log::LevelFilter::Info,
        21..=30 => log::LevelFilter::Warn,
        _ => log::LevelFilter::Error,
    });
    Ok(())
}

/// Hand the queued records to `logging` (call with the GIL; cheap when
/// none are queued). A record `logging` fails on is passed over.
pub fn flush(py: Python<'_>) {
    if !BRIDGE.pending.load(Ordering::Acquire) {
        return;
    }
    let recs: Vec<Rec> = {
        let mut q = BRIDGE.queue.lock().unwrap_or_else(|p| p.into_inner());
        BRIDGE.pending.store(false, Ordering::Release);
        q.drain(..).collect()
    };
    let dropped = BRIDGE.dropped.swap(0, Ordering::Relaxed);
    let Ok(logging) = py.import("logging") else {
        return;
    };
    for r in &recs {
        if let Ok(logger) = logging.call_method1("getLogger", (r.logger.as_str(),)) {
            let _ = logger.call_method1("log", (py_level(r.level), r.message.as_str()));
        }
    }
    if dropped > 0 {
        if let Ok(logger) = logging.call_method1("getLogger", ("feedline",)) {
            let _ = logger.call_method1(
                "warning",
                (format!(
                    "{dropped} log records of the pipeline were dropped (more than {QUEUE_MAX} \
                     queued between two calls into feedline)"
                ),),
            );
        }
    }
}

/// `feedline._native._flush_logs()`: hand the queued records to `logging` now.
#[pyfunction]
pub fn _flush_logs(py: Python<'_>) {
    flush(py);
}
