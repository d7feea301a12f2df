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
//!
//! Only a load that lasts counts: the request time is the least over the answers of the last
//! [`LOAD_SPAN`] (and at least the latest [`RECENT`]), and none is read before the wait has
//! [`FIRST_READING`] answers. A host starved of CPU, a proxy that stalls, or a burst of work at the
//! server (ten copies ending at once) makes a few answers slow for a fraction of a second;
//! read as load, they spaced the looks by seconds exactly when the task was ending. And the
//! relief never spaces the looks further apart than a one-second poll does: a waiting module
//! adds no more than the peer's poll to a busy server, and never notices an end later.

use std::time::Duration;

use super::policy::Policy;

/// The fewest answered task requests the current request time is read from.
const RECENT: usize = 4;
/// How far back the current request time looks (at the least, the latest [`RECENT`]
/// answers): a server's queue lasts longer than this, a host's or a proxy's stall seldom does.
pub(super) const LOAD_SPAN: Duration = Duration::from_secs(2);
/// Answered task requests before any load is read: the first answer of a wait is often slow
/// (the server still busy with the request that started the task, or with its neighbours').
const FIRST_READING: usize = 2;

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
    /// The latest answered task requests, oldest first: when each was answered (elapsed)
    /// and how long it took. Those of the last [`LOAD_SPAN`] are kept, and at least
    /// [`RECENT`].
    recent: Vec<(Duration, Duration)>,
    /// Periods of a one-second poll since dispatch, each stretch of the wait counted at the
    /// period of its time (a request time that changes does not move the periods already
    /// passed), and when they were last counted.
    periods: f64,
    counted_at: Duration,
    /// The budget of one request a period, counted from dispatch, set at the first progress
    /// sample: the requests made before it that it forgives.
    budget_from: Option<u32>,
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

    pub(super) fn note_extra_requests(&mut self, n: u32) {
        self.requests = self.requests.saturating_add(n);
    }

    pub(super) fn requests(&self) -> u32 {
        self.requests
    }

    /// Counts the look just made, answered at `elapsed`. An answered look's time joins the
    /// statistics; a failed one (a refused connection, a timeout, a 5xx from a proxy) says
    /// nothing of the server's load or of the round trip.
    pub(super) fn count_look(&mut self, answered: bool, elapsed: Duration) {
        self.requests = self.requests.saturating_add(1);
        let took = self.pending.take();
        self.last = took.unwrap_or(Duration::ZERO);
        if let Some(took) = took.filter(|_| answered) {
            self.note_baseline(took);
            self.recent.push((elapsed, took));
            let since = elapsed.saturating_sub(LOAD_SPAN);
            let old = self.recent.iter().take_while(|(at, _)| *at < since).count();
            let drop = old.min(self.recent.len().saturating_sub(RECENT));
            self.recent.drain(..drop);
        }
        self.periods = self.periods_at(elapsed);
        self.counted_at = self.counted_at.max(elapsed);
    }

    /// How long the latest look took.
    pub(super) fn last(&self) -> Duration {
        self.last
    }

    /// A task request's time now: the least over the last [`LOAD_SPAN`] (and the latest
    /// [`RECENT`] answers), so slow answers for a moment (a hiccup of the network, of this
    /// host or of a proxy) are not read as load, while a queue that lasts is.
    fn current(&self) -> Duration {
        self.recent
            .iter()
            .map(|(_, took)| *took)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// What the server spends on a task request beyond the quickest answer of the session;
    /// nothing until the wait has [`FIRST_READING`] answers.
    pub(super) fn server_share(&self) -> Duration {
        if self.recent.len() < FIRST_READING {
            return Duration::ZERO;
        }
        self.current()
            .saturating_sub(self.baseline.unwrap_or(Duration::ZERO))
    }

    /// The least spacing of looks (as the server sees them) that the server's load asks for:
    /// [`Policy::busy_factor`] times its share of a request, and never more than the period
    /// of a one-second poll, so a waiting module adds no more to a busy server than the
    /// peer's poll does and never notices an end later than it would.
    pub(super) fn spacing_floor(&self, policy: &Policy) -> Duration {
        self.server_share()
            .mul_f64(policy.busy_factor)
            .min(self.period())
    }

    /// The period of a one-second poll on this network: a second's sleep and a request.
    pub(super) fn period(&self) -> Duration {
        Duration::from_secs(1) + self.current()
    }

    /// Periods of a one-second poll from dispatch to `elapsed` (those since the latest look
    /// at the current period).
    fn periods_at(&self, elapsed: Duration) -> f64 {
        self.periods
            + elapsed.saturating_sub(self.counted_at).as_secs_f64() / self.period().as_secs_f64()
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
            let periods = self.periods_at(elapsed).floor().min(f64::from(u32::MAX)) as u32;
            self.requests.saturating_sub(periods.saturating_add(1))
        };
        self.budget_from = Some(forgiven);
    }

    /// How many requests the budget has now (`None` before it applies): one a period since
    /// dispatch, plus [`Policy::allowance`], less those made.
    pub(super) fn budget_left(&self, policy: &Policy, elapsed: Duration) -> Option<u64> {
        let forgiven = self.budget_from?;
        let used = u64::from(self.requests.saturating_sub(forgiven));
        let earned = self.periods_at(elapsed).floor() as u64 + u64::from(policy.allowance);
        Some(earned.saturating_sub(used))
    }

    /// The earliest elapsed time the next request may be sent: when the budget has it, or,
    /// for a wait expecting a copy whose progress has not shown yet, after `early_looks` quick
    /// looks one a period from dispatch. The periods to come are counted at the current one.
    pub(super) fn next_allowed(
        &self,
        policy: &Policy,
        early_looks: u64,
        elapsed: Duration,
    ) -> Option<Duration> {
        let needed = match self.budget_from {
            Some(forgiven) => {
                let used = u64::from(self.requests.saturating_sub(forgiven));
                (used + 1).saturating_sub(u64::from(policy.allowance))
            }
            None if policy.expect_progress => {
                (u64::from(self.requests) + 1).saturating_sub(early_looks)
            }
            None => return None,
        };
        let ahead = (needed as f64 - self.periods_at(elapsed)).max(0.0);
        Some(elapsed + Duration::try_from_secs_f64(ahead * self.period().as_secs_f64()).ok()?)
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
                    window
                        .div_f64(n)
                        .clamp(policy.dense, period.max(policy.dense))
                }
            }
            None => policy.dense,
        }
    }
}
