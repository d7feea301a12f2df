//! The task-wait policy: when to look at a task next, as a pure function of the time elapsed
//! and what was observed. No clock, no sleeping, no HTTP: `tasks.rs` is the shell that acts.
//!
//! Polls start short (a quick task is noticed within a fraction of a second) and grow to a
//! cap. When the task log reports progress (`transferred X of Y (Z%)`), the next poll is aimed
//! just before the predicted end, so a 5-minute import costs a dozen polls, not 300.

use std::time::Duration;

/// How a stopped task ended, by PVE's own rule (`OK` and `WARNINGS: N` are success).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok,
    Warnings(u32),
    Failed(String),
}

impl Exit {
    /// Classifies an `exitstatus` as `PVE::Tools::upid_status_is_error` does.
    pub fn from_status(s: &str) -> Exit {
        if s == "OK" {
            return Exit::Ok;
        }
        if let Some(n) = s.strip_prefix("WARNINGS: ").and_then(|n| n.parse().ok()) {
            return Exit::Warnings(n);
        }
        Exit::Failed(s.to_string())
    }

    pub fn is_success(&self) -> bool {
        !matches!(self, Exit::Failed(_))
    }
}

/// Tunables of the wait.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Give up after this long (wall clock, from the start of the wait).
    pub timeout: Duration,
    /// The first interval.
    pub first: Duration,
    /// Growth factor of the interval while nothing predicts the end.
    pub growth: f64,
    /// The longest interval without a progress-based prediction.
    pub cap: Duration,
    /// The longest sleep a prediction may ask for.
    pub long_cap: Duration,
    /// How long a fresh task may answer `no such task` before that is an error.
    pub invisible_grace: Duration,
    /// First and largest back-off after a transient error.
    pub retry_first: Duration,
    pub retry_cap: Duration,
}

