//! The live progress line of `run` and `bench`: one line on standard error,
//! rewritten in place about twice a second (drawn by `indicatif`), only when
//! standard error is a terminal and `--quiet` is not given ([`shown`]). Its
//! text is a pure function of a statistics snapshot and where the run is
//! ([`line`], [`locate`]): pass i of n, records, records/s, the limiting
//! stage, and — when the pass's length in batches is known (the inputs'
//! record counts, made on a thread of their own for local inputs) — a bar
//! with the ETA.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use feedline_actors::counting::{len_from, RecordCounts};
use feedline_actors::{PipelineConfig, Stats, StatsSnapshot};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;

/// How often the line is rewritten.
const TICK: Duration = Duration::from_millis(500);
/// The bar's width in characters.
const BAR: usize = 10;

/// Whether the line is drawn: standard error is a terminal, and `--quiet`
/// was not given.
pub fn shown(stderr_is_terminal: bool, quiet: bool) -> bool {
    stderr_is_terminal && !quiet
}

/// Where a run stands: the pass (0-based, as `--passes` counts them from
/// the run's first), of how many, the batches delivered in it and its
/// length in batches where known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    /// The pass delivered now, 0-based.
    pub pass: u64,
    /// Passes in the run.
    pub passes: u64,
    /// Batches delivered in this pass so far.
    pub done: u64,
    /// The pass's batches, when known.
    pub len: Option<u64>,
}

