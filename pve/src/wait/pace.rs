//! How fast a wait may look: what a task request costs the server (apart from the network),
//! and the budget of a wait on a copy (no more requests than a one-second poll would send).
//!
//! A request's time is the round trip plus what the server spends on it. Neither is known
//! alone, but the round trip does not change while the server's share does: as delay-based
//! congestion control does, the quickest answer seen in the session (any request: the login, a
//! config read, a task request) stands for the round trip plus the least a request costs, and
//! a task request's time beyond it is the server's share (its queue, the request's own cost).
//! So a far but idle server is looked at as often as a near one, and a busy one, whose answers
//! come slower than they did, is looked at less often. A server slow from the first answer on
//! reads as far: only what it adds later counts as load.

use std::time::Duration;

use super::policy::Policy;

/// How many of the latest task requests the current request time is read from.
const RECENT: usize = 4;

/// Request times and the request budget of one wait.
#[derive(Clone, Debug, Default)]
pub(super) struct Pace {
    /// Task requests made (status and log).
    requests: u32,
    /// The latest look's duration, not yet counted (the shell notes it before the decision).
    pending: Option<Duration>,
    /// The latest look's duration, whatever its outcome: the sleep after it is shortened by
    /// it, so the looks reach the server at the spacing the policy chose.
    last: Duration,
    /// The quickest answer seen in this session: the round trip and the least the server
    /// spends on a request.
    baseline: Option<Duration>,
    /// The durations of the latest answered task requests, oldest first.
    recent: Vec<Duration>,
    /// Where the budget of one request a period counts from (requests, elapsed), set at the
    /// first progress sample.
    budget_from: Option<(u32, Duration)>,
}

impl Pace {
    /// Records how long the latest look's first request took; it counts once the decision
    /// knows whether the server answered it.
    pub(super) fn note_request_time(&mut self, took: Duration) {
        self.pending = Some(took);
    }

    /// Records the quickest answer to any request of the session (the client's figure).
    pub(super) fn note_baseline(&mut self, quickest: Duration) {
        self.baseline = Some(self.baseline.map_or(quickest, |b| b.min(quickest)));
    }

    pub(super) fn note_extra_requests(&mut self, count: u32) {
        self.requests = self.requests.saturating_add(count);
    }

    pub(super) fn requests(&self) -> u32 {
        self.requests
    }

    /// Counts the look just made. An answered look's time joins the statistics; a failed one
    /// (a refused connection, a timeout, a 5xx from a proxy) says nothing of the server's
    /// load or of the round trip.
    pub(super) fn count_look(&mut self, answered: bool) {
        self.requests = self.requests.saturating_add(1);
        let Some(took) = self.pending.take() else {
            self.last = Duration::ZERO;
            return;
        };
        self.last = took;
        if answered {
            self.note_baseline(took);
            if self.recent.len() == RECENT {
                self.recent.remove(0);
            }
            self.recent.push(took);
        }
    }

    /// How long the latest look took.
    pub(super) fn last(&self) -> Duration {
        self.last
    }

    /// A task request's time now: the least of the latest few, so one slow answer (a hiccup
    /// of the network or of this host) is not read as load, while a queue that lasts is.
    fn current(&self) -> Duration {
        self.recent.iter().min().copied().unwrap_or(Duration::ZERO)
    }

    /// What the server spends on a task request beyond the quickest answer of the session.
    pub(super) fn server_share(&self) -> Duration {
        self.current()
            .saturating_sub(self.baseline.unwrap_or(Duration::ZERO))
    }

    /// The period of a one-second poll on this network: a second's sleep and a request.
    pub(super) fn period(&self) -> Duration {
        Duration::from_secs(1) + self.current()
    }

    /// Periods elapsed since `from`, rounded down.
    fn periods(&self, from: Duration, elapsed: Duration) -> u64 {
        (elapsed.saturating_sub(from).as_secs_f64() / self.period().as_secs_f64()).floor() as u64
    }

    /// Starts the budget at the first progress sample. It counts from dispatch, as a
    /// one-second poll's would. A wait that expected the copy paid for its early looks from
    /// the start; otherwise the requests made before the first progress line count as at most
    /// one a period (more are forgiven, so a copy nobody expected is not starved of polls).
    pub(super) fn start_budget(&mut self, elapsed: Duration, expected: bool) {
        if self.budget_from.is_some() {
            return;
        }
        let forgiven = if expected {
            0
        } else {
            let periods = u32::try_from(self.periods(Duration::ZERO, elapsed)).unwrap_or(u32::MAX);
            self.requests.saturating_sub(periods.saturating_add(1))
        };
        self.budget_from = Some((forgiven, Duration::ZERO));
    }

    /// How many requests the budget has now (`None` before it applies): one a period since
    /// it started, plus [`Policy::allowance`], less those made.
    pub(super) fn budget_left(&self, policy: &Policy, elapsed: Duration) -> Option<u64> {
        let (at_requests, at) = self.budget_from?;
        let used = u64::from(self.requests.saturating_sub(at_requests));
        let earned = self.periods(at, elapsed) + u64::from(policy.allowance);
        Some(earned.saturating_sub(used))
    }

    /// The earliest elapsed time the next request may be sent: when the budget has it, or,
    /// for a wait expecting a copy whose progress has not shown yet, after `early_looks` quick
    /// looks one a period from dispatch.
    pub(super) fn next_allowed(&self, policy: &Policy, early_looks: u64) -> Option<Duration> {
        let period = self.period();
        if let Some((at_requests, at)) = self.budget_from {
            let used = u64::from(self.requests.saturating_sub(at_requests));
            let n = (used + 1).saturating_sub(u64::from(policy.allowance));
            return Some(at.saturating_add(period.saturating_mul(u32::try_from(n).ok()?)));
        }
        if policy.expect_progress {
            let n = (u64::from(self.requests) + 1).saturating_sub(early_looks);
            return Some(period.saturating_mul(u32::try_from(n).ok()?));
        }
        None
    }

    /// The spacing that spreads the budget's requests over a window ending at `until`: the
    /// requests left now plus one a period to come, less `reserve` kept for the finishing
    /// phase after 100 %, at no less than the dense interval and no more than a period.
    pub(super) fn paced(
        &self,
        policy: &Policy,
        elapsed: Duration,
        until: Duration,
        reserve: f64,
    ) -> Duration {
        let window = until.saturating_sub(elapsed);
        let period = self.period();
        match self.budget_left(policy, elapsed) {
            Some(left) => {
                let n = left as f64 - reserve + window.as_secs_f64() / period.as_secs_f64();
                if n < 1.0 {
                    period
                } else {
                    window.div_f64(n).clamp(policy.dense, period)
                }
            }
            None => policy.dense,
        }
    }
}
