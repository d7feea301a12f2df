//! Every catchable signal that would end the process (SIGINT from Ctrl-C on
//! `ansible-playbook`, SIGTERM from a killed async job, SIGHUP from a closed terminal, SIGQUIT,
//! SIGUSR1 sent by an operator's script, SIGALRM, SIGXCPU from a CPU limit, the real-time
//! signals, …) must not kill the module silently: the handler only raises a flag; the waits
//! check it, and no write starts once it is raised (`Client::write`), so the module stops at
//! once and still prints one failed result naming the signal and the task in flight.
//!
//! Left alone: SIGKILL and SIGSTOP (nobody can catch them), the signals whose default is to
//! ignore or stop (SIGCHLD, SIGURG, SIGWINCH, SIGCONT, SIGTSTP, SIGTTIN, SIGTTOU: the run goes
//! on), and SIGPIPE, which Rust's runtime ignores so that a closed pipe is an error where it
//! is written. The signals a fault raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
//! SIGABRT) count only when another process sent them (`kill -SEGV`); a real fault gets the
//! default action back and ends the process as it would have.

use std::sync::atomic::{AtomicI32, Ordering};

static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Signals a fault of this process raises: the kernel sends them with a positive `si_code`.
const SYNCHRONOUS: [libc::c_int; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGABRT,
];

/// The signals whose default action ends the process and that can be caught, SIGPIPE aside.
fn terminating() -> Vec<libc::c_int> {
    let mut sigs = vec![
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSTKFLT,
    ];
    sigs.extend(SYNCHRONOUS);
    sigs.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    sigs
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    if SYNCHRONOUS.contains(&sig) && code > 0 {
        // A real fault: the default action, which ends the process when the faulting
        // instruction runs again on return.
        // SAFETY: signal() with SIG_DFL is async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
        return;
    }
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// Installs the handler for every signal in [`terminating`]. `SA_RESTART` keeps interrupted
/// system calls going (a request in flight ends by its own timeout, then the flag is seen).
pub fn install() {
    for sig in terminating() {
        // SAFETY: the handler only reads its siginfo and stores to an atomic (or resets its
        // own disposition), all async-signal-safe; the sigaction struct is fully initialised.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// The name of a signal number ("SIGUSR1", "SIGRTMIN+3").
fn name(sig: libc::c_int) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGSTKFLT, "SIGSTKFLT"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGPWR, "SIGPWR"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    if let Some((_, n)) = known.iter().find(|(s, _)| *s == sig) {
        return n.to_string();
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match sig {
        s if s == min => "SIGRTMIN".into(),
        s if s == max => "SIGRTMAX".into(),
        // As kill -l and bash name them: the lower half from SIGRTMIN, the upper from SIGRTMAX.
        s if s > min && s <= (min + max) / 2 => format!("SIGRTMIN+{}", s - min),
        s if s > min && s < max => format!("SIGRTMAX-{}", max - s),
        s => format!("signal {s}"),
    }
}

/// The signal received, if any ("SIGTERM", "SIGUSR1", "SIGRTMIN+3").
pub fn received() -> Option<&'static str> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        sig => {
            // One name per signal number for the whole process, made once.
            static NAMES: std::sync::OnceLock<std::sync::Mutex<Vec<(i32, &'static str)>>> =
                std::sync::OnceLock::new();
            let mut names = NAMES
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some((_, n)) = names.iter().find(|(s, _)| *s == sig) {
                return Some(n);
            }
            let leaked: &'static str = Box::leak(name(sig).into_boxed_str());
            names.push((sig, leaked));
            Some(leaked)
        }
    }
}

/// Sleeps up to `d`, waking early (returning false) when a signal arrives.
pub fn sleep(duration: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + duration;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_terminating_signal() {
        for sig in terminating() {
            assert!(name(sig).starts_with("SIG"), "{sig}: {}", name(sig));
        }
        assert_eq!(name(libc::SIGUSR1), "SIGUSR1");
        assert_eq!(name(libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(name(libc::SIGRTMAX() - 1), "SIGRTMAX-1");
        assert!(!terminating().contains(&libc::SIGPIPE));
        assert!(!terminating().contains(&libc::SIGCHLD));
    }
}
