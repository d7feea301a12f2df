//! Every pause a run makes between two tries, named once for what it waits for, on one
//! back-off curve, and the one loop helper ([`until`]) every retry and poll loop of the
//! modules goes through: it honours signals and never outlasts the run's [`Budget`].
//!
//! [`crate::ops`] decides *whether* a request is tried again (its retry class); this file
//! decides *how long* to wait first. The spacing of a task wait's looks is the policy in
//! [`crate::wait`] (pure); its pause after a failed look is [`Awaiting::Transient`]'s.

use std::time::Duration;

pub use crate::budget::{Budget, Interrupted, seed};

/// What a pause waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaiting {
    /// A transient failure to pass (a restart of pveproxy, a dropped connection, a lock
    /// another request holds): 250 ms doubling to 4 s, with a little jitter.
    Transient,
    /// A plan PVE refused because the VM changed meanwhile (another run, a backup) to be
    /// tried again: as [`Awaiting::Transient`], its growth stopped at 2 s (plus jitter).
    StalePlan,
    /// Another free vmid after a parallel run took the one `nextid` gave: a short, jittered
    /// pause (0.4 × [`Awaiting::Transient`], its growth stopped at 1 s), so runs that
    /// collided do not collide again.
    FreeVmid,
    /// The task of a request whose answer was lost to show in PVE's record: as
    /// [`Awaiting::Transient`], its growth stopped at 1 s (plus jitter).
    LostAnswer,
    /// A lock no visible task holds to be released (its holder may be starting up): 250 ms.
    LockHeld,
    /// Creates in flight (this user's) to end, so that the VMs carrying a name settle: 500 ms
    /// doubling to 2 s (plus jitter). They are other runs' creates (a fleet's, or an earlier
    /// run's import that may take minutes): noticing their end a few seconds late costs a run
    /// little, and looking every 500 ms for minutes cost a fleet of imports tens of requests
    /// per VM.
    NameSettling,
    /// Parallel runs that each created a VM of one name to remove all but the first: 1 s.
    DuplicateNames,
    /// The guest agent to come up and report an address: 1 s.
    AgentNotUp,
    /// The HA stack to carry out a requested migration (its LRM starts the `qmigrate` in its
    /// next round, within 10 s): 1 s.
    HaMotion,
    /// The HA stack to carry out a request it was handed (`hastart`, `hastop`): its CRM and
    /// LRM work in rounds of about 10 s (pve-ha-manager CRM.pm, LRM.pm), so the VM's state
    /// is read again at 250 ms doubling to 2 s (plus jitter), not in a tight loop.
    HaRound,
    /// A task that acted and then failed (a shutdown the guest ignored, a slow resize) to be
    /// tried once more (only once: see the `vm` module's `execute`): 1 s, with a little
    /// jitter.
    ActedThenFailed,
}

impl Awaiting {
    /// The pause before try `attempt` (1-based); `seed` jitters the growing ones so parallel
    /// runs do not retry in step.
    pub fn pause(self, attempt: u32, seed: u64) -> Duration {
        match self {
            Awaiting::Transient => backoff(attempt, seed),
            Awaiting::StalePlan => backoff(attempt.min(4), seed.wrapping_add(attempt as u64)),
            Awaiting::FreeVmid => backoff(attempt.min(3), seed).mul_f64(0.4),
            Awaiting::LostAnswer => backoff(attempt.min(3), seed),
            Awaiting::LockHeld => Duration::from_millis(250),
            Awaiting::NameSettling => backoff(attempt.saturating_add(1).min(4), seed),
            Awaiting::DuplicateNames | Awaiting::AgentNotUp | Awaiting::HaMotion => {
                Duration::from_secs(1)
            }
            Awaiting::HaRound => backoff(attempt.min(4), seed.wrapping_add(attempt as u64)),
            Awaiting::ActedThenFailed => backoff(3, seed),
        }
    }
}

/// The one back-off curve: 250 ms doubling to 4 s, with jitter of up to a quarter (a task
/// wait's pause after a failed look is on it too, see [`crate::wait`]).
fn backoff(attempt: u32, jitter_seed: u64) -> Duration {
    let base = 250u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(4))
        .min(4000);
    let jitter = (jitter_seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(attempt as u64)
        >> 33)
        % (base / 4 + 1);
    Duration::from_millis(base + jitter)
}