/// Where `delivered` batches put a run of `passes` passes from
/// `first_pass`, each of `len_of(pass)` batches where known: the pass is
/// the first not delivered whole (with no length known, `made` — the
/// passes the pipeline has made — says which, and `done` counts from the
/// run's start).
pub fn locate(
    delivered: u64,
    first_pass: u64,
    passes: u64,
    made: u64,
    len_of: impl Fn(u64) -> Option<u64>,
) -> Place {
    let last = passes.saturating_sub(1);
    let mut pass = first_pass;
    let mut left = delivered;
    loop {
        match len_of(pass) {
            Some(len) if left >= len && pass < last && len > 0 => {
                left -= len;
                pass += 1;
            }
            Some(len) => {
                return Place {
                    pass: pass - first_pass,
                    passes: passes - first_pass,
                    done: left,
                    len: Some(len),
                }
            }
            None => {
                return Place {
                    pass: (pass - first_pass + made).min(last - first_pass),
                    passes: passes - first_pass,
                    done: left,
                    len: None,
                }
            }
        }
    }
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Seconds as `42s`, `3m07s`, `2h05m`.
fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The line for `snap` at `place`, `pass_s` seconds into the pass: the
/// pass, a bar with the ETA where the pass's length is known (else the
/// batches delivered in the pass), records delivered and records/s over the
/// run, and the limiting stage (`?` before the first batch). Most telling
/// first: a narrow terminal cuts the end.
pub fn line(snap: &StatsSnapshot, place: &Place, pass_s: f64) -> String {
    let records: u64 = snap.devices.iter().map(|d| d.records).sum();
    let rate = records as f64 / snap.elapsed_s.max(1e-9);
    let passes = match place.passes {
        feedline_actors::ENDLESS => "∞".to_string(),
        n => grouped(n),
    };
    let mut text = format!("pass {}/{passes} ", grouped(place.pass + 1));
    match place.len.filter(|&l| l > 0) {
        Some(len) => {
            let done = place.done.min(len);
            let filled = (done as usize * BAR) / len as usize;
            let eta = match done {
                0 => "?".to_string(),
                _ => duration(pass_s / done as f64 * (len - done) as f64),
            };
            text.push_str(&format!(
                "[{}{}] {:>3}% ETA {eta}",
                "#".repeat(filled),
                "-".repeat(BAR - filled),
                done * 100 / len,
            ));
        }
        None => text.push_str(&format!("{} batches", grouped(place.done))),
    }
    let limiting = match records {
        0 => "?".to_string(),
        _ => snap.bottleneck.to_string(),
    };
    text.push_str(&format!(
        " | {} rec {}/s | limiting: {limiting}",
        grouped(records),
        grouped(rate.round() as u64),
    ));
    text
}

/// What the line follows: a pipeline's statistics and how to place them.
pub struct Watched {
    /// The pipeline's statistics.
    pub stats: Stats,
    /// Its settings (passes, and for the pass's length).
    pub config: Arc<PipelineConfig>,
    /// The inputs' record counts (the passes' lengths), when they are counted.
    pub counts: Option<Arc<RecordCounts>>,
    /// The number of this pipeline's first pass in the run (`bench` runs
    /// a fresh loader per pass; `run` may start at a later pass).
    pub offset: u64,
    /// Passes in the whole run.
    pub passes: u64,
}

impl Watched {
    /// The line now, `pass_s` into what `pass_start` says (the pass and its
    /// start, kept between ticks).
    fn line(&self, pass_start: &mut (u64, std::time::Instant)) -> String {
        let snap = self.stats.snapshot();
        let delivered: u64 = snap.devices.iter().map(|d| d.batches).sum();
        let counted = self.counts.as_ref().and_then(|c| c.peek());
        let config = &self.config;
        let len_of = |pass: u64| {
            let c = counted.clone()?;
            (config.batching.pack.is_none())
                .then(|| len_from(config, c, pass).ok())
                .flatten()
        };
        let first = config.resume.first_pass;
        let mut place = locate(
            delivered,
            first,
            config.order.passes,
            snap.passes_done,
            len_of,
        );
        place.pass += self.offset;
        place.passes = self.passes;
        if place.pass != pass_start.0 {
            *pass_start = (place.pass, std::time::Instant::now());
        }
        line(&snap, &place, pass_start.1.elapsed().as_secs_f64())
    }
}

/// The line on standard error, redrawn by a thread of its own.
pub struct ProgressLine {
    watched: Arc<Mutex<Option<Watched>>>,
    stop: Arc<AtomicBool>,
    bar: ProgressBar,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressLine {
    /// The line, when [`shown`] for this process's standard error and `quiet`.
    pub fn start(quiet: bool) -> Option<ProgressLine> {
        if !shown(std::io::stderr().is_terminal(), quiet) {
            return None;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(ProgressStyle::with_template("{wide_msg}").ok()?);
        let watched: Arc<Mutex<Option<Watched>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s, b) = (watched.clone(), stop.clone(), bar.clone());
        let thread = std::thread::Builder::new()
            .name("feedline-progress".into())
            .spawn(move || {
                let mut pass_start = (0, std::time::Instant::now());
                while !s.load(Ordering::SeqCst) {
                    if let Some(watched) = &*w.lock() {
                        b.set_message(watched.line(&mut pass_start));
                    }
                    std::thread::park_timeout(TICK);
                }
            })
            .ok()?;
        Some(ProgressLine {
            watched,
            stop,
            bar,
            thread: Some(thread),
        })
    }

    /// Run `f` with the line taken off the terminal (what `f` prints does
    /// not mix with it), then draw it again.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Follow `w` from now on (its record counts started, for local inputs).
    pub fn watch(&self, w: Watched) {
        if let Some(c) = &w.counts {
            c.start_if_local();
        }
        *self.watched.lock() = Some(w);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

/// `bench`'s passes, each loader followed as it starts.
impl crate::measure::Watch for ProgressLine {
    fn loader(&self, loader: &feedline_actors::Loader, first: u64, passes: u64) {
        self.watch(Watched {
            stats: loader.stats_handle(),
            config: Arc::new(loader.config().clone()),
            counts: Some(loader.record_counts()),
            offset: first,
            passes,
        });
    }
}

impl Drop for ProgressLine {
    /// The line is cleared: what the command prints next starts on a clean line.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_drawn_only_on_a_terminal_and_not_when_quiet() {
        assert!(shown(true, false));
        assert!(!shown(true, true));
        assert!(!shown(false, false));
        assert!(!shown(false, true));
    }

    #[test]
    fn delivered_batches_are_placed_in_their_pass() {
        // Passes of 10, 10 and 12 batches: 25 delivered is 5 into pass 2 (0-based).
        let lens = |p: u64| Some([10, 10, 12][p as usize]);
        let at = locate(25, 0, 3, 0, lens);
        assert_eq!(
            at,
            Place {
                pass: 2,
                passes: 3,
                done: 5,
                len: Some(12)
            }
        );
        // A pass delivered whole is done until the next pass's first batch.
        assert_eq!(locate(10, 0, 3, 0, lens).pass, 1);
        assert_eq!(locate(9, 0, 3, 0, lens).pass, 0);
        // The last pass holds whatever is over.
        assert_eq!(
            locate(32, 0, 3, 0, lens),
            Place {
                pass: 2,
                passes: 3,
                done: 12,
                len: Some(12)
            }
        );
        // From a first pass of 1: passes are counted from it.
        assert_eq!(locate(12, 1, 3, 0, lens).pass, 1);
        // Length unknown: the passes made say which, no bar.
        let at = locate(40, 0, 3, 1, |_| None);
        assert_eq!((at.pass, at.len, at.done), (1, None, 40));
    }

    fn snapshot(records: u64, batches: u64, elapsed: f64) -> StatsSnapshot {
        // A snapshot as a loader's statistics give it: from real counters.
        let mut s = feedline_actors::Stats::detached(1).snapshot();
        s.elapsed_s = elapsed;
        s.devices[0].records = records;
        s.devices[0].batches = batches;
        s.bottleneck = feedline_actors::Bottleneck::Readers;
        s
    }

    #[test]
    fn the_line_says_pass_records_rate_limiting_stage_and_a_bar_with_eta() {
        let s = snapshot(51_200, 200, 2.0);
        let at = Place {
            pass: 1,
            passes: 3,
            done: 50,
            len: Some(100),
        };
        // 50 of 100 batches in 10 s: 10 s to go.
        let text = line(&s, &at, 10.0);
        assert_eq!(
            text,
            "pass 2/3 [#####-----]  50% ETA 10s | 51,200 rec 25,600/s | limiting: readers"
        );
        assert!(text.chars().count() <= 80, "fits a terminal: {text}");
        let unknown = line(&s, &Place { len: None, ..at }, 10.0);
        assert_eq!(
            unknown,
            "pass 2/3 50 batches | 51,200 rec 25,600/s | limiting: readers"
        );
        let start = line(&s, &Place { done: 0, ..at }, 0.0);
        assert!(start.contains("[----------]   0% ETA ?"), "{start}");
        let none = line(&snapshot(0, 0, 0.1), &at, 1.0);
        assert!(none.ends_with("| 0 rec 0/s | limiting: ?"), "{none}");
        let endless = line(
            &s,
            &Place {
                passes: feedline_actors::ENDLESS,
                ..at
            },
            10.0,
        );
        assert!(endless.starts_with("pass 2/∞ ["), "{endless}");
    }

    #[test]
    fn durations_read_as_seconds_minutes_hours() {
        assert_eq!(duration(42.4), "42s");
        assert_eq!(duration(187.0), "3m07s");
        assert_eq!(duration(7500.0), "2h05m");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(999), "999");
    }
}
