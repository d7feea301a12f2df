//! The task-wait policy: when to look at a task next, as a pure function of the time elapsed
//! and what was observed. No clock, no sleeping, no HTTP: `tasks.rs` is the shell that acts.
//! Two parts live beside it: `progress` (what a copy's progress lines predict) and `pace`
//! (what a request costs the server apart from the network, and the request budget).
//!
//! Looks start short (a quick task is noticed within a fraction of a second) and grow to a
//! 100 ms cap, so the end of any task is noticed within about 50 ms on average, plus the
//! network's share of the answer (the target is 100 ms and one round trip at the median: the
//! margin holds even for the median of a few tasks, which strays by a fifth of the cap). The
//! cap spaces the looks as the server sees them: the sleep after a look is shortened by the
//! time the look took, so a far server is looked at as often as a near one. When the task
//! log reports progress (`transferred X of Y (Z%)`), the copy rate (from the recent samples)
//! predicts the end, and each look halves the distance to the *earliest* end the samples
//! allow (a sample is dated only to within its poll gap, and a percentage stands for anything
//! up to the next step), so the looks are dense exactly when the end can come: a 5-minute import costs about 30 looks, not 300. After 100 % the task is
//! finishing (a flush, the config): it is looked at at the dense interval. Two limits hold
//! throughout: a waiting module keeps its share of one pveproxy worker under about 2 %
//! ([`Policy::busy_factor`] times what the server spends on a request beyond the session's
//! quickest answer, so the round trip is not read as load; only a load that lasts two
//! seconds counts, and it never spaces the looks further apart than a one-second poll), and
//! a wait with progress never sends more requests than a one-second poll would (one a second
//! and a request, counted from dispatch, each stretch at the request time of its moment, plus
//! [`Policy::allowance`]): what the copy does not need is saved for its end, and spread over
//! the window the end can fall in.

mod pace;
mod policy;
mod progress;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::retry::Awaiting;
use pace::Pace;
pub use policy::Policy;
use progress::{CopyWatch, Recorded};
pub use progress::{copy_size, progress_in, transfer_part};

/// How a stopped task ended, by PVE's own rule (`OK` and `WARNINGS: N` are success).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// The count PVE wrote (one beyond `u64` reads as `u64::MAX`).
    Warnings(u64),
    Failed(String),
}

impl Exit {
    /// Classifies an `exitstatus` as `PVE::Tools::upid_status_is_error` does: `OK` or
    /// `WARNINGS: \d+` is a success, whatever the number of digits (a count too large to
    /// hold is still a count, not a failure).
    pub fn from_status(s: &str) -> Exit {
        if s == "OK" {
            return Exit::Ok;
        }
        if let Some(n) = s.strip_prefix("WARNINGS: ")
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
        {
            return Exit::Warnings(n.parse().unwrap_or(u64::MAX));
        }
        Exit::Failed(s.to_string())
    }

    pub fn is_success(&self) -> bool {
        !matches!(self, Exit::Failed(_))
    }
}

/// What one poll saw.
#[derive(Clone, Debug)]
pub enum Observation {
    /// Still running; `progress` is the latest percentage the log reported, if any.
    Running {
        progress: Option<f64>,
    },
    Stopped {
        exitstatus: String,
    },
    /// `400 no such task`: normal for a moment after dispatch.
    NotVisible,
    /// A transport error, a 5xx, 595/596/599: retried with back-off inside the deadline.
    Transient(String),
}

/// What to do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Poll again after this long.
    Wait(Duration),
    /// The task stopped.
    Done(Exit),
    /// The deadline passed while the task was still running (or unreachable).
    TimedOut {
        progress: Option<f64>,
        last_error: Option<String>,
    },
    /// The task never became visible, or disappeared.
    Vanished,
}

/// What the wait knows of a task at dispatch: how its looks read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Its log never reports progress: each look reads the status.
    Plain,
    /// Its type's log may report a copy's progress: each look reads the new log lines.
    Copies,
    /// A create that copies nothing (a blank VM): PVE's `qmcreate` allocates the volumes and
    /// writes the config, 100 ms to 1 s. It is first looked at after [`BLANK_CREATE_FIRST`],
    /// and by its status alone for [`BLANK_CREATE_SPAN`]; a create still running then (one
    /// found running, that copies after all) is read by its log as [`Kind::Copies`] is.
    BlankCreate,
    /// A create that imports a disk: before its copy begins it does what a blank create does,
    /// so it is first looked at after [`BLANK_CREATE_FIRST`] too, then read by its log as
    /// [`Kind::Copies`] is.
    ImportCreate,
}

/// How one look reads a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookAt {
    /// `GET .../status` (the log is read once at the end only when the task did not end `OK`).
    Status,
    /// `GET .../log` from the lines already seen (the status besides when needed).
    Log,
}

