//! Load relief: a run spaces its own requests while the server is queueing them.
//!
//! A fleet (one play, `forks: 50`) is fifty runs sending at once to pveproxy's three workers.
//! A run that sends its next request as soon as the last is answered keeps one request in
//! pveproxy's queue all the time, so fifty runs keep fifty there, and every other client of
//! the API (an admin's web UI polling `/cluster/resources`) waits behind them. PVE tells no
//! client how long its queue is; what a client sees is how long its requests take. As
//! delay-based congestion control does (TCP Vegas, LEDBAT), a request that takes much longer
//! than the quickest answer of its endpoint class in this run is read as queueing: the
//! quickest stands for the round trip plus the handler's own cost, the rest is time spent
//! waiting for a worker. A `596` (pveproxy could not reach pvedaemon in time), a `502`–`504`
//! or a `599`, and a refused connection say the same more bluntly.
//!
//! The policy is AIMD on one pace per process (every thread of a run shares it): on queueing
//! the gap between one answer and the next request doubles (at least to the queueing just
//! seen, at most [`QUEUE_MULTIPLE`] times it and [`MOST_GAP`]); on an answer at its class's
//! floor it shrinks by a quarter, to nothing. A run that queues the server backs off; the runs
//! of a fleet together keep the queue short, which is what an unrelated poll waits. Each gap
//! is spread by a jitter of ±50 % from the run's seed: fifty runs that met one burst of
//! queueing together would otherwise come back together, as the same burst. The gap is bounded
//! by the queueing seen, not only by [`MOST_GAP`]: a fleet's own bursts pass in a fraction of a
//! second, and a run that waited seconds for each of its requests would make the fleet slower
//! than the queue it avoids.
//!
//! A run that never meets a queue never waits: the gap starts at zero and grows only on
//! queueing, a class's first answer sets its floor and says nothing, and an answer within
//! [`LEAST_QUEUE`] of its floor is never read as queueing (a millisecond's jitter on a local
//! server is not a queue).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::request::Method;
use crate::error::ApiError;

/// Queueing below this is not read as load, whatever the ratio to the floor.
const LEAST_QUEUE: Duration = Duration::from_millis(5);
/// The longest gap the relief puts between an answer and the next request.
const MOST_GAP: Duration = Duration::from_secs(2);
/// The longest gap as a multiple of the queueing the latest slow answer waited.
const QUEUE_MULTIPLE: u32 = 16;
/// A request queued when it took more than this many times its class's floor.
const QUEUED_FACTOR: f64 = 2.0;
/// An answer at its floor (no queue to speak of) within this many times it: the gap shrinks.
const CLEAR_FACTOR: f64 = 1.5;
/// The gap after a refusal or an overload status when none was kept yet.
const FIRST_GAP: Duration = Duration::from_millis(50);
/// A gap shrunk below this is none.
const NO_GAP: Duration = Duration::from_millis(1);

/// An endpoint class: the method and the path, its node names, ids, UPIDs and storage names
/// left out (`GET /nodes/{node}/tasks/{upid}/status`), so the answers of one kind of request
/// are compared with each other and not with a cheaper kind's.
pub(super) fn class(method: Method, path: &str) -> String {
    let mut out = String::from(method.as_str());
    out.push(' ');
    let mut previous = "";
    for segment in path.trim_start_matches('/').split('/') {
        out.push('/');
        let shown = if matches!(previous, "nodes" | "storage") {
            "{name}"
        } else if segment.starts_with("UPID:") {
            "{upid}"
        } else if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            "{id}"
        } else {
            segment
        };
        out.push_str(shown);
        previous = segment;
    }
    out
}

/// What became of a request, for the relief.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// PVE's handler answered (a success, or an error of its own) after this long.
    Answered(Duration),
    /// The server is overloaded or pveproxy could not reach pvedaemon in time (`502`–`504`,
    /// `596`–`599`), or a connection was refused before anything was sent.
    Overloaded,
    /// Nothing the relief reads (a timeout of this run's own, a TLS failure, a check-mode
    /// refusal).
    Unknown,
}

/// The relief's reading of a request's result that took `took`.
pub(super) fn outcome<T>(result: &Result<T, ApiError>, took: Duration) -> Outcome {
    match result {
        Ok(_) => Outcome::Answered(took),
        Err(ApiError::Http {
            status: 502..=504 | 596..=599,
            ..
        }) => Outcome::Overloaded,
        Err(ApiError::Http { .. }) => Outcome::Answered(took),
        Err(ApiError::Transport { sent: false, .. }) => Outcome::Overloaded,
        Err(_) => Outcome::Unknown,
    }
}

/// One process's pace: the quickest answer of each endpoint class, the gap kept between an
/// answer and the next request, and when the next request may be sent.
#[derive(Debug)]
pub(super) struct Relief {
    floors: HashMap<String, Duration>,
    gap: Duration,
    next_at: Option<Instant>,
    /// The jitter's state, from the run's seed.
    jitter: u64,
}

impl Relief {
    /// No floors yet and no gap; `seed` (the run's) jitters the gaps.
    pub(super) fn new(seed: u64) -> Relief {
        Relief {
            floors: HashMap::new(),
            gap: Duration::ZERO,
            next_at: None,
            jitter: seed,
        }
    }

