//! The task-wait policy: when to look at a task next, as a pure function of the time elapsed
//! and what was observed. No clock, no sleeping, no HTTP: `tasks.rs` is the shell that acts.
//!
//! Polls start short (a quick task is noticed within a fraction of a second) and grow to a
//! 150 ms cap, so the end of any task is noticed within about 75 ms on average. When the task
//! log reports progress (`transferred X of Y (Z%)`), each poll halves the distance to the
//! predicted end, so a 5-minute import costs about 30 polls, not 300 or 2000. When the server
//! answers slowly, polls are spaced further apart (`Policy::busy_factor`).

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
    /// The longest interval without a progress-based prediction. Detection latency is about
    /// half of it on average; 150 ms keeps it under 100 ms at a cost of under 7 polls a second.
    pub cap: Duration,
    /// A poll is spaced at least this many times the last status request's duration: when
    /// `pveproxy` is busy (slow answers), waiting clients back off instead of adding load.
    pub busy_factor: f64,
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
            cap: Duration::from_millis(150),
            long_cap: Duration::from_secs(60),
            busy_factor: 4.0,
            invisible_grace: Duration::from_secs(10),
            retry_first: Duration::from_millis(200),
            retry_cap: Duration::from_secs(5),
        }
    }

    /// The same policy with another cap (the `poll_interval` option).
    pub fn with_cap(self, cap: Duration) -> Policy {
        Policy { cap, ..self }
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
    /// (elapsed, percent) samples, oldest first, at most a few. A new percentage is dated
    /// halfway between the poll that first saw it and the one before, which did not.
    samples: Vec<(Duration, f64)>,
    /// When the previous observation was made.
    previous: Option<Duration>,
    /// When the log first said 100 %: the copy is done and the task is finishing.
    copied_at: Option<Duration>,
    errors: u32,
    last_error: Option<String>,
    seen: bool,
    polls: u32,
    /// How long the latest status request took.
    request_time: Duration,
}

