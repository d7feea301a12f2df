//! Every pause a run makes between two tries, named once for what it waits for, and the one
//! pause helper, which honours signals and never outlasts the time it is given.
//!
//! [`crate::ops`] decides *whether* a request is tried again (its retry class); this file
//! decides *how long* to wait first. The pauses of a task wait are the policy in
//! [`crate::wait`].

use std::time::{Duration, Instant};

use crate::interrupt;

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
    /// A lock no visible task holds to be released (its holder may be starting up): 250 ms.
    LockHeld,
    /// Creates in flight (this user's) to end, so that the VMs carrying a name settle: 500 ms.
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
    /// tried once more: 1 s doubling to 4 s.
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
            Awaiting::LockHeld => Duration::from_millis(250),
            Awaiting::NameSettling => Duration::from_millis(500),
            Awaiting::DuplicateNames | Awaiting::AgentNotUp | Awaiting::HaMotion => {
                Duration::from_secs(1)
            }
            Awaiting::HaRound => backoff(attempt.min(4), seed.wrapping_add(attempt as u64)),
            Awaiting::ActedThenFailed => backoff(attempt.saturating_add(2), seed),
        }
    }
}

/// 250 ms doubling to 4 s, with jitter of up to a quarter.
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

/// A number that differs between processes, for jitter.
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos() as u64)
        .unwrap_or(0);
    now ^ ((std::process::id() as u64) << 32)
}

/// A signal ended a pause: its name ("SIGTERM", "SIGINT").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted(pub &'static str);

/// Sleeps `pause`, but not past `until`; a signal ends it early with [`Interrupted`].
pub fn pause(pause: Duration, until: Instant) -> Result<(), Interrupted> {
    let pause = pause.min(until.saturating_duration_since(Instant::now()));
    if interrupt::sleep(pause) {
        Ok(())
    } else {
        Err(Interrupted(interrupt::received().unwrap_or("a signal")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