/// What one try of a loop led to.
#[derive(Debug)]
pub enum Step<T> {
    /// The loop ends with this.
    Done(T),
    /// Not yet: tried again after the loop's pause; once the budget is spent, the loop ends
    /// with this instead.
    Again(T),
    /// As [`Step::Again`], the pause being for this other wait (a loop that waits for two
    /// things, such as a create's free vmid and a storage lock).
    AgainAs(Awaiting, T),
    /// Again at once, without a pause (the try made progress).
    Now,
}

/// The one retry and poll loop: calls `attempt` with its 1-based try number until it is
/// [`Step::Done`] or errs, pausing after each [`Step::Again`] as `awaiting` asks (the `n`th
/// pause is `awaiting.pause(n, seed)`), never past the budget; when the budget is spent
/// after an `Again`, the loop ends with that try's value. A signal ends a pause, and the
/// loop, with [`Interrupted`].
pub fn until<T, E>(
    budget: &Budget,
    awaiting: Awaiting,
    mut attempt: impl FnMut(u32) -> Result<Step<T>, E>,
) -> Result<Result<T, E>, Interrupted> {
    let mut tries = 0u32;
    let mut pauses = 0u32;
    loop {
        tries = tries.saturating_add(1);
        let (awaits, fallback) = match attempt(tries) {
            Err(error) => return Ok(Err(error)),
            Ok(Step::Done(value)) => return Ok(Ok(value)),
            Ok(Step::Now) => continue,
            Ok(Step::Again(value)) => (awaiting, value),
            Ok(Step::AgainAs(other, value)) => (other, value),
        };
        if budget.spent() {
            return Ok(Ok(fallback));
        }
        pauses = pauses.saturating_add(1);
        budget.pause(awaits.pause(pauses, budget.seed()))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::test_clock::TestClock;

    fn run(
        budget: &Budget,
        awaiting: Awaiting,
        steps: Vec<Step<&'static str>>,
    ) -> (Result<Result<&'static str, ()>, Interrupted>, u32) {
        let mut steps = steps.into_iter();
        let mut calls = 0;
        let result = until(budget, awaiting, |_| {
            calls += 1;
            Ok(steps.next().unwrap_or(Step::Again("spent")))
        });
        (result, calls)
    }

    #[test]
    fn a_loop_pauses_as_its_wait_asks_and_ends_when_done() {
        let clock = TestClock::new(None);
        let budget = Budget::on(clock.clone(), Duration::from_secs(60), 5);
        let steps = vec![
            Step::Again("no"),
            Step::Now,
            Step::AgainAs(Awaiting::LockHeld, "no"),
            Step::Done("yes"),
        ];
        let (result, calls) = run(&budget, Awaiting::AgentNotUp, steps);
        assert_eq!(result, Ok(Ok("yes")));
        assert_eq!(calls, 4);
        assert_eq!(
            clock.slept(),
            vec![Duration::from_secs(1), Duration::from_millis(250)]
        );
    }

    #[test]
    fn a_loop_ends_with_the_last_tries_value_when_the_budget_is_spent() {
        let clock = TestClock::new(None);
        let budget = Budget::on(clock.clone(), Duration::from_millis(2500), 5);
        let (result, calls) = run(&budget, Awaiting::AgentNotUp, vec![]);
        assert_eq!(result, Ok(Ok("spent")));
        // At 0 s, 1 s, 2 s and at the deadline (the last pause cut to 500 ms).
        assert_eq!(calls, 4);
        assert_eq!(clock.slept().last(), Some(&Duration::from_millis(500)));
        assert!(budget.spent());
    }

    #[test]
    fn the_nth_pause_of_a_growing_wait_is_its_nth_step() {
        let clock = TestClock::new(None);
        let budget = Budget::on(clock.clone(), Duration::from_secs(60), 9);
        let steps = vec![Step::Again("no"), Step::Again("no"), Step::Done("yes")];
        run(&budget, Awaiting::Transient, steps).0.unwrap().unwrap();
        assert_eq!(
            clock.slept(),
            vec![
                Awaiting::Transient.pause(1, 9),
                Awaiting::Transient.pause(2, 9)
            ]
        );
    }

    #[test]
    fn an_error_or_a_signal_ends_the_loop() {
        let clock = TestClock::new(Some(1));
        let budget = Budget::on(clock.clone(), Duration::from_secs(60), 1);
        let (result, calls) = run(&budget, Awaiting::HaMotion, vec![]);
        assert!(matches!(result, Err(Interrupted(_))), "{result:?}");
        assert_eq!(calls, 2);
        let failed: Result<Result<(), &str>, Interrupted> =
            until(&budget, Awaiting::HaMotion, |_| Err("refused"));
        assert_eq!(failed, Ok(Err("refused")));
    }

    #[test]
    fn transient_pauses_grow_and_cap() {
        let pauses: Vec<u128> = (1..=8)
            .map(|attempt| Awaiting::Transient.pause(attempt, 42).as_millis())
            .collect();
        assert!(pauses[0] >= 250 && pauses[0] <= 313, "{pauses:?}");
        assert!(pauses[1] >= 500 && pauses[2] >= 1000 && pauses[3] >= 2000);
        assert!(pauses.iter().all(|p| *p <= 5000), "{pauses:?}");
        assert_ne!(
            Awaiting::Transient.pause(3, 1),
            Awaiting::Transient.pause(3, 2)
        );
    }

    #[test]
    fn a_stale_plan_and_a_taken_vmid_wait_less_than_a_transient_failure_at_length() {
        let stale = Awaiting::StalePlan.pause(10, 7);
        assert!(stale < Duration::from_millis(2600), "{stale:?}");
        let free = Awaiting::FreeVmid.pause(10, 7);
        assert!(free < Duration::from_millis(501), "{free:?}");
        assert_eq!(Awaiting::LockHeld.pause(9, 0), Duration::from_millis(250));
    }

    /// The paces the modules' documentation gives for the waits `poll_interval` does not cap
    /// (plugins/modules/vm.yml, docs/docsite/rst/guide_waiting.rst).
    #[test]
    fn the_waits_keep_the_paces_their_documentation_gives() {
        for attempt in [1, 2, 5, 50] {
            assert_eq!(
                Awaiting::LockHeld.pause(attempt, 3),
                Duration::from_millis(250)
            );
            let settling = Awaiting::NameSettling.pause(attempt, 3);
            let base = Duration::from_millis(500 * (1 << (attempt - 1).min(2)));
            assert!(
                settling >= base && settling <= base.mul_f64(1.25),
                "{attempt}: {settling:?}"
            );
            for each_second in [
                Awaiting::DuplicateNames,
                Awaiting::AgentNotUp,
                Awaiting::HaMotion,
            ] {
                assert_eq!(each_second.pause(attempt, 3), Duration::from_secs(1));
            }
            let acted = Awaiting::ActedThenFailed.pause(attempt, 3);
            assert!(acted >= Duration::from_secs(1) && acted <= Duration::from_millis(1250));
        }
        for growing in [Awaiting::HaRound, Awaiting::StalePlan] {
            assert!(growing.pause(1, 3) < Duration::from_millis(313));
            assert!(growing.pause(4, 3) >= Duration::from_secs(2));
            assert!(growing.pause(40, 3) <= Duration::from_millis(2500));
        }
        let lost = Awaiting::LostAnswer.pause(40, 3);
        assert!(lost >= Duration::from_secs(1) && lost <= Duration::from_millis(1250));
        let transient = Awaiting::Transient.pause(40, 3);
        assert!(transient >= Duration::from_secs(4) && transient <= Duration::from_secs(5));
    }

    #[test]
    fn ha_rounds_are_polled_at_most_every_two_and_a_half_seconds() {
        let first = Awaiting::HaRound.pause(1, 3);
        assert!(first >= Duration::from_millis(250), "{first:?}");
        let late = Awaiting::HaRound.pause(30, 3);
        assert!(
            late >= Duration::from_secs(2) && late <= Duration::from_millis(2500),
            "{late:?}"
        );
        assert!(Awaiting::ActedThenFailed.pause(1, 0) >= Duration::from_secs(1));
    }
}