/// The pause before the first look at a blank create: most have ended by then, so one status
/// read sees the end instead of several seeing it run.
pub const BLANK_CREATE_FIRST: Duration = Duration::from_millis(250);
/// The spacing of a create's looks after its first ([`WaitState::for_kind`]): the default
/// cap.
pub const AFTER_PAUSE: Duration = Duration::from_millis(100);
/// How long a blank create is looked at by its status alone.
pub const BLANK_CREATE_SPAN: Duration = Duration::from_secs(2);

impl Kind {
    /// The pause between dispatch and the first look, within the deadline.
    pub fn first_look(self, policy: &Policy) -> Duration {
        match self {
            Kind::BlankCreate | Kind::ImportCreate => BLANK_CREATE_FIRST.min(policy.timeout),
            Kind::Plain | Kind::Copies => Duration::ZERO,
        }
    }

    /// How the look at `elapsed` (since dispatch) reads the task.
    pub fn look_at(self, elapsed: Duration) -> LookAt {
        match self {
            Kind::Plain => LookAt::Status,
            Kind::Copies | Kind::ImportCreate => LookAt::Log,
            Kind::BlankCreate if elapsed < BLANK_CREATE_SPAN => LookAt::Status,
            Kind::BlankCreate => LookAt::Log,
        }
    }
}

/// What the policy remembers between looks.
#[derive(Clone, Debug, Default)]
pub struct WaitState {
    interval: Option<Duration>,
    /// When the previous observation was made.
    previous: Option<Duration>,
    errors: u32,
    last_error: Option<String>,
    seen: bool,
    polls: u32,
    /// The progress of the copy, if the log reports one.
    copy: CopyWatch,
    /// Request times and the request budget.
    pace: Pace,
}

/// Quick looks at a task expected to copy before its first progress line (a short copy is
/// noticed at once); after them, one a period.
pub const EARLY_LOOKS: u64 = 5;
/// Requests the pacing before the end keeps back for the finishing phase after 100 % (a
/// flush and the config write, most often well under a second).
const RESERVE: f64 = 3.0;

impl WaitState {
    pub fn new() -> Self {
        Self::default()
    }

    /// The state of a wait on a task of `kind`: one that is first looked at after a pause
    /// (a create) has no quick end left to catch, so its looks are [`AFTER_PAUSE`] apart from
    /// the first (the cap where that is lower; a larger `poll_interval` is grown to from
    /// there, as any wait's looks grow): a 500 ms create is seen ending at its fourth look,
    /// not its fifth, the end still noticed within the default cap. Other kinds start as
    /// [`WaitState::new`] does.
    pub fn for_kind(kind: Kind, policy: &Policy) -> Self {
        let mut state = Self::default();
        if !kind.first_look(policy).is_zero() {
            state.interval = Some(AFTER_PAUSE.min(policy.cap));
        }
        state
    }

    /// How many observations were made.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    /// Records how long the latest look's (first) task request took, from sending it to its
    /// answer (see [`Policy::busy_factor`]); call it before [`WaitState::decide`].
    pub fn note_request_time(&mut self, took: Duration) {
        self.pace.note_request_time(took);
    }

    /// Records the quickest answer to any request of the session (the client's
    /// `quickest_answer`): the round trip plus the least the server spends on a request.
    pub fn note_baseline(&mut self, quickest: Duration) {
        self.pace.note_baseline(quickest);
    }

    /// Records task requests beyond the one each observation counts (a status read beside a
    /// log read, say).
    pub fn note_extra_requests(&mut self, n: u32) {
        self.pace.note_extra_requests(n);
    }

    /// Task requests made so far.
    pub fn requests(&self) -> u32 {
        self.pace.requests()
    }

    /// The latest reported progress, in percent.
    pub fn progress(&self) -> Option<f64> {
        self.copy.progress()
    }

    /// (elapsed, percent) for each new percentage seen, at most 200 (thinned evenly).
    pub fn history(&self) -> &[(Duration, f64)] {
        self.copy.history()
    }

    /// When the log first said 100 %, if it did.
    pub fn copied_at(&self) -> Option<Duration> {
        self.copy.copied_at()
    }

    /// The copy's rate over the recent samples, in percent per second (what the prediction
    /// reads; the live progress reports it too).
    pub fn copy_rate(&self) -> Option<f64> {
        self.copy
            .rate()
            .filter(|rate| rate.is_finite() && *rate > 0.0)
    }

    fn short_interval(&mut self, policy: &Policy) -> Duration {
        let next = match self.interval {
            None => policy.first,
            Some(i) => i.mul_f64(policy.growth).min(policy.cap),
        };
        self.interval = Some(next);
        next
    }

    fn record(&mut self, elapsed: Duration, pct: f64, expect_progress: bool) {
        match self.copy.record(elapsed, self.previous, pct) {
            Recorded::Nothing => {}
            Recorded::New => self.pace.start_budget(elapsed, expect_progress),
            Recorded::NextCopy => {
                self.interval = None;
                self.pace.start_budget(elapsed, expect_progress);
            }
        }
    }

