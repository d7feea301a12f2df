//! SIGINT, SIGTERM, SIGHUP and SIGQUIT (Ctrl-C on `ansible-playbook`, a killed async job, a
//! closed terminal, Ctrl-\\) must not kill the module silently: the handler only raises a
//! flag; the waits check it, and no write starts once it is raised (`Client::write`), so the
//! module stops at once and still prints one failed result naming the task in flight.

use std::sync::atomic::{AtomicI32, Ordering};

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// Installs the handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, handler);
        }
    }
}

/// The signal received, if any ("SIGTERM", "SIGINT").
pub fn received() -> Option<&'static str> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGHUP => Some("SIGHUP"),
        libc::SIGQUIT => Some("SIGQUIT"),
        _ => Some("a signal"),
    }
}

/// Sleeps up to `d`, waking early (returning false) when a signal arrives.
pub fn sleep(d: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if received().is_some() {
            return false;
        }
        let now = std::time::Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(std::time::Duration::from_millis(20)));
    }
}
