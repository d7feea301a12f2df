//! A run's time, made once where the run starts and handed down: its deadline, the seed that
//! jitters its pauses, and the clock that tells the time and sleeps.
//!
//! Everything that waits (a request's own timeout in [`crate::client`], a retry or poll loop
//! in [`crate::retry::until`], a task wait's policy in [`crate::wait`]) is given the budget;
//! none of them hands the time left back up for another to rebuild it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::interrupt;

/// Tells the time and sleeps; the real one sleeps in slices a signal ends (see
/// [`crate::interrupt`]), a test's moves its time forward instead.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Instant;
    /// Sleeps `pause`; false when a signal ended it early.
    fn sleep(&self, pause: Duration) -> bool;
}

/// The system's clock; its sleeps end at a signal.
struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, pause: Duration) -> bool {
        interrupt::sleep(pause)
    }
}

/// A signal ended a pause: its name ("SIGTERM", "SIGINT").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted(pub &'static str);

/// A run's time: no request, retry or wait outlasts its deadline.
#[derive(Clone)]
pub struct Budget {
    deadline: Instant,
    seed: u64,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("Budget")
            .field("left", &self.left())
            .field("seed", &self.seed)
            .finish()
    }
}

impl Budget {
    /// A budget of `timeout` from now on the system's clock, with a seed that differs
    /// between processes (parallel runs do not retry in step).
    pub fn new(timeout: Duration) -> Budget {
        Budget::on(Arc::new(SystemClock), timeout, seed())
    }

    /// A budget of `timeout` from the clock's now, with this seed (a test's clock).
    pub fn on(clock: Arc<dyn Clock>, timeout: Duration, seed: u64) -> Budget {
        Budget {
            deadline: clock.now() + timeout,
            seed,
            clock,
        }
    }

    /// The same budget ending at `limit` from now, if that is sooner (a wait with a limit of
    /// its own, such as `wait_for_ip`).
    pub fn within(&self, limit: Duration) -> Budget {
        Budget {
            deadline: self.deadline.min(self.clock.now() + limit),
            ..self.clone()
        }
    }

    /// The same budget lasting at least `grace` from now (a cleanup's requests).
    pub fn extended(&self, grace: Duration) -> Budget {
        Budget {
            deadline: self.deadline.max(self.clock.now() + grace),
            ..self.clone()
        }
    }

    /// What is left of it.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(self.clock.now())
    }

    /// Whether it is spent.
    pub fn spent(&self) -> bool {
        self.left().is_zero()
    }

    /// The seed of its jittered pauses.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Now, on its clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Sleeps `pause`, but not past the deadline; a signal ends it early with
    /// [`Interrupted`].
    pub fn pause(&self, pause: Duration) -> Result<(), Interrupted> {
        if self.clock.sleep(pause.min(self.left())) {
            Ok(())
        } else {
            Err(Interrupted(interrupt::received().unwrap_or("a signal")))
        }
    }
}

/// A number that differs between processes, for jitter.
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos() as u64)
        .unwrap_or(0);
    now ^ ((std::process::id() as u64) << 32)
}

/// A clock for tests: its sleeps move its time forward at once and are recorded.
#[cfg(test)]
pub(crate) mod test_clock {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// See the module.
    pub(crate) struct TestClock {
        now: Mutex<Instant>,
        pub(crate) slept: Mutex<Vec<Duration>>,
        /// After this many sleeps, a sleep reports a signal.
        pub(crate) signal_after: Option<usize>,
    }

    impl TestClock {
        pub(crate) fn new(signal_after: Option<usize>) -> Arc<TestClock> {
            Arc::new(TestClock {
                now: Mutex::new(Instant::now()),
                slept: Mutex::new(Vec::new()),
                signal_after,
            })
        }

        pub(crate) fn slept(&self) -> Vec<Duration> {
            self.slept.lock().unwrap().clone()
        }
    }

    impl super::Clock for TestClock {
        fn now(&self) -> Instant {
            *self.now.lock().unwrap()
        }

        fn sleep(&self, pause: Duration) -> bool {
            let mut slept = self.slept.lock().unwrap();
            if self.signal_after.is_some_and(|after| slept.len() >= after) {
                return false;
            }
            slept.push(pause);
            *self.now.lock().unwrap() += pause;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_clock::TestClock;
    use super::*;

    #[test]
    fn a_pause_never_outlasts_the_budget() {
        let clock = TestClock::new(None);
        let budget = Budget::on(clock.clone(), Duration::from_millis(300), 1);
        budget.pause(Duration::from_millis(200)).unwrap();
        budget.pause(Duration::from_millis(200)).unwrap();
        assert!(budget.spent());
        assert_eq!(
            clock.slept(),
            vec![Duration::from_millis(200), Duration::from_millis(100)]
        );
    }

    #[test]
    fn a_narrowed_budget_ends_first_and_an_extended_one_later() {
        let clock = TestClock::new(None);
        let budget = Budget::on(clock.clone(), Duration::from_secs(10), 1);
        assert_eq!(
            budget.within(Duration::from_secs(2)).left(),
            Duration::from_secs(2)
        );
        assert_eq!(
            budget.within(Duration::from_secs(20)).left(),
            Duration::from_secs(10)
        );
        assert_eq!(
            budget.extended(Duration::from_secs(30)).left(),
            Duration::from_secs(30)
        );
        assert_eq!(
            budget.extended(Duration::from_secs(1)).left(),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn a_signal_ends_a_pause() {
        let clock = TestClock::new(Some(0));
        let budget = Budget::on(clock, Duration::from_secs(10), 1);
        assert!(budget.pause(Duration::from_secs(1)).is_err());
    }
}
