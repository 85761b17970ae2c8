//! SIGINT and SIGTERM during `feedline run`: blocked in every thread (the
//! mask is set before any other thread starts, and threads inherit it) and
//! taken by one thread of their own with `sigwait`, so no code runs in a
//! signal handler. The first signal is recorded, wakes every simulated
//! device's wait ([`Interrupt::wait`]) and is sent to the run, which stops
//! the pipeline, finishes the trace and reports; a second one ends the
//! process at once.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use parking_lot::{Condvar, Mutex};

/// The first signal received, if any; waits that it cuts short.
#[derive(Default)]
pub struct Interrupt {
    signal: Mutex<Option<i32>>,
    woken: Condvar,
}

impl Interrupt {
    /// Wait for `time`, or until a signal arrives (at once if one did).
    pub fn wait(&self, time: Duration) {
        let deadline = Instant::now() + time;
        let mut signal = self.signal.lock();
        while signal.is_none() {
            if self.woken.wait_until(&mut signal, deadline).timed_out() {
                return;
            }
        }
    }

    fn raise(&self, sig: i32) {
        *self.signal.lock() = Some(sig);
        self.woken.notify_all();
    }
}

/// The signals of a run, once [`handle`] has taken them over.
pub struct Signals {
    /// Shared with whatever waits and should stop waiting.
    pub interrupt: Arc<Interrupt>,
    /// Resolves with the first signal.
    pub first: oneshot::Receiver<i32>,
}

/// Take SIGINT and SIGTERM over for this process. Call it before any other
/// thread is started (the mask is inherited; a thread started before keeps
/// the default action).
pub fn handle() -> io::Result<Signals> {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which
    // initialises it; the calls below only read and write these locals.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        set
    };
    let interrupt = Arc::new(Interrupt::default());
    let (tx, first) = oneshot::channel();
    let shared = interrupt.clone();
    std::thread::Builder::new()
        .name("feedline-signals".into())
        .spawn(move || {
            let mut tx = Some(tx);
            loop {
                let mut sig = 0;
                // SAFETY: `set` is initialised and blocked; sigwait writes `sig`.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                match tx.take() {
                    Some(tx) => {
                        shared.raise(sig);
                        let _ = tx.send(sig);
                    }
                    None => {
                        let _ = writeln!(
                            io::stderr(),
                            "feedline: {} again: exiting at once",
                            name(sig)
                        );
                        std::process::exit(exit_code(sig).into());
                    }
                }
            }
        })?;
    Ok(Signals { interrupt, first })
}

/// `SIGINT`, `SIGTERM`, or the signal's number.
pub fn name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

/// The shell's exit code for a run ended by `sig`: 128 + its number
/// (130 for SIGINT, 143 for SIGTERM).
pub fn exit_code(sig: i32) -> u8 {
    u8::try_from(128 + sig).unwrap_or(u8::MAX)
}