impl WaitState {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many observations were made.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    /// Records how long the latest status request took (see [`Policy::busy_factor`]).
    pub fn note_request_time(&mut self, took: Duration) {
        self.request_time = took;
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

    /// From the progress samples: when (in elapsed time) the copy is predicted to reach
    /// 100 %. PVE logs progress in steps (whole percents at best, bigger ones when the copy
    /// is bursty), so the latest reading lags the truth: the real end is at or before the
    /// predicted one, and every new sample moves the prediction closer.
    fn prediction(&self) -> Option<Duration> {
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
        let left = ((100.0 - p1) / rate).clamp(0.0, 1e7);
        Some(t1.saturating_add(Duration::try_from_secs_f64(left).unwrap_or(Duration::ZERO)))
    }

    /// Decides the next step from the elapsed time and what was just observed.
    pub fn decide(&mut self, p: &Policy, elapsed: Duration, obs: Observation) -> Decision {
        let d = self.decide_inner(p, elapsed, obs);
        self.previous = Some(elapsed);
        d
    }

    fn decide_inner(&mut self, p: &Policy, elapsed: Duration, obs: Observation) -> Decision {
        self.polls += 1;
        let left = p.timeout.saturating_sub(elapsed);
        // Slow answers space the polls (a failed request's time says nothing about load: the
        // back-off handles those), up to the longest back-off.
        let floor = match obs {
            Observation::Transient(_) => Duration::ZERO,
            _ => self.request_time.mul_f64(p.busy_factor).min(p.retry_cap),
        };
        let wait = |d: Duration| Decision::Wait(d.max(floor).min(left));
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
                    // Progress going back means the next copy has begun (a VM with several
                    // imported disks): what was learnt about the previous one is dropped.
                    if self.samples.last().is_some_and(|(_, last)| pct < *last) {
                        self.samples.clear();
                        self.copied_at = None;
                        self.interval = None;
                    }
                    let new = self.samples.last().is_none_or(|(_, last)| pct > *last);
                    if new {
                        let since = self.previous.unwrap_or(elapsed);
                        self.samples
                            .push((since + (elapsed.saturating_sub(since)) / 2, pct));
                        if self.samples.len() > 8 {
                            self.samples.remove(0);
                        }
                    }
                }
                match self.prediction() {
                    Some(end) if end > elapsed => {
                        self.interval = None;
                        // Halve the distance to the predicted end at each poll: minutes cost a
                        // dozen polls, each one refines the rate, and the last ones come at
                        // the short interval. A prediction is only as good as its samples, so
                        // a sleep is never longer than twice the time waited so far.
                        let half = (end - elapsed).div_f64(2.0);
                        wait(
                            half.min(p.long_cap)
                                .min(elapsed.saturating_mul(2))
                                .max(p.cap),
                        )
                    }
                    // Past the predicted end (the rate was overestimated): look at the short
                    // interval at first, then less often the longer the copy overruns.
                    Some(end) => {
                        self.interval = None;
                        wait(
                            elapsed
                                .saturating_sub(end)
                                .div_f64(4.0)
                                .min(elapsed)
                                .max(p.cap),
                        )
                    }
                    // Progress reported but no rate yet: a long copy has begun; look less and
                    // less often, but never sleep longer than the time waited so far.
                    None if self.progress().is_some_and(|x| x < 100.0) => {
                        let next = self
                            .interval
                            .map_or(p.first, |i| i.saturating_mul(2).min(elapsed.max(p.cap)));
                        self.interval = Some(next);
                        wait(next)
                    }
                    // The copy is done and the task is finishing (a flush, the config, a
                    // throttle catching up): short polls at first, then less often the longer
                    // it takes.
                    None if self.progress().is_some() => {
                        let since = elapsed.saturating_sub(*self.copied_at.get_or_insert(elapsed));
                        let d = self.short_interval(p);
                        wait(d.max(since.div_f64(4.0)))
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
        // A server's number: only a real percentage counts (no NaN, inf or 1e300).
        l[open + 1..]
            .strip_suffix("%)")?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
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

    /// A task as the policy sees it through its polls.
    struct Model {
        /// When the copy reaches 100 %.
        copy: Duration,
        /// How long the task goes on after that (closing, writing the config).
        tail: Duration,
        /// Progress at the start (a burst), in percent.
        burst: f64,
        /// After the burst, the copy is held until the time catches up (a throttle that
        /// pauses the copy, as pve-sim's `--import-rate` and rate-limited storage do) instead
        /// of going on from the burst at the same pace.
        held: bool,
        /// The log reports progress in steps of this many percent (1 = qemu-img's whole
        /// percents; bursty copies report bigger jumps).
        step: f64,
        progress: bool,
    }

    impl Model {
        fn new(secs: f64) -> Model {
            Model {
                copy: Duration::from_secs_f64(secs),
                tail: Duration::ZERO,
                burst: 0.0,
                held: false,
                step: 1.0,
                progress: false,
            }
        }

        fn observe(&self, t: Duration) -> Observation {
            if t >= self.copy + self.tail {
                return Observation::Stopped {
                    exitstatus: "OK".into(),
                };
            }
            let pace = t.as_secs_f64() / self.copy.as_secs_f64();
            let truth = if self.held {
                (pace * 100.0).max(self.burst)
            } else {
                self.burst + pace * (100.0 - self.burst)
            }
            .min(100.0);
            Observation::Running {
                progress: self
                    .progress
                    .then_some((truth / self.step).floor() * self.step),
            }
        }

        /// Runs the policy against the model: (polls, how late the end was noticed).
        fn run(&self) -> (u32, Duration) {
            run_policy(self.copy + self.tail, |t| self.observe(t))
        }
    }

    /// Runs the policy against a task that ends at `end` and looks like `observe` says.
    fn run_policy(end: Duration, observe: impl Fn(Duration) -> Observation) -> (u32, Duration) {
        let p = Policy::with_timeout(Duration::from_secs(3600));
        let mut s = WaitState::new();
        let mut t = Duration::ZERO;
        loop {
            match s.decide(&p, t, observe(t)) {
                Decision::Wait(d) => t += d,
                Decision::Done(_) => return (s.polls(), t - end),
                other => panic!("{other:?}"),
            }
        }
    }

    /// A 660 MB cloud image (2.5 GiB disk) imported by pve-sim at 48 MiB/s, as its task log
    /// reported it (seconds from the task's start, percent), sampled every 50 ms: progress
    /// comes in irregular 1-5 % steps, ahead of the pace, and the task ends 2.1 s after 100 %.
    const SIM_IMPORT: &[(f64, f64)] = &[
        (0.54, 2.42),
        (0.59, 4.85),
        (3.17, 9.7),
        (5.76, 13.33),
        (7.67, 14.55),
        (7.72, 16.97),
        (9.63, 20.61),
        (11.54, 23.03),
        (11.59, 25.45),
        (14.12, 26.67),
        (14.18, 29.09),
        (16.08, 32.73),
        (18.04, 35.15),
        (19.28, 36.36),
        (19.33, 37.58),
        (20.62, 41.21),
        (22.53, 42.42),
        (22.58, 43.64),
        (23.87, 48.48),
        (26.46, 52.12),
        (28.37, 55.76),
        (30.29, 56.97),
        (30.34, 59.39),
        (32.25, 63.03),
        (34.22, 67.88),
        (36.8, 71.52),
        (38.71, 73.94),
        (40.01, 76.36),
        (40.06, 77.58),
        (41.92, 78.79),
        (41.97, 81.21),
        (43.88, 82.42),
        (43.93, 84.85),
        (45.85, 89.7),
        (48.43, 93.33),
        (50.34, 95.76),
        (50.4, 96.97),
        (52.26, 98.18),
        (52.31, 100.0),
    ];
    const SIM_IMPORT_END: f64 = 54.4;

    #[test]
    fn a_recorded_import_is_followed_cheaply() {
        // The recorded import, and the same shape stretched to 2 and 5 minutes (20 lengths
        // each, so the end falls at different phases of the polls).
        let mut failures = Vec::new();
        for target in [54.4, 120.0, 300.0] {
            let runs: Vec<(u32, Duration)> = (0..20)
                .map(|i| {
                    let k = target / SIM_IMPORT_END * (1.0 + i as f64 * 0.005);
                    let end = Duration::from_secs_f64(SIM_IMPORT_END * k);
                    run_policy(end, |t| {
                        if t >= end {
                            return Observation::Stopped {
                                exitstatus: "OK".into(),
                            };
                        }
                        let s = t.as_secs_f64() / k;
                        Observation::Running {
                            progress: Some(
                                SIM_IMPORT
                                    .iter()
                                    .take_while(|(at, _)| *at <= s)
                                    .last()
                                    .map_or(0.0, |x| x.1),
                            ),
                        }
                    })
                })
                .collect();
            let (polls, most, late, worst) = summary(&runs);
            let row = format!(
                "recorded import stretched to {target} s: {polls} polls (median), {most} at most; noticed {late:?} late (median), {worst:?} at worst"
            );
            eprintln!("{row}");
            // The task goes on for 2.1 s after 100 % (5.5x that when stretched to 5 minutes),
            // and that tail is polled less and less often: fewer polls, a later notice.
            let (max_polls, max_late) = match target as u32 {
                54 => (32, ms(400)),
                120 => (40, ms(600)),
                _ => (45, ms(1300)),
            };
            if polls > max_polls || late > max_late || worst > Duration::from_secs(3) {
                failures.push(row);
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    fn median<T: Ord + Copy>(mut xs: Vec<T>) -> T {
        xs.sort();
        xs[xs.len() / 2]
    }

    /// Over (polls, lateness) runs: (median polls, most polls, median lateness, worst).
    fn summary(runs: &[(u32, Duration)]) -> (u32, u32, Duration, Duration) {
        (
            median(runs.iter().map(|r| r.0).collect()),
            runs.iter().map(|r| r.0).max().unwrap(),
            median(runs.iter().map(|r| r.1).collect()),
            runs.iter().map(|r| r.1).max().unwrap(),
        )
    }

    #[test]
    fn progress_prediction_keeps_long_imports_cheap_and_prompt() {
        // Lengths spread over a few seconds, so the ends fall anywhere between two polls;
        // whole-percent and bursty (3 %) progress, with and without an initial burst and a
        // short tail after 100 %.
        let mut failures = Vec::new();
        for base in [60.0, 120.0, 300.0] {
            for (step, burst, held, tail) in [
                (1.0, 0.0, false, 0.3),
                (2.0, 5.0, false, 0.3),
                (3.0, 13.0, false, 0.3),
                (1.0, 13.0, true, 0.3),
                (3.0, 13.0, true, 0.3),
            ] {
                let runs: Vec<(u32, Duration)> = (0..20)
                    .map(|i| {
                        Model {
                            step,
                            burst,
                            held,
                            tail: Duration::from_secs_f64(tail),
                            progress: true,
                            ..Model::new(base + i as f64 * 0.37)
                        }
                        .run()
                    })
                    .collect();
                let (polls, most, late, worst) = summary(&runs);
                let row = format!(
                    "{base} s import, step {step} %, burst {burst} % (held {held}), tail {tail} s: {polls} polls (median), {most} at most; noticed {late:?} late (median), {worst:?} at worst"
                );
                eprintln!("{row}");
                // qemu-img's own whole percents: the targets (<= 30 polls, noticed within
                // 100 ms). Coarser steps blur the prediction: fewer polls means sleeping
                // through more of the end, so those get looser bounds.
                let (max_polls, max_late) = if step == 1.0 {
                    (30, ms(100))
                } else {
                    (35, ms(160))
                };
                if polls > max_polls
                    || most > 45
                    || late > max_late
                    || worst > Duration::from_secs(2)
                {
                    failures.push(row);
                }
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    #[test]
    fn short_tasks_are_noticed_quickly() {
        let p = Policy::with_timeout(Duration::ZERO);
        for base in [0.2, 1.0, 5.0, 30.0] {
            let runs: Vec<(u32, Duration)> = (0..20)
                .map(|i| Model::new(base * (0.8 + i as f64 * 0.021)).run())
                .collect();
            let worst = runs.iter().map(|r| r.1).max().unwrap();
            let late = median(runs.iter().map(|r| r.1).collect());
            assert!(worst <= p.cap, "{base} s task noticed {worst:?} late");
            assert!(late <= ms(100), "{base} s task: median {late:?} late");
        }
        let (polls, _) = Model::new(0.2).run();
        assert!(polls <= 5, "{polls}");
    }

    #[test]
    fn a_second_copy_in_the_same_task_is_followed_too() {
        // Two disks imported one after the other, 30 s each: progress goes 0..100 twice.
        let end = Duration::from_secs(60);
        let (polls, late) = run_policy(end, |t| {
            if t >= end {
                return Observation::Stopped {
                    exitstatus: "OK".into(),
                };
            }
            let s = t.as_secs_f64() % 30.0;
            Observation::Running {
                progress: Some((s / 30.0 * 100.0).floor()),
            }
        });
        assert!(late <= ms(500), "noticed {late:?} late");
        assert!(polls <= 60, "{polls} polls");
    }

    #[test]
    fn a_busy_server_is_polled_less_often() {
        let p = Policy::with_timeout(Duration::from_secs(600));
        let mut s = WaitState::new();
        s.note_request_time(ms(400));
        assert_eq!(
            s.decide(&p, ms(10_000), Observation::Running { progress: None }),
            Decision::Wait(ms(1600))
        );
        // A request that hung until its timeout is not a measure of load.
        s.note_request_time(Duration::from_secs(30));
        assert_eq!(
            s.decide(&p, ms(11_000), Observation::Transient("timed out".into())),
            Decision::Wait(p.retry_first)
        );
        assert_eq!(
            s.decide(&p, ms(11_500), Observation::Running { progress: None }),
            Decision::Wait(p.retry_cap)
        );
        s.note_request_time(ms(2));
        assert!(matches!(
            s.decide(&p, ms(12_000), Observation::Running { progress: None }),
            Decision::Wait(d) if d <= p.cap
        ));
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
