//! Operations named by their retry semantics (after bpg's provider):
//!
//! * [`read`]: a GET, retried on transient errors until the deadline.
//! * [`dispatch`]: a request that starts a task and answers its UPID. It is sent again only
//!   when PVE surely did not carry it out (refused, locked, never sent). When the answer is
//!   lost after PVE may have acted (a dropped connection, a 596), `recover` looks for the task
//!   it started instead, so a UPID-returning request is never carried out twice.
//!
//! Waiting on the UPID is [`super::tasks::wait_task`].

use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{Client, Method, Params};
use super::error::ApiError;
use super::upid::Upid;
use crate::interrupt;

/// Back-off before retry `attempt` (1-based): 250 ms doubling to 4 s, with a little jitter so
/// parallel runs do not retry in step.
pub fn backoff(attempt: u32, jitter_seed: u64) -> Duration {
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
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ ((std::process::id() as u64) << 32)
}

fn pause(d: Duration, deadline: Instant) -> Result<(), ApiError> {
    let d = d.min(deadline.saturating_duration_since(Instant::now()));
    if interrupt::sleep(d) {
        Ok(())
    } else {
        Err(ApiError::Interrupted {
            signal: interrupt::received().unwrap_or("a signal"),
            what: String::new(),
        })
    }
}

/// How many unexplained 500s a read tries again.
const MAX_500_RETRIES: u32 = 3;

/// A GET retried on transient errors until `deadline` (an unexplained 500 a few times).
pub fn read(
    client: &Client,
    path: &str,
    params: &Params,
    deadline: Instant,
) -> Result<Value, ApiError> {
    let s = seed();
    let mut attempt = 0;
    let mut five_hundreds = 0;
    loop {
        match client.get(path, params) {
            Err(e)
                if (e.is_transient()
                    || (e.is_unexplained_500() && five_hundreds < MAX_500_RETRIES))
                    && Instant::now() < deadline =>
            {
                if e.is_unexplained_500() {
                    five_hundreds += 1;
                }
                attempt += 1;
                pause(backoff(attempt, s), deadline)?;
            }
            other => return other,
        }
    }
}

/// The result of a dispatch.
#[derive(Debug)]
pub enum Dispatched {
    /// PVE started this task.
    Task(Upid),
    /// PVE answered `null`: the work finished within the request (`background_delay`).
    Done,
}

/// Sends a task-starting request. See the module documentation for the retry rule.
/// `recover` is asked, after an ambiguous failure, for the task the request may have started.
pub fn dispatch(
    client: &Client,
    method: Method,
    path: &str,
    params: &Params,
    deadline: Instant,
    mut recover: impl FnMut() -> Option<Upid>,
) -> Result<Dispatched, ApiError> {
    let s = seed();
    let mut attempt = 0;
    loop {
        let err = match client.write(method, path, params) {
            Ok(Value::String(u)) => {
                return Upid::parse(&u)
                    .map(Dispatched::Task)
                    .map_err(|e| ApiError::NotPve {
                        detail: format!("PVE answered {e}"),
                    });
            }
            Ok(Value::Null) => {
                // A null where a UPID was due: a task may still have been started.
                return Ok(recover().map(Dispatched::Task).unwrap_or(Dispatched::Done));
            }
            Ok(other) => {
                return Err(ApiError::NotPve {
                    detail: format!("unexpected answer to {path}: {other}"),
                });
            }
            Err(e) => e,
        };
        let retryable = err.is_lock_contention()
            || matches!(err, ApiError::Transport { sent: false, .. })
            || matches!(err.status(), Some(595));
        if !err.surely_not_done() {
            if !err.is_transient() {
                return Err(err);
            }
            // The answer was lost: did PVE start the task anyway?
            if let Some(upid) = recover() {
                return Ok(Dispatched::Task(upid));
            }
        } else if !retryable {
            return Err(err);
        }
        if Instant::now() >= deadline {
            return Err(err);
        }
        attempt += 1;
        pause(backoff(attempt, s), deadline)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let d: Vec<u128> = (1..=8).map(|a| backoff(a, 42).as_millis()).collect();
        assert!(d[0] >= 250 && d[0] <= 313, "{d:?}");
        assert!(d[1] >= 500 && d[2] >= 1000 && d[3] >= 2000);
        assert!(d.iter().all(|x| *x <= 5000), "{d:?}");
        assert_ne!(backoff(3, 1), backoff(3, 2));
    }
}