    /// How long a request about to be sent at `now` waits first; its turn is taken, so a
    /// parallel thread's request waits one gap more.
    pub(super) fn turn(&mut self, now: Instant) -> Duration {
        let Some(next) = self.next_at.filter(|_| !self.gap.is_zero()) else {
            return Duration::ZERO;
        };
        let start = next.max(now);
        self.next_at = Some(start + self.gap);
        start - now
    }

    /// Counts a request of `class` that ended at `now` with `outcome`.
    pub(super) fn observe(&mut self, class: String, outcome: Outcome, now: Instant) {
        match outcome {
            Outcome::Answered(took) => {
                // A class's first answer sets its floor and says nothing.
                let Some(floor) = self.floors.get_mut(&class) else {
                    self.floors.insert(class, took);
                    return self.keep_turn(now);
                };
                let quickest = *floor;
                *floor = quickest.min(took);
                let queued = took.saturating_sub(quickest);
                if took.as_secs_f64() > quickest.as_secs_f64() * QUEUED_FACTOR
                    && queued > LEAST_QUEUE
                {
                    self.widen(queued);
                } else if took.as_secs_f64() <= quickest.as_secs_f64() * CLEAR_FACTOR
                    || queued <= LEAST_QUEUE
                {
                    self.narrow();
                }
            }
            Outcome::Overloaded => self.widen(FIRST_GAP),
            Outcome::Unknown => {}
        }
        self.keep_turn(now);
    }

    /// The next request waits the gap after an answer at `now`, spread by the jitter.
    fn keep_turn(&mut self, now: Instant) {
        self.jitter = self
            .jitter
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Half the gap to one and a half, in 1/1024ths.
        let spread = 512 + (self.jitter >> 33) % 1024;
        let after = now + self.gap * spread as u32 / 1024;
        self.next_at = Some(self.next_at.map_or(after, |next| next.max(after)));
    }

    /// Queueing seen: the gap doubles, to at least `queued`, at most [`QUEUE_MULTIPLE`] times
    /// it and [`MOST_GAP`].
    fn widen(&mut self, queued: Duration) {
        self.gap = (self.gap * 2)
            .max(queued)
            .min(queued * QUEUE_MULTIPLE)
            .min(MOST_GAP);
    }