    /// Decides the next step from the elapsed time and what was just observed.
    pub fn decide(&mut self, policy: &Policy, elapsed: Duration, obs: Observation) -> Decision {
        let d = self.decide_inner(policy, elapsed, obs);
        self.previous = Some(elapsed);
        d
    }

    fn decide_inner(&mut self, policy: &Policy, elapsed: Duration, obs: Observation) -> Decision {
        self.polls += 1;
        self.pace
            .count_look(!matches!(obs, Observation::Transient(_)), elapsed);
        let left = policy.timeout.saturating_sub(elapsed);
        // Looks reach the server at least `busy_factor` times its share of a request apart
        // (a load that lasts), up to a one-second poll's period (a failed request's time says
        // nothing about load: the back-off handles those).
        let spacing_floor = self.pace.spacing_floor(policy);
        // A wait on a copy sends no more than a one-second poll would: the next request waits
        // until the budget has it.
        let allowed = self
            .pace
            .next_allowed(policy, EARLY_LOOKS, elapsed)
            .map_or(Duration::ZERO, |at| at.saturating_sub(elapsed));
        let last = self.pace.last();
        // A spacing between looks as the server sees them: the sleep is shorter by what this
        // look took (the round trip, the server's time).
        let wait = |spacing: Duration| {
            Decision::Wait(
                spacing
                    .max(spacing_floor)
                    .saturating_sub(last)
                    .max(allowed)
                    .min(left),
            )
        };
        match obs {
            Observation::Stopped { exitstatus } => Decision::Done(Exit::from_status(&exitstatus)),
            _ if left.is_zero() => Decision::TimedOut {
                progress: self.progress(),
                last_error: self.last_error.clone(),
            },
            Observation::Transient(e) => {
                self.errors += 1;
                self.last_error = Some(e);
                let backoff = Awaiting::Transient.pause(self.errors, policy.seed);
                // A pause after a failure, not a spacing: the failed request's time is not
                // taken off it.
                Decision::Wait(backoff.max(allowed).min(left))
            }
            Observation::NotVisible => {
                if self.seen || elapsed >= policy.invisible_grace {
                    return Decision::Vanished;
                }
                let d = self.short_interval(policy);
                wait(d)
            }
            Observation::Running { progress } => {
                self.seen = true;
                self.errors = 0;
                if let Some(pct) = progress {
                    self.record(elapsed, pct, policy.expect_progress);
                }
                let stalled = self.copy.stalled(elapsed);
                let period = self.pace.period();
                let d = match self.copy.prediction() {
                    // Halve the distance to the earliest end the samples allow: minutes cost a
                    // dozen looks, each refines the rate, and from the earliest possible end
                    // on, the looks come at the dense interval. A sleep is never longer than
                    // twice the time waited so far, nor than `long_cap`.
                    Some((_, earliest)) if earliest > elapsed && !stalled => {
                        self.interval = None;
                        (earliest - elapsed)
                            .div_f64(2.0)
                            .min(policy.long_cap)
                            .min(elapsed.saturating_mul(2))
                            .max(policy.dense)
                    }
                    // The copy stands still (a thin pool stalls, a throttle waits): look less
                    // often the longer it stands, up to once a period.
                    Some(_) if stalled => {
                        self.copy.note_stall();
                        let since =
                            elapsed.saturating_sub(self.copy.last_seen().unwrap_or(elapsed));
                        since
                            .div_f64(4.0)
                            .clamp(policy.dense, period.max(policy.dense))
                    }
                    // The end may come any moment until the latest end the samples allow:
                    // the requests the budget has for that window are spread over it (at the
                    // dense interval when it has enough), so coarse progress, whose window is
                    // a whole step wide, is not polled densely and then starved.
                    // Past the latest end (the rate was read high), the same width again.
                    Some((latest, earliest)) => {
                        let until = latest.max(elapsed + latest.saturating_sub(earliest) / 2);
                        self.pace.paced(policy, elapsed, until, RESERVE)
                    }
                    // The copy is done and the task is finishing (a flush, the config): the
                    // end may come any moment, so the dense interval (the budget spaces it
                    // if the finishing takes long).
                    None if self.progress().is_some_and(|x| x >= 100.0) => policy.dense,
                    // Progress reported but no rate yet: a long copy has begun; look less
                    // and less often, but never sleep longer than the time waited so far.
                    None if self.progress().is_some() => {
                        let first = policy.first.max(elapsed / 16).min(Duration::from_secs(5));
                        let next = self.interval.map_or(first, |i| {
                            i.saturating_mul(2)
                                .min(elapsed.max(policy.cap))
                                .min(Duration::from_secs(5))
                        });
                        self.interval = Some(next);
                        next
                    }
                    None => self.short_interval(policy),
                };
                wait(d)
            }
        }
    }
}
