//! The wait policy's tests: pure, no clock, no sleeping; tasks, imports and networks are
//! modelled and the policy is run against them.

use super::*;

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[test]
fn exit_status_rule() {
    assert_eq!(Exit::from_status("OK"), Exit::Ok);
    assert_eq!(Exit::from_status("WARNINGS: 2"), Exit::Warnings(2));
    assert_eq!(
        Exit::from_status("WARNINGS: 4294967296"),
        Exit::Warnings(4294967296)
    );
    assert!(Exit::from_status("WARNINGS: 123456789012345678901234567890").is_success());
    assert!(!Exit::from_status("WARNINGS: ").is_success());
    assert!(!Exit::from_status("WARNINGS: -1").is_success());
    assert!(!Exit::from_status("WARNINGS: +1").is_success());
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
                exitstatus: "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
                    .into()
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
    // The one back-off curve of every retry (`retry::Awaiting::Transient`).
    for (n, decision) in d.iter().enumerate() {
        let pause = Awaiting::Transient.pause(n as u32 + 1, p.seed);
        assert_eq!(*decision, Decision::Wait(pause));
    }
    let pauses: Vec<Duration> = (1..=7)
        .map(|n| Awaiting::Transient.pause(n, p.seed))
        .collect();
    assert!(pauses[0] < pauses[1] && pauses[1] < pauses[2], "{pauses:?}");
    assert!(pauses[6] <= ms(5000), "{pauses:?}");
    assert!(matches!(
        s.decide(&p, ms(1000), Observation::Running { progress: None }),
        Decision::Wait(_)
    ));
    assert_eq!(
        s.decide(&p, ms(1100), Observation::Transient("x".into())),
        Decision::Wait(Awaiting::Transient.pause(1, p.seed))
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
    pub(super) step: f64,
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

    fn observe(&self, elapsed: Duration) -> Observation {
        if elapsed >= self.copy + self.tail {
            return Observation::Stopped {
                exitstatus: "OK".into(),
            };
        }
        let pace = elapsed.as_secs_f64() / self.copy.as_secs_f64();
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

    /// Runs the policy against the model: (polls, how late the end was noticed). A task
    /// whose log reports progress is waited on as an import is (expecting the copy).
    fn run(&self) -> (u32, Duration) {
        let p = Policy::with_timeout(Duration::from_secs(3600)).expecting_progress(self.progress);
        run_policy_with(&p, self.copy + self.tail, |t| self.observe(t))
    }
}

/// Runs the policy against a task that ends at `end` and looks like `observe` says.
/// Runs the policy of an import wait (which expects the copy's progress) against a
/// simulated task ending at `end`: (polls, how late the end was noticed).
fn run_policy(end: Duration, observe: impl Fn(Duration) -> Observation) -> (u32, Duration) {
    let p = Policy::with_timeout(Duration::from_secs(3600)).expecting_progress(true);
    run_policy_with(&p, end, observe)
}

fn run_policy_with(
    policy: &Policy,
    end: Duration,
    observe: impl Fn(Duration) -> Observation,
) -> (u32, Duration) {
    let policy = policy.clone();
    let mut s = WaitState::new();
    let mut t = Duration::ZERO;
    loop {
        match s.decide(&policy, t, observe(t)) {
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
        // polled at the dense interval: no more than one request a second (plus the
        // allowance), noticed within 100 ms (median) and 300 ms (p95).
        let p95 = percentile(runs.iter().map(|r| r.1).collect(), 0.95);
        if f64::from(most) > (target * 1.1).ceil() + 1.0 || late > ms(100) || p95 > ms(300) {
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
                        ..Model::new(base + i as f64 * 0.37 + (i * i) as f64 * 0.013)
                    }
                    .run()
                })
                .collect();
            let (polls, most, late, worst) = summary(&runs);
            let row = format!(
                "{base} s import, step {step} %, burst {burst} % (held {held}), tail {tail} s: {polls} polls (median), {most} at most; noticed {late:?} late (median), {worst:?} at worst"
            );
            eprintln!("{row}");
            // Noticed within 100 ms (median) and 300 ms (worst), with no more than one
            // request a second (plus the allowance); whole percents over 5 minutes in at
            // most 40 requests (median).
            let budget = (base + 19.0 * 0.37 + 361.0 * 0.013 + tail).ceil() + 1.0;
            if f64::from(most) > budget
                || (step == 1.0 && burst == 0.0 && base == 300.0 && polls > 40)
                || late > ms(100)
                || worst > ms(300)
            {
                failures.push(row);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// An import scenario: its name, and the import of a given copy length.
type Scenario = (&'static str, Box<dyn Fn(f64) -> Import>);

/// An import as the policy sees it: a copy at a base rate that may change, stall, report
/// progress in coarse steps, and a finishing phase after 100 %.
pub(super) struct Import {
    pub(super) copy: f64,
    pub(super) tail: f64,
    pub(super) step: f64,
    /// From this percent on, the rate is multiplied by this factor.
    pub(super) change: Option<(f64, f64)>,
    /// At this percent, the copy stands still for this many seconds.
    pub(super) stall: Option<(f64, f64)>,
}

impl Import {
    pub(super) fn steady(copy: f64) -> Import {
        Import {
            copy,
            tail: 0.3,
            step: 1.0,
            change: None,
            stall: None,
        }
    }

    /// (time, percent) breakpoints of the copy, and when the task ends.
    pub(super) fn timeline(&self) -> (Vec<(f64, f64)>, f64) {
        let mut rate = 100.0 / self.copy;
        let (mut t, mut pct) = (0.0, 0.0);
        let mut points = vec![(0.0, 0.0)];
        let mut events: Vec<(f64, bool, f64)> = Vec::new();
        if let Some((at, f)) = self.change {
            events.push((at, true, f));
        }
        if let Some((at, d)) = self.stall {
            events.push((at, false, d));
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, is_change, v) in events {
            t += (at - pct) / rate;
            pct = at;
            points.push((t, pct));
            if is_change {
                rate *= v;
            } else {
                t += v;
                points.push((t, pct));
            }
        }
        t += (100.0 - pct) / rate;
        points.push((t, 100.0));
        (points, t + self.tail)
    }

    /// Runs the policy against this import: (requests, how late the end was noticed, end).
    pub(super) fn run(&self) -> (u32, Duration, f64) {
        let (points, end) = self.timeline();
        let (polls, late) = run_policy(Duration::from_secs_f64(end), |t| {
            self.observe(&points, end, t)
        });
        (polls, late, end)
    }

    /// Runs an import's wait through a network against this import: (task requests, how late
    /// the end was noticed, end), and the same for the peer's one-second poll.
    fn run_over(&self, net: Net) -> ((u32, Duration), (u32, Duration), f64) {
        let (points, end) = self.timeline();
        let p = Policy::with_timeout(Duration::from_secs(3600))
            .with_cap(ms(100))
            .expecting_progress(true);
        let at = Duration::from_secs_f64(end);
        let ours = run_over(&p, net, at, |t| self.observe(&points, end, t));
        (ours, peer_over(net, at), end)
    }

    /// What a look at `t` sees of the import whose timeline is `points`, ending at `end`.
    fn observe(&self, points: &[(f64, f64)], end: f64, t: Duration) -> Observation {
        let t = t.as_secs_f64();
        if t >= end {
            return Observation::Stopped {
                exitstatus: "OK".into(),
            };
        }
        let truth = points.windows(2).find(|w| t < w[1].0).map_or(100.0, |w| {
            let f = (t - w[0].0) / (w[1].0 - w[0].0).max(1e-9);
            w[0].1 + f * (w[1].1 - w[0].1)
        });
        Observation::Running {
            progress: Some(((truth / self.step).floor() * self.step).min(100.0)),
        }
    }
}

fn percentile(mut xs: Vec<Duration>, fraction: f64) -> Duration {
    xs.sort();
    xs[((xs.len() - 1) as f64 * fraction).round() as usize]
}

/// The targets of the import wait, over imports of 30 s to 10 minutes with steady,
/// changing, stalling and coarse progress and finishing phases of up to 30 s: the end is
/// noticed within 100 ms (median) and 300 ms (p95) of each row of 12 imports, a task sends
/// no more requests than one a second (plus the allowance), and a steady 5-minute import
/// costs at most 40 requests. Rows that cannot meet the latency within that request budget
/// are listed with their figures (see README, Performance).
#[test]
fn imports_meet_the_latency_and_request_targets() {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let scenarios: Vec<Scenario> = vec![
        ("steady", Box::new(Import::steady)),
        (
            "finishing 5 s",
            Box::new(|c| Import {
                tail: 5.0,
                ..Import::steady(c)
            }),
        ),
        (
            "finishing 30 s",
            Box::new(|c| Import {
                tail: 30.0,
                ..Import::steady(c)
            }),
        ),
        (
            "rate halves at 50 %",
            Box::new(|c| Import {
                change: Some((50.0, 0.5)),
                ..Import::steady(c)
            }),
        ),
        (
            "rate doubles at 50 %",
            Box::new(|c| Import {
                change: Some((50.0, 2.0)),
                ..Import::steady(c)
            }),
        ),
        (
            "stalls 10 s at 40 %",
            Box::new(|c| Import {
                stall: Some((40.0, 10.0)),
                ..Import::steady(c)
            }),
        ),
        (
            "5 % steps",
            Box::new(|c| Import {
                step: 5.0,
                ..Import::steady(c)
            }),
        ),
        (
            "10 % steps",
            Box::new(|c| Import {
                step: 10.0,
                ..Import::steady(c)
            }),
        ),
    ];
    for (name, make) in &scenarios {
        for base in [30.0, 60.0, 120.0, 300.0, 600.0] {
            // Lengths spread irregularly, so the ends fall at any phase of the polls.
            let runs: Vec<(u32, Duration, f64)> = (0..20)
                .map(|i| {
                    let i = i as f64;
                    make(base * (1.0 + i * 0.0071) + i * 0.37 + i * i * 0.013).run()
                })
                .collect();
            let lates: Vec<Duration> = runs.iter().map(|r| r.1).collect();
            let (p50, p95) = (percentile(lates.clone(), 0.5), percentile(lates, 0.95));
            let reqs = median(runs.iter().map(|r| r.0).collect());
            let over_budget = runs
                .iter()
                .filter(|(n, _, end)| f64::from(*n) > end.ceil() + 1.0)
                .count();
            let row = format!(
                "{name}, {base} s: {reqs} requests (median), end noticed {p50:?} (p50) / {p95:?} (p95) late"
            );
            eprintln!("{row}");
            rows.push(row.clone());
            if over_budget > 0 {
                failures.push(format!(
                    "{row}: {over_budget} runs over one request a second"
                ));
            }
            let latency_ok = p50 <= ms(100) && p95 <= ms(300);
            // A finishing phase longer than about a sixth of the copy cannot be polled at
            // the dense interval within one request a second: there, the end is noticed
            // within a second (the budget's pace).
            let tail = make(base).tail;
            let budget_bound = tail * 6.0 > base - 10.0;
            if !(latency_ok || (budget_bound && p95 <= Duration::from_secs(1))) {
                failures.push(row.clone());
            }
            if *name == "steady" && base == 300.0 && reqs > 40 {
                failures.push(format!("{row}: more than 40 requests"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A task expected to copy whose first progress line is slow to come (storage allocating,
/// a copy that begins late) costs no more than a one-second poll until it comes, and then
/// its end is still noticed promptly.
#[test]
fn a_copy_slow_to_begin_is_polled_like_a_one_second_poll() {
    let p = Policy::with_timeout(Duration::from_secs(600)).expecting_progress(true);
    let mut s = WaitState::new();
    let mut t = Duration::ZERO;
    let (begins, end) = (20.0, 80.0);
    let mut before = 0;
    let late = loop {
        let secs = t.as_secs_f64();
        let obs = if secs >= end {
            Observation::Stopped {
                exitstatus: "OK".into(),
            }
        } else {
            Observation::Running {
                progress: (secs >= begins).then(|| {
                    ((secs - begins) / (end - 0.3 - begins) * 100.0)
                        .floor()
                        .min(100.0)
                }),
            }
        };
        if secs < begins {
            before += 1;
        }
        match s.decide(&p, t, obs) {
            Decision::Wait(d) => t += d,
            Decision::Done(_) => break t.as_secs_f64() - end,
            other => panic!("{other:?}"),
        }
    };
    assert!(
        before <= 20 + EARLY_LOOKS as u32,
        "{before} polls before the copy began"
    );
    assert!(
        f64::from(s.requests()) <= end.ceil() + 1.0,
        "{} requests",
        s.requests()
    );
    assert!(late <= 0.3, "noticed {late} s late");
    // Without the expectation, the same wait polls at the short interval until then.
    let p = Policy::with_timeout(Duration::from_secs(600));
    let mut s = WaitState::new();
    let mut n = 0;
    let mut t = Duration::ZERO;
    while t.as_secs_f64() < begins {
        let Decision::Wait(d) = s.decide(&p, t, Observation::Running { progress: None }) else {
            panic!()
        };
        t += d;
        n += 1;
    }
    assert!(n > 100, "{n}");
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
    // The session's quickest answer took 1 ms and a task request takes 20 ms: the server
    // spends 19 ms more on it, so from the second answer on (the first of a wait says little)
    // the looks reach it 50 times that apart (under 2 % of a worker), the sleep shortened by
    // the 20 ms the look took.
    s.note_baseline(ms(1));
    s.note_request_time(ms(20));
    assert_eq!(
        s.decide(&p, ms(9_000), Observation::Running { progress: None }),
        Decision::Wait(p.first - ms(20))
    );
    s.note_request_time(ms(20));
    assert_eq!(
        s.decide(&p, ms(10_000), Observation::Running { progress: None }),
        Decision::Wait(ms(950 - 20))
    );
    // A request that failed after 30 s is a measure of neither the load nor the round trip.
    s.note_request_time(Duration::from_secs(30));
    assert_eq!(
        s.decide(&p, ms(11_000), Observation::Transient("timed out".into())),
        Decision::Wait(Awaiting::Transient.pause(1, p.seed))
    );
    // Answers slow for a while (a queue at the server): the looks space out, but never
    // further than a one-second poll's (a second's sleep after each answer).
    let mut last = Decision::Vanished;
    for i in 0..4 {
        s.note_request_time(ms(400));
        last = s.decide(
            &p,
            ms(12_000 + i * 6000),
            Observation::Running { progress: None },
        );
    }
    assert_eq!(last, Decision::Wait(Duration::from_secs(1)));
    // Quick answers again: one of them is enough (the least of the latest answers counts).
    s.note_request_time(ms(2));
    assert!(matches!(
        s.decide(&p, ms(40_000), Observation::Running { progress: None }),
        Decision::Wait(d) if d <= p.cap
    ));
}

/// Two imports of the 30 s grid cell at a 10 ms round trip and 1 ms of server time, as the
/// module saw them (bench/run.sh --only net --net-rtts 10 --net-import-costs 1, ten imports
/// at once on a host with a load average of 6 to 9): (elapsed ms, how long the look took in
/// µs, the session's quickest answer in µs, the progress seen; `None` in the last column
/// once the task had stopped). When the copies reached 100 %, qemu-img exited in ten
/// processes at once and the answers took 60 to 150 ms for half a second, though pve-sim
/// spent 1 to 20 ms on them (its request log): the host and the delaying proxy were short
/// of CPU. The least of the latest four answers read that as a server spending 16 and 29 ms
/// a request, and the wait slept 745 ms and 1.38 s just before the end (the grid's 4.8 s
/// sleep was the same reading at 200 ms answers, capped at the 5 s back-off).
type Recorded = (u64, u64, u64, Option<Option<f64>>);
const SLOW_MOMENT_AT_THE_END: [&[Recorded]; 2] = [
    &[
        (15, 15302, 15288, Some(None)),
        (75, 24922, 15288, Some(None)),
        (151, 16459, 15288, Some(None)),
        (319, 63799, 15288, Some(None)),
        (447, 41942, 15288, Some(None)),
        (1053, 34710, 15288, Some(Some(0.0))),
        (2071, 36634, 15288, Some(Some(4.0))),
        (7277, 27977, 15288, Some(Some(21.0))),
        (18288, 14633, 14541, Some(Some(58.0))),
        (23798, 22489, 14541, Some(Some(76.0))),
        (26386, 12862, 12815, Some(Some(85.0))),
        (28071, 12886, 12815, Some(Some(90.0))),
        (29013, 12736, 12695, Some(Some(93.0))),
        (29675, 12949, 12695, Some(Some(96.0))),
        (30013, 16246, 12695, Some(Some(97.0))),
        (30328, 13124, 12695, Some(Some(98.0))),
        (30507, 12531, 12502, Some(Some(98.0))),
        (30638, 12730, 12502, Some(Some(99.0))),
        (30784, 28925, 12502, Some(Some(99.0))),
        (31051, 148382, 12502, Some(Some(100.0))),
        (31152, 99641, 12502, Some(Some(100.0))),
        (31260, 76124, 12502, Some(Some(100.0))),
        (32019, 13362, 12502, None),
    ],
    &[
        (22, 22273, 17617, Some(None)),
        (263, 29545, 17617, Some(None)),
        (638, 168120, 17617, Some(None)),
        (794, 71175, 17617, Some(Some(0.0))),
        (1010, 54529, 17617, Some(Some(0.0))),
        (6220, 28919, 17617, Some(Some(18.0))),
        (8004, 13073, 13030, Some(Some(24.0))),
        (11615, 23894, 13030, Some(Some(36.0))),
        (20086, 47524, 13030, Some(Some(64.0))),
        (23970, 12930, 12880, Some(Some(77.0))),
        (26537, 13330, 12880, Some(Some(85.0))),
        (28203, 14041, 12880, Some(Some(91.0))),
        (28969, 13074, 12880, Some(Some(93.0))),
        (29759, 12887, 12849, Some(Some(96.0))),
        (30073, 12786, 12750, Some(Some(97.0))),
        (30398, 13681, 12750, Some(Some(98.0))),
        (30561, 15084, 12750, Some(Some(99.0))),
        (30751, 41599, 12750, Some(Some(99.0))),
        (30911, 69707, 12750, Some(Some(100.0))),
        (31034, 61840, 12750, Some(Some(100.0))),
        (31165, 62594, 12750, Some(Some(100.0))),
        (32559, 12859, 12750, None),
    ],
];

/// The module's policy for an import: progress expected, the default `poll_interval`.
fn import_policy() -> Policy {
    Policy::with_timeout(Duration::from_secs(1800))
        .with_cap(ms(100))
        .expecting_progress(true)
}

/// Replays recorded looks of an import's wait, returning each decision.
fn replay(looks: &[Recorded]) -> Vec<Decision> {
    let p = import_policy();
    let mut s = WaitState::new();
    looks
        .iter()
        .map(|&(at, took, quickest, seen)| {
            s.note_request_time(Duration::from_micros(took));
            s.note_baseline(Duration::from_micros(quickest));
            let obs = match seen {
                Some(progress) => Observation::Running { progress },
                None => Observation::Stopped {
                    exitstatus: "OK".into(),
                },
            };
            s.decide(&p, ms(at), obs)
        })
        .collect()
}

#[test]
fn a_moment_of_slow_answers_is_not_read_as_load() {
    let dense = import_policy().dense;
    for looks in SLOW_MOMENT_AT_THE_END {
        let decisions = replay(looks);
        // Every look of the finishing phase (100 %) is followed at the dense interval, the
        // sleep shortened by the slow look's time.
        for (look, decision) in looks.iter().zip(&decisions) {
            if look.3 == Some(Some(100.0)) {
                let took = Duration::from_micros(look.1);
                assert_eq!(
                    *decision,
                    Decision::Wait(dense.saturating_sub(took)),
                    "at {} ms",
                    look.0
                );
            }
        }
    }
    // The grid's 4.8 s sleep: the same import, its four looks after 100 % answered in 200 ms
    // each (the host busier still). Half a second of slow answers is not a load either.
    let mut looks = SLOW_MOMENT_AT_THE_END[0][..19].to_vec();
    let mut at = 30_900;
    for _ in 0..4 {
        looks.push((at, 200_000, 12_502, Some(Some(100.0))));
        at += 130;
    }
    for decision in &replay(&looks)[19..] {
        assert_eq!(*decision, Decision::Wait(ms(0)));
    }
}

#[test]
fn slow_answers_that_last_space_the_looks_as_a_one_second_poll_at_most() {
    // The same import, but from 100 % on every answer takes 200 ms (a queue at the server
    // that lasts), each look sent when the one before said: after two seconds of it the looks
    // space out, to a one-second poll's spacing and no further (the old reading slept 4.8 s,
    // 50 times the 188 ms share, capped at the 5 s back-off).
    let mut looks = SLOW_MOMENT_AT_THE_END[0][..19].to_vec();
    let took = ms(200);
    let mut sleeps = Vec::new();
    let mut sent = ms(30_700);
    while sent < Duration::from_secs(40) {
        let answered = sent + took;
        looks.push((
            answered.as_millis() as u64,
            took.as_micros() as u64,
            12_502,
            Some(Some(100.0)),
        ));
        let Some(Decision::Wait(sleep)) = replay(&looks).last().cloned() else {
            panic!("{looks:?}")
        };
        sleeps.push(sleep);
        sent = answered + sleep;
    }
    // A one-second poll's period: a second's sleep and the request.
    let period = Duration::from_secs(1) + took;
    assert!(sleeps.iter().all(|d| *d + took <= period), "{sleeps:?}");
    assert_eq!(sleeps.last(), Some(&Duration::from_secs(1)), "{sleeps:?}");
    // For two seconds the answers are not yet a load: the dense interval.
    let dense = import_policy().dense;
    assert_eq!(sleeps[0], dense.saturating_sub(took), "{sleeps:?}");
}

#[test]
fn a_failed_request_does_not_read_as_a_short_round_trip() {
    // A far server (100 ms a request, its quickest answer as long), then a local proxy that
    // answers 502 at once: that answer is not the server's, and the server is still read as
    // far and idle, not as spending 100 ms on each request.
    let p = Policy::with_timeout(Duration::from_secs(600)).with_cap(ms(300));
    let mut s = WaitState::new();
    s.note_baseline(ms(100));
    let mut t = ms(100);
    for _ in 0..6 {
        s.note_request_time(ms(101));
        let Decision::Wait(d) = s.decide(&p, t, Observation::Running { progress: None }) else {
            panic!()
        };
        t += d + ms(101);
    }
    s.note_request_time(Duration::from_micros(200));
    assert_eq!(
        s.decide(&p, t, Observation::Transient("502 Bad Gateway".into())),
        Decision::Wait(Awaiting::Transient.pause(1, p.seed))
    );
    s.note_request_time(ms(101));
    assert_eq!(
        s.decide(&p, t + ms(300), Observation::Running { progress: None }),
        Decision::Wait(p.cap - ms(101))
    );
}

#[test]
fn the_default_poll_interval_keeps_the_dense_looks() {
    // The module always sets the cap from `poll_interval` (100ms by default): the dense looks
    // near a copy's end and while it finishes stay at 130 ms; a longer interval slows them, a
    // shorter one speeds them.
    let p = Policy::with_timeout(Duration::from_secs(60));
    assert_eq!(p.clone().with_cap(ms(100)).dense, ms(130));
    assert_eq!(p.clone().with_cap(ms(50)).dense, ms(50));
    assert_eq!(p.clone().with_cap(ms(150)).dense, ms(150));
    assert_eq!(
        p.with_cap(Duration::from_secs(1)).dense,
        Duration::from_secs(1)
    );
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
    // A disk mirrored by a live migration (qemu-server BlockJob.pm, monitor).
    let mirror = [
        "drive-scsi0: transferred 8.0 MiB of 32.0 MiB (25.00%) in 1s".to_string(),
        "drive-scsi0: transferred 32.0 MiB of 32.0 MiB (100.00%) in 4s, ready".to_string(),
        "drive-scsi0: Completing block job...".to_string(),
    ];
    assert_eq!(progress_in(&mirror[..1]), Some(25.0));
    assert_eq!(progress_in(&mirror), Some(100.0));
    assert_eq!(
        transfer_part("2026-12-01 08:00:00 migration active, transferred 1 of 2 VM-state"),
        None
    );
}

/// A network and a server as a look sees them: a task request is answered `rtt + cost` after
/// it was sent, the server reading the task's state `rtt / 2 + cost` after it was sent (its
/// cost is spent before it reads, as pve-sim's is); the session's quickest answer (the login,
/// a config read) took `quickest`.
#[derive(Clone, Copy, Debug)]
struct Net {
    rtt: Duration,
    cost: Duration,
    quickest: Duration,
}

impl Net {
    /// An idle server: every request costs it `cost_ms`, the quickest answer included.
    fn idle(rtt_ms: u64, cost_ms: u64) -> Net {
        Net {
            rtt: ms(rtt_ms),
            cost: ms(cost_ms),
            quickest: ms(rtt_ms + cost_ms),
        }
    }

    fn seen_at(&self, sent: Duration) -> Duration {
        sent + self.rtt / 2 + self.cost
    }

    fn answered(&self, sent: Duration) -> Duration {
        sent + self.rtt + self.cost
    }
}

/// Runs the policy through `net` against a task that ends at `end` (as the server's clock
/// says) and looks as `observe` says at the instant the server reads it: (task requests, how
/// late the end was noticed, from the end to the answer that said so).
fn run_over(
    policy: &Policy,
    net: Net,
    end: Duration,
    observe: impl Fn(Duration) -> Observation,
) -> (u32, Duration) {
    let mut s = WaitState::new();
    s.note_baseline(net.quickest);
    let mut sent = Duration::ZERO;
    loop {
        let answered = net.answered(sent);
        s.note_request_time(answered - sent);
        match s.decide(policy, answered, observe(net.seen_at(sent))) {
            Decision::Wait(d) => sent = answered + d,
            Decision::Done(_) => return (s.requests(), answered.saturating_sub(end)),
            other => panic!("{other:?}"),
        }
    }
}

/// The peer's wait through `net` (community.proxmox: a status request, then a second's
/// sleep, until it says stopped): (task requests, how late the end was noticed).
fn peer_over(net: Net, end: Duration) -> (u32, Duration) {
    let (mut sent, mut n) = (Duration::ZERO, 0);
    loop {
        n += 1;
        if net.seen_at(sent) >= end {
            return (n, net.answered(sent) - end);
        }
        sent = net.answered(sent) + Duration::from_secs(1);
    }
}

/// p50 and p95 of the lateness of some runs.
fn p50_p95(runs: &[Duration]) -> (Duration, Duration) {
    (
        percentile(runs.to_vec(), 0.5),
        percentile(runs.to_vec(), 0.95),
    )
}

/// The round trips and server costs the targets name (issue: the wait over real networks).
const RTTS: [u64; 4] = [0, 10, 40, 100];
const COSTS: [u64; 5] = [1, 2, 3, 4, 5];

/// Tasks without progress (0.2 s to 30 s, 20 lengths each) through round trips of 0 to
/// 100 ms to a server spending 1 to 5 ms on a request: the end is noticed within 100 ms + one
/// round trip (p50) and 300 ms + one round trip (p95), never later than the peer's one-second
/// poll (p50, p95), and a far server is looked at as often as a near one.
#[test]
fn far_and_near_idle_servers_are_polled_alike() {
    let p = Policy::with_timeout(Duration::from_secs(3600)).with_cap(ms(100));
    let mut failures = Vec::new();
    for cost in COSTS {
        let mut near_requests = 0;
        for rtt in RTTS {
            let net = Net::idle(rtt, cost);
            for base in [0.2, 1.0, 5.0, 30.0] {
                let (mut ours, mut peer, mut requests) = (Vec::new(), Vec::new(), 0);
                for i in 0..20 {
                    let end = Duration::from_secs_f64(base * (0.8 + i as f64 * 0.021));
                    let (n, late) = run_over(&p, net, end, |t| {
                        if t >= end {
                            Observation::Stopped {
                                exitstatus: "OK".into(),
                            }
                        } else {
                            Observation::Running { progress: None }
                        }
                    });
                    ours.push(late);
                    requests += n;
                    peer.push(peer_over(net, end).1);
                }
                let ((p50, p95), (peer50, peer95)) = (p50_p95(&ours), p50_p95(&peer));
                let row = format!(
                    "{base} s task, rtt {rtt} ms, cost {cost} ms: noticed {p50:?} / {p95:?} (p50 / p95), peer {peer50:?} / {peer95:?}; {requests} requests in 20 tasks"
                );
                eprintln!("{row}");
                if p50 > ms(100 + rtt) || p95 > ms(300 + rtt) || p50 > peer50 || p95 > peer95 {
                    failures.push(row.clone());
                }
                if base == 30.0 {
                    if rtt == 0 {
                        near_requests = requests;
                    } else if f64::from(requests) < 0.95 * f64::from(near_requests) {
                        failures.push(format!("{row}: looked at less often than a near server"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The import scenarios of the targets, through round trips of 0 to 100 ms to a server
/// spending 1 to 5 ms on a request: each run sends no more task requests than the peer's
/// one-second poll would on the same import, each row (40 imports) notices the end within
/// 100 ms + one round trip (p50) and 300 ms + one round trip (p95), and never later than the
/// peer (p50, p95). Rows whose finishing phase is long beside the copy cannot meet the first
/// within the peer's requests (their runs spend all of them): there the end is noticed at the
/// peer's pace or sooner.
#[test]
fn imports_over_far_and_near_servers_meet_the_targets() {
    let scenarios: Vec<Scenario> = vec![
        ("steady", Box::new(Import::steady)),
        (
            "finishing 2 s",
            Box::new(|c| Import {
                tail: 2.0,
                ..Import::steady(c)
            }),
        ),
        (
            "finishing 5 s",
            Box::new(|c| Import {
                tail: 5.0,
                ..Import::steady(c)
            }),
        ),
        (
            "rate halves at 50 %",
            Box::new(|c| Import {
                change: Some((50.0, 0.5)),
                ..Import::steady(c)
            }),
        ),
        (
            "stalls 10 s at 40 %",
            Box::new(|c| Import {
                stall: Some((40.0, 10.0)),
                ..Import::steady(c)
            }),
        ),
        (
            "10 % steps",
            Box::new(|c| Import {
                step: 10.0,
                ..Import::steady(c)
            }),
        ),
    ];
    let mut failures = Vec::new();
    for rtt in RTTS {
        for cost in COSTS {
            let net = Net::idle(rtt, cost);
            for (name, make) in &scenarios {
                for base in [30.0, 120.0, 600.0] {
                    let (mut ours, mut peer, mut over) = (Vec::new(), Vec::new(), 0);
                    let (mut requests, mut spent) = (Vec::new(), 0);
                    for i in 0..40 {
                        let i = i as f64;
                        // Lengths whose phase against the looks is spread evenly (the
                        // golden ratio's multiples), so no row is lucky or unlucky.
                        let import =
                            make(base * (1.0 + i * 0.0037) + (i * 0.618_034).fract() * 1.3);
                        let ((n, late), (peer_n, peer_late), _) = import.run_over(net);
                        ours.push(late);
                        peer.push(peer_late);
                        requests.push(n);
                        over += usize::from(n > peer_n);
                        spent += usize::from(n + 1 >= peer_n);
                    }
                    let ((p50, p95), (peer50, peer95)) = (p50_p95(&ours), p50_p95(&peer));
                    let row = format!(
                        "{name}, {base} s, rtt {rtt} ms, cost {cost} ms: noticed {p50:?} / {p95:?}, peer {peer50:?} / {peer95:?}; {} requests (median)",
                        median(requests)
                    );
                    eprintln!("{row}");
                    // Where runs spend all the peer's requests would (a finishing phase long
                    // beside the copy), the latency target yields to the request target.
                    let budget_bound = spent >= 3;
                    let on_target = p50 <= ms(100 + rtt) && p95 <= ms(300 + rtt);
                    if over > 0 || p50 > peer50 || p95 > peer95 || !(on_target || budget_bound) {
                        failures.push(format!("{row}; {over} runs over the peer's requests"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The load row: task requests cost the server 20 ms (its other requests 1 ms) and 20
/// modules wait at once. At any round trip, a wait then costs the server no more than 1.2
/// times what the peer's one-second poll does, and the end is still noticed no later than the
/// peer notices it.
#[test]
fn a_busy_server_far_or_near_makes_the_wait_back_off() {
    let p = Policy::with_timeout(Duration::from_secs(3600)).with_cap(ms(100));
    for rtt in RTTS {
        let net = Net {
            rtt: ms(rtt),
            cost: ms(20),
            quickest: ms(rtt + 1),
        };
        let (mut ours, mut peer, mut ours_late, mut peer_late) = (0, 0, Vec::new(), Vec::new());
        for i in 0..20 {
            let end = Duration::from_secs_f64(40.0 + i as f64 * 0.137);
            let (n, late) = run_over(&p, net, end, |t| {
                if t >= end {
                    Observation::Stopped {
                        exitstatus: "OK".into(),
                    }
                } else {
                    Observation::Running { progress: None }
                }
            });
            let (peer_n, peer_l) = peer_over(net, end);
            ours += n;
            peer += peer_n;
            ours_late.push(late);
            peer_late.push(peer_l);
        }
        let (p50, _) = p50_p95(&ours_late);
        let (peer50, _) = p50_p95(&peer_late);
        eprintln!(
            "busy server, rtt {rtt} ms: {ours} requests against the peer's {peer}; noticed {p50:?} (p50), peer {peer50:?}"
        );
        assert!(
            f64::from(ours) <= 1.2 * f64::from(peer),
            "rtt {rtt} ms: {ours} requests against the peer's {peer}"
        );
        assert!(
            p50 <= peer50 + ms(100),
            "rtt {rtt} ms: {p50:?} against {peer50:?}"
        );
    }
}

/// A `poll_interval` above a one-second poll's period (the module accepts up to 60 s) makes
/// the densest spacing longer than the period: the spacing that spreads a copy's budget is
/// then the interval asked for (clamped to whichever bound is larger), never a panic.
#[test]
fn a_poll_interval_beyond_a_second_spaces_a_copy_without_panicking() {
    for interval in [ms(1500), ms(2000), Duration::from_secs(60)] {
        let policy = Policy::with_timeout(Duration::from_secs(3600))
            .expecting_progress(true)
            .with_cap(interval);
        let mut pace = pace::Pace::default();
        pace.start_budget(Duration::ZERO, true);
        let spacing = pace.paced(
            &policy,
            Duration::from_secs(30),
            Duration::from_secs(90),
            3.0,
        );
        assert_eq!(spacing, interval, "{interval:?}");
    }
}

/// Runs the policy against a task of `kind` that ends at `ends`: the looks' times and how
/// each read the task.
fn looks_until(kind: Kind, ends: Duration) -> Vec<(Duration, LookAt)> {
    looks_until_with(
        kind,
        ends,
        Policy::with_timeout(Duration::from_secs(60)),
        false,
    )
}

/// [`looks_until`] under `policy`; `fresh`: the state as [`WaitState::new`] makes it.
fn looks_until_with(
    kind: Kind,
    ends: Duration,
    policy: Policy,
    fresh: bool,
) -> Vec<(Duration, LookAt)> {
    let mut state = if fresh {
        WaitState::new()
    } else {
        WaitState::for_kind(kind, &policy)
    };
    let mut at = kind.first_look(&policy);
    let mut looks = Vec::new();
    loop {
        looks.push((at, kind.look_at(at)));
        let obs = if at >= ends {
            Observation::Stopped {
                exitstatus: "OK".into(),
            }
        } else {
            Observation::Running { progress: None }
        };
        match state.decide(&policy, at, obs) {
            Decision::Wait(pause) => at += pause,
            Decision::Done(_) => return looks,
            other => panic!("unexpected decision {other:?}"),
        }
    }
}

#[test]
fn a_blank_create_is_first_looked_at_once_most_have_ended_by_its_status() {
    // pve-sim's create at the fleet's time scale (200 ms): one look.
    assert_eq!(
        looks_until(Kind::BlankCreate, ms(200)),
        [(BLANK_CREATE_FIRST, LookAt::Status)]
    );
    // PVE's slowest blank create (1 s): status looks only, the end noticed within the cap.
    let slow = looks_until(Kind::BlankCreate, ms(1000));
    assert!(
        slow.iter().all(|(_, how)| *how == LookAt::Status),
        "{slow:?}"
    );
    let noticed = slow.last().unwrap().0;
    assert!(noticed >= ms(1000) && noticed <= ms(1100), "{slow:?}");
    assert!(slow.len() <= 10, "{} looks for a 1 s create", slow.len());
    // Past the first look they come at the cap: a 500 ms create (pve-sim's at the bench's
    // time scale) is seen ending at the fourth.
    let bench = looks_until(Kind::BlankCreate, ms(500));
    assert_eq!(
        bench.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
        [ms(250), ms(350), ms(450), ms(550)],
        "{bench:?}"
    );
    // A create still running past the span (found running, it copies after all) is read by
    // its log from then on, as a copy is.
    let long = looks_until(Kind::BlankCreate, ms(3000));
    assert!(
        long.iter()
            .any(|(at, how)| *how == LookAt::Log && *at >= BLANK_CREATE_SPAN)
    );
    assert!(
        long.iter()
            .all(|(at, how)| (*how == LookAt::Status) == (*at < BLANK_CREATE_SPAN))
    );
}

#[test]
fn only_a_creates_looks_start_spaced_and_a_long_poll_interval_is_grown_to() {
    let policy = || Policy::with_timeout(Duration::from_secs(60));
    for kind in [Kind::Plain, Kind::Copies] {
        assert_eq!(
            looks_until_with(kind, ms(3000), policy(), false),
            looks_until_with(kind, ms(3000), policy(), true),
            "{kind:?} waits as before"
        );
    }
    // `poll_interval: 5s`: a 1 s create is still noticed within a fraction of a second of
    // its end, the looks growing from the default cap towards the larger one.
    let slow_poll = Policy::with_timeout(Duration::from_secs(60)).with_cap(Duration::from_secs(5));
    let looks = looks_until_with(Kind::BlankCreate, ms(1000), slow_poll, false);
    let noticed = looks.last().unwrap().0;
    assert!(noticed <= ms(1500), "{looks:?}");
}

#[test]
fn other_tasks_are_looked_at_as_their_kind_reads() {
    let policy = Policy::with_timeout(Duration::from_secs(60));
    assert_eq!(Kind::Plain.first_look(&policy), Duration::ZERO);
    assert_eq!(Kind::Copies.first_look(&policy), Duration::ZERO);
    assert_eq!(looks_until(Kind::Copies, ms(0)), [(ms(0), LookAt::Log)]);
    // An import's create does a blank create's work before it copies: its first look waits
    // as long, and reads the log.
    assert_eq!(
        looks_until(Kind::ImportCreate, ms(0)),
        [(BLANK_CREATE_FIRST, LookAt::Log)]
    );
    assert!(
        looks_until(Kind::Plain, ms(5000))
            .iter()
            .all(|(_, how)| *how == LookAt::Status)
    );
    // The first look never waits past the deadline.
    let short = Policy::with_timeout(ms(100));
    assert_eq!(Kind::BlankCreate.first_look(&short), ms(100));
}