    /// An answer at its floor: the gap shrinks by a quarter, to none.
    fn narrow(&mut self) {
        self.gap = self.gap * 3 / 4;
        if self.gap < NO_GAP {
            self.gap = Duration::ZERO;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Clock;
    use crate::budget::test_clock::TestClock;
    use serde_json::Map;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const STATUS: &str = "GET /nodes/{name}/tasks/{upid}/status";

    /// One sequential run on the test clock: each request waits its turn, takes `took` and is
    /// counted; the pauses it made.
    fn run(relief: &mut Relief, clock: &TestClock, answers: &[Duration]) -> Vec<Duration> {
        let mut waited = Vec::new();
        for took in answers {
            let wait = relief.turn(clock.now());
            if !wait.is_zero() {
                clock.sleep(wait);
            }
            waited.push(wait);
            clock.sleep(*took);
            relief.observe(STATUS.to_string(), Outcome::Answered(*took), clock.now());
        }
        waited
    }

    #[test]
    fn classes_leave_out_nodes_ids_upids_and_storages() {
        assert_eq!(
            class(
                Method::Get,
                "/nodes/pve2/tasks/UPID:pve2:0001:0002:0003:qmcreate:101:root@pam:/status"
            ),
            STATUS
        );
        assert_eq!(
            class(Method::Post, "/nodes/pve1/qemu/104/clone"),
            "POST /nodes/{name}/qemu/{id}/clone"
        );
        assert_eq!(
            class(Method::Get, "/nodes/pve1/storage/local-lvm/content"),
            "GET /nodes/{name}/storage/{name}/content"
        );
        assert_ne!(
            class(Method::Get, "/cluster/resources"),
            class(Method::Get, "/cluster/nextid")
        );
    }

    #[test]
    fn a_run_whose_answers_stay_at_their_floor_never_waits() {
        let clock = TestClock::new(None);
        let mut relief = Relief::new(7);
        // Jitter of a few milliseconds on a quick server, even several times the floor, is
        // not a queue.
        let waited = run(
            &mut relief,
            &clock,
            &[ms(1), ms(4), ms(1), ms(5), ms(2), ms(6)],
        );
        assert!(waited.iter().all(Duration::is_zero), "{waited:?}");
        assert!(clock.slept().iter().sum::<Duration>() == ms(19));
        // A slow endpoint class is not read as queueing against a quick one.
        relief.observe(
            "GET /cluster/resources".into(),
            Outcome::Answered(ms(300)),
            clock.now(),
        );
        relief.observe(
            "GET /cluster/resources".into(),
            Outcome::Answered(ms(320)),
            clock.now(),
        );
        assert_eq!(relief.gap, Duration::ZERO);
        assert_eq!(relief.turn(clock.now()), Duration::ZERO);
    }

    #[test]
    fn queueing_widens_the_gap_and_answers_at_the_floor_close_it_again() {
        let clock = TestClock::new(None);
        let mut relief = Relief::new(7);
        // The floor 20 ms, then a queue: 120 ms is 100 ms of waiting.
        let waited = run(&mut relief, &clock, &[ms(20), ms(120)]);
        assert_eq!(waited, vec![Duration::ZERO, Duration::ZERO]);
        assert_eq!(relief.gap, ms(100));
        // The queue lasts: the gap doubles each time, up to sixteen times the queueing...
        run(&mut relief, &clock, &[ms(120)]);
        assert_eq!(relief.gap, ms(200));
        run(&mut relief, &clock, &[ms(120); 6]);
        assert_eq!(relief.gap, ms(100) * QUEUE_MULTIPLE);
        // ... and two seconds.
        run(&mut relief, &clock, &[ms(320)]);
        assert_eq!(relief.gap, MOST_GAP);
        // The next request waits the gap (spread by the jitter) after the last answer, less
        // what the run spent meanwhile on its own (a wait's pause already spaced it).
        let due = relief.next_at.unwrap() - clock.now();
        assert!(due >= MOST_GAP / 2 && due < MOST_GAP * 3 / 2, "{due:?}");
        clock.sleep(ms(300));
        assert_eq!(run(&mut relief, &clock, &[ms(21)]), vec![due - ms(300)]);
        // Answers at the floor shrink it by a quarter each, down to nothing.
        let mut before = relief.gap;
        for _ in 0..40 {
            run(&mut relief, &clock, &[ms(21)]);
            assert!(relief.gap < before || relief.gap.is_zero());
            before = relief.gap;
        }
        assert_eq!(relief.gap, Duration::ZERO);
        let later = run(&mut relief, &clock, &[ms(20)]);
        assert_eq!(later, vec![Duration::ZERO]);
    }

    #[test]
    fn an_answer_between_the_floor_and_the_queue_keeps_the_gap() {
        let clock = TestClock::new(None);
        let mut relief = Relief::new(7);
        run(&mut relief, &clock, &[ms(20), ms(80)]);
        assert_eq!(relief.gap, ms(60));
        run(&mut relief, &clock, &[ms(35)]);
        assert_eq!(relief.gap, ms(60));
    }

    #[test]
    fn overload_answers_and_refusals_widen_the_gap_and_say_nothing_of_the_floor() {
        let clock = TestClock::new(None);
        let mut relief = Relief::new(7);
        let overloaded: Result<(), ApiError> = Err(ApiError::Http {
            status: 596,
            message: "Connection timed out".into(),
            errors: Map::new(),
        });
        let refused: Result<(), ApiError> = Err(ApiError::Transport {
            detail: "connection refused".into(),
            sent: false,
            source: None,
        });
        for result in [&overloaded, &refused] {
            relief.observe(STATUS.into(), outcome(result, ms(3000)), clock.now());
        }
        assert_eq!(relief.gap, FIRST_GAP * 2);
        assert!(!relief.turn(clock.now()).is_zero());
        // No floor was taken from them: the next answer is the first of its class.
        relief.observe(STATUS.into(), Outcome::Answered(ms(40)), clock.now());
        assert_eq!(relief.gap, FIRST_GAP * 2);
        // A handler's own error is an answer; a lost answer says nothing.
        let handler: Result<(), ApiError> = Err(ApiError::Http {
            status: 500,
            message: "VM 101 already exists".into(),
            errors: Map::new(),
        });
        assert_eq!(outcome(&handler, ms(7)), Outcome::Answered(ms(7)));
        let lost: Result<(), ApiError> = Err(ApiError::Transport {
            detail: "timed out reading the answer".into(),
            sent: true,
            source: None,
        });
        assert_eq!(outcome(&lost, ms(7)), Outcome::Unknown);
    }

    #[test]
    fn parallel_threads_of_a_run_take_turns_one_gap_apart() {
        let clock = TestClock::new(None);
        let mut relief = Relief::new(7);
        run(&mut relief, &clock, &[ms(10), ms(110)]);
        assert_eq!(relief.gap, ms(100));
        let now = clock.now();
        let first = relief.turn(now);
        assert!(first >= ms(50) && first < ms(150), "{first:?}");
        assert_eq!(relief.turn(now), first + ms(100));
    }

    #[test]
    fn the_runs_of_a_fleet_come_back_spread_over_half_a_gap_to_one_and_a_half() {
        let clock = TestClock::new(None);
        let now = clock.now();
        let waits: Vec<Duration> = (0..50u64)
            .map(|seed| {
                let mut relief = Relief::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                relief.observe(STATUS.into(), Outcome::Answered(ms(10)), now);
                relief.observe(STATUS.into(), Outcome::Answered(ms(110)), now);
                relief.turn(now)
            })
            .collect();
        assert!(
            waits.iter().all(|w| *w >= ms(50) && *w < ms(150)),
            "{waits:?}"
        );
        let early = waits.iter().filter(|w| **w < ms(100)).count();
        assert!((10..=40).contains(&early), "{waits:?}");
    }
}