impl Policy {
    /// The default policy with this deadline.
    pub fn with_timeout(timeout: Duration) -> Policy {
        Policy {
            timeout,
            first: Duration::from_millis(50),
            growth: 1.5,
            cap: Duration::from_millis(250),
            long_cap: Duration::from_secs(60),
            invisible_grace: Duration::from_secs(10),
            retry_first: Duration::from_millis(200),
            retry_cap: Duration::from_secs(5),
        }
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

/// What the policy remembers between polls.
#[derive(Clone, Debug, Default)]
pub struct WaitState {
    interval: Option<Duration>,
    /// (elapsed, percent) samples, oldest first, at most a few.
    samples: Vec<(Duration, f64)>,
    errors: u32,
    last_error: Option<String>,
    seen: bool,
    polls: u32,
}

impl WaitState {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many observations were made.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    /// The latest reported progress, in percent.
    pub fn progress(&self) -> Option<f64> {
        self.samples.last().map(|s| s.1)
    }

    fn short_interval(&mut self, p: &Policy) -> Duration {
        let next = match self.interval {
            None => p.first,
            Some(i) => i.mul_f64(p.growth).min(p.cap),
        };
        self.interval = Some(next);
        next
    }

    /// From the progress samples: the time from `now` until the predicted end, and the time
    /// one percent takes. PVE logs progress in whole percents (qemu-img's steps), so the
    /// latest reading lags the truth by less than one percent: the real end is at or before
    /// the predicted one, by less than one percent's time.
    fn prediction(&self, now: Duration) -> Option<(Duration, Duration)> {
        let (t1, p1) = *self.samples.last()?;
        // A copy often starts with a burst (caches, the first chunk): once there is a later
        // sample, the first one is left out of the rate.
        let (t0, p0) = if self.samples.len() >= 3 {
            self.samples[1]
        } else {
            self.samples[0]
        };
        if p1 >= 100.0 || p1 <= p0 || t1 <= t0 {
            return None;
        }
        let rate = (p1 - p0) / (t1 - t0).as_secs_f64();
        let at_sample = Duration::from_secs_f64(((100.0 - p1) / rate).min(1e7));
        Some((
            at_sample.saturating_sub(now.saturating_sub(t1)),
            Duration::from_secs_f64((1.0 / rate).min(1e6)),
        ))
    }

    /// Decides the next step from the elapsed time and what was just observed.
    pub fn decide(&mut self, p: &Policy, elapsed: Duration, obs: Observation) -> Decision {
        self.polls += 1;
        let left = p.timeout.saturating_sub(elapsed);
        let wait = |d: Duration| Decision::Wait(d.min(left));
        match obs {
            Observation::Stopped { exitstatus } => Decision::Done(Exit::from_status(&exitstatus)),
            _ if left.is_zero() => Decision::TimedOut {
                progress: self.progress(),
                last_error: self.last_error.clone(),
            },
            Observation::Transient(e) => {
                self.errors += 1;
                self.last_error = Some(e);
                let backoff = p
                    .retry_first
                    .saturating_mul(1 << self.errors.min(16).saturating_sub(1))
                    .min(p.retry_cap);
                wait(backoff)
            }
            Observation::NotVisible => {
                if self.seen || elapsed >= p.invisible_grace {
                    return Decision::Vanished;
                }
                let d = self.short_interval(p);
                wait(d)
            }
            Observation::Running { progress } => {
                self.seen = true;
                self.errors = 0;
                if let Some(pct) = progress {
                    let new = self.samples.last().is_none_or(|(_, last)| pct > *last);
                    if new {
                        self.samples.push((elapsed, pct));
                        if self.samples.len() > 8 {
                            self.samples.remove(0);
                        }
                    }
                }
                match self.prediction(elapsed) {
                    Some((rem, one_pct)) => {
                        self.interval = None;
                        // Sleep until one percent before the predicted end; from there poll
                        // often enough to notice the end within a fraction of a second.
                        // A prediction is only as good as its samples: never sleep longer than
                        // the time waited so far, so a wrong one costs little.
                        let window = rem.saturating_sub(one_pct + p.first);
                        if window > p.cap {
                            wait(window.min(p.long_cap).min(elapsed.max(p.cap)))
                        } else {
                            wait(p.cap.min(one_pct.div_f64(6.0)).max(p.first))
                        }
                    }
                    // Progress reported but no rate yet: a long copy has begun; look less and
                    // less often, but never sleep longer than the time waited so far.
                    None if self.progress().is_some_and(|x| x < 100.0) => {
                        let next = self
                            .interval
                            .map_or(p.first, |i| i.mul_f64(p.growth).min(elapsed.max(p.cap)));
                        self.interval = Some(next);
                        wait(next)
                    }
                    None => {
                        let d = self.short_interval(p);
                        wait(d)
                    }
                }
            }
        }
    }
}

/// The latest progress percentage in task-log lines (`transferred 1.0 GiB of 2.0 GiB (50.00%)`).
pub fn progress_in(lines: &[String]) -> Option<f64> {
    lines.iter().rev().find_map(|l| {
        let l = l.trim();
        if !l.starts_with("transferred ") {
            return None;
        }
        let open = l.rfind('(')?;
        l[open + 1..].strip_suffix("%)")?.trim().parse::<f64>().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exit_status_rule() {
        assert_eq!(Exit::from_status("OK"), Exit::Ok);
        assert_eq!(Exit::from_status("WARNINGS: 2"), Exit::Warnings(2));
        assert!(Exit::from_status("WARNINGS: 2").is_success());
        assert_eq!(
            Exit::from_status("WARNINGS: x"),
            Exit::Failed("WARNINGS: x".into())
        );
        assert_eq!(
            Exit::from_status("unexpected status"),
            Exit::Failed("unexpected status".into())
        );
        assert!(!Exit::from_status("unable to create VM 100 - boom").is_success());
    }

    #[test]
    fn running_then_ok_with_growing_intervals() {
        let p = Policy::with_timeout(Duration::from_secs(600));
        let mut s = WaitState::new();
        let mut t = Duration::ZERO;
        let mut waits = Vec::new();
        for _ in 0..8 {
            match s.decide(&p, t, Observation::Running { progress: None }) {
                Decision::Wait(d) => {
                    waits.push(d);
                    t += d;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(waits[0], ms(50));
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), p.cap);
        assert_eq!(
            s.decide(
                &p,
                t,
                Observation::Stopped {
                    exitstatus: "OK".into()
                }
            ),
            Decision::Done(Exit::Ok)
        );
    }

    #[test]
    fn warnings_and_errors_end_the_wait() {
        let p = Policy::with_timeout(Duration::from_secs(60));
        let mut s = WaitState::new();
        assert_eq!(
            s.decide(
                &p,
                ms(10),
                Observation::Stopped {
                    exitstatus: "WARNINGS: 1".into()
                }
            ),
            Decision::Done(Exit::Warnings(1))
        );
        let mut s = WaitState::new();
        assert_eq!(
            s.decide(
                &p,
                ms(10),
                Observation::Stopped {
                    exitstatus:
                        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout".into()
                }
            ),
            Decision::Done(Exit::Failed(
                "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout".into()
            ))
        );
    }

    #[test]
    fn not_yet_visible_is_tolerated_then_fatal() {
        let p = Policy::with_timeout(Duration::from_secs(600));
        let mut s = WaitState::new();
        assert!(matches!(
            s.decide(&p, ms(0), Observation::NotVisible),
            Decision::Wait(_)
        ));
        assert!(matches!(
            s.decide(&p, ms(2000), Observation::NotVisible),
            Decision::Wait(_)
        ));
        assert!(matches!(
            s.decide(&p, ms(2100), Observation::Running { progress: None }),
            Decision::Wait(_)
        ));
        // Seen once, then gone: the task vanished.
        assert_eq!(
            s.decide(&p, ms(2300), Observation::NotVisible),
            Decision::Vanished
        );
        let mut s = WaitState::new();
        assert_eq!(
            s.decide(&p, p.invisible_grace, Observation::NotVisible),
            Decision::Vanished
        );
    }

    #[test]
    fn transient_errors_back_off_and_reset() {
        let p = Policy::with_timeout(Duration::from_secs(600));
        let mut s = WaitState::new();
        let d: Vec<Decision> = (0..7)
            .map(|i| {
                s.decide(
                    &p,
                    ms(i * 100),
                    Observation::Transient("596 Broken pipe".into()),
                )
            })
            .collect();
        assert_eq!(d[0], Decision::Wait(ms(200)));
        assert_eq!(d[1], Decision::Wait(ms(400)));
        assert_eq!(d[2], Decision::Wait(ms(800)));
        assert_eq!(d[6], Decision::Wait(p.retry_cap));
        assert!(matches!(
            s.decide(&p, ms(1000), Observation::Running { progress: None }),
            Decision::Wait(_)
        ));
        assert_eq!(
            s.decide(&p, ms(1100), Observation::Transient("x".into())),
            Decision::Wait(ms(200))
        );
    }

    #[test]
    fn deadline_reports_progress_and_last_error() {
        let p = Policy::with_timeout(Duration::from_secs(10));
        let mut s = WaitState::new();
        s.decide(
            &p,
            ms(1000),
            Observation::Running {
                progress: Some(10.0),
            },
        );
        s.decide(
            &p,
            ms(9000),
            Observation::Transient("599 Too many redirections".into()),
        );
        assert_eq!(
            s.decide(
                &p,
                Duration::from_secs(10),
                Observation::Running {
                    progress: Some(40.0)
                }
            ),
            Decision::TimedOut {
                progress: Some(10.0),
                last_error: Some("599 Too many redirections".into())
            }
        );
        // A task seen stopped exactly at the deadline still counts as done.
        assert_eq!(
            s.decide(
                &p,
                Duration::from_secs(11),
                Observation::Stopped {
                    exitstatus: "OK".into()
                }
            ),
            Decision::Done(Exit::Ok)
        );
        // Waits never overshoot the deadline.
        let mut s = WaitState::new();
        assert_eq!(
            s.decide(&p, ms(9990), Observation::Running { progress: None }),
            Decision::Wait(ms(10))
        );
    }

    /// Simulates a task of `dur` whose log reports linear progress (in whole percents, with
    /// an initial burst of `burst` percent when given), and returns (polls, detection latency).
    fn simulate(dur: Duration, with_progress: bool) -> (u32, Duration) {
        simulate_burst(dur, with_progress, 0.0)
    }

    fn simulate_burst(dur: Duration, with_progress: bool, burst: f64) -> (u32, Duration) {
        let p = Policy::with_timeout(Duration::from_secs(3600));
        let mut s = WaitState::new();
        let mut t = Duration::ZERO;
        loop {
            let obs = if t >= dur {
                Observation::Stopped {
                    exitstatus: "OK".into(),
                }
            } else {
                // Whole percents, as qemu-img reports them.
                let pct = (burst + t.as_secs_f64() / dur.as_secs_f64() * (100.0 - burst)).floor();
                Observation::Running {
                    progress: with_progress.then_some(pct),
                }
            };
            match s.decide(&p, t, obs) {
                Decision::Wait(d) => t += d,
                Decision::Done(_) => return (s.polls(), t - dur),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn progress_prediction_keeps_long_imports_cheap_and_prompt() {
        let (polls, late) = simulate(Duration::from_secs(300), true);
        eprintln!("5-minute import: {polls} polls, noticed {late:?} late");
        assert!(polls <= 30, "{polls} polls for a 5-minute import");
        assert!(late <= ms(500), "noticed {late:?} late");
        let (polls, late) = simulate(Duration::from_secs(120), true);
        assert!(polls <= 30 && late <= ms(500), "{polls} {late:?}");
        // A copy that starts with a 5 % burst must not fool the prediction.
        for secs in [61, 300] {
            let (polls, late) = simulate_burst(Duration::from_secs(secs), true, 5.0);
            eprintln!("{secs} s import with a burst: {polls} polls, noticed {late:?} late");
            assert!(
                polls <= 30 && late <= ms(500),
                "{secs} s: {polls} polls, {late:?} late"
            );
        }
    }

    #[test]
    fn short_tasks_are_noticed_quickly() {
        for d in [200, 1000, 5000] {
            let (_, late) = simulate(ms(d), false);
            assert!(
                late <= Policy::with_timeout(Duration::ZERO).cap,
                "{d} ms task noticed {late:?} late"
            );
        }
        let (polls, _) = simulate(ms(200), false);
        assert!(polls <= 5, "{polls}");
    }

    #[test]
    fn parses_progress_lines() {
        let lines: Vec<String> = [
            "create full clone of drive (local:import/a.qcow2)",
            "transferred 0.0 B of 2.0 GiB (0.00%)",
            "transferred 1.0 GiB of 2.0 GiB (50.00%)",
            "other",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(progress_in(&lines), Some(50.0));
        assert_eq!(progress_in(&lines[..1]), None);
    }
}
