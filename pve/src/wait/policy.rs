//! The wait's tunables ([`Policy`]) and their defaults.
//!
//! Apart from `wait.rs` (the policy's decisions, which read them) because `pace` reads them
//! too: `wait` → `pace` → `policy`, and `wait` → `policy`, one way.

use std::time::Duration;

use crate::budget::Budget;
#[cfg(doc)]
use crate::retry::Awaiting;

/// Tunables of the wait.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Give up after this long (wall clock, from the start of the wait).
    pub timeout: Duration,
    /// The first interval.
    pub first: Duration,
    /// Growth factor of the interval while nothing predicts the end.
    pub growth: f64,
    /// The longest interval without a progress-based prediction. Detection latency is about
    /// half of it on average (plus the answer's way back); 100 ms keeps the median of even ten
    /// tasks under 100 ms with margin (150 ms gave 75 ms on average, and a median of ten
    /// strayed past 100 ms one cell in ten), at 10 polls a second.
    pub cap: Duration,
    /// Looks at the server are spaced at least this many times what the server spends on a
    /// task request beyond the quickest answer of the session (see `pace`): 50 keeps a waiting
    /// module under 2 % of one pveproxy worker, so when `pveproxy` is busy (answers slower
    /// than they were, for seconds), waiting clients back off instead of adding load, while a
    /// far server (a long round trip, answers slow from the first) is looked at as often as a
    /// near one. The spacing it asks for is never more than a one-second poll's.
    pub busy_factor: f64,
    /// The interval near a predicted end and while a copied task finishes.
    pub dense: Duration,
    /// A wait with progress may send this many requests more than one per period elapsed (a
    /// second and a request, as a one-second poll spends).
    pub allowance: u32,
    /// The longest sleep a prediction may ask for.
    pub long_cap: Duration,
    /// The task is expected to copy and report progress (an import): before its first
    /// progress line it is polled at one request a period after [`EARLY_LOOKS`](super::EARLY_LOOKS) quick ones,
    /// so a copy that is slow to begin costs no more than a one-second poll, and its early
    /// looks count against the budget from dispatch.
    pub expect_progress: bool,
    /// How long a fresh task may answer `no such task` before that is an error.
    pub invisible_grace: Duration,
    /// The seed of the back-off after a failed look ([`Awaiting::Transient`]'s, the one
    /// curve of every retry).
    pub seed: u64,
}

impl Policy {
    /// The default policy for what is left of a run's budget.
    pub fn for_budget(budget: &Budget) -> Policy {
        Policy {
            seed: budget.seed(),
            ..Policy::with_timeout(budget.left())
        }
    }

    /// The default policy with this deadline.
    pub fn with_timeout(timeout: Duration) -> Policy {
        Policy {
            timeout,
            first: Duration::from_millis(50),
            growth: 1.5,
            cap: Duration::from_millis(100),
            long_cap: Duration::from_secs(30),
            expect_progress: false,
            busy_factor: 50.0,
            dense: Duration::from_millis(130),
            allowance: 1,
            invisible_grace: Duration::from_secs(10),
            seed: 0,
        }
    }

    /// The same policy, expecting (or not) a copy that reports progress.
    pub fn expecting_progress(self, expect_progress: bool) -> Policy {
        Policy {
            expect_progress,
            ..self
        }
    }

    /// The same policy with another cap (the `poll_interval` option). A cap above the default
    /// one (fewer requests asked for) slows the dense looks with it, one below it makes them
    /// no longer than the cap, and at the default they keep their own interval (a copy's
    /// finishing phase is polled within the requests a one-second poll would send: denser
    /// looks would spend them sooner).
    pub fn with_cap(self, cap: Duration) -> Policy {
        let dense = match cap.cmp(&self.cap) {
            std::cmp::Ordering::Greater => self.dense.max(cap),
            std::cmp::Ordering::Less => self.dense.min(cap),
            std::cmp::Ordering::Equal => self.dense,
        };
        Policy { cap, dense, ..self }
    }
}
