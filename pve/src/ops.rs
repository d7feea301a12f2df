//! Operations named by their retry semantics (after bpg's provider):
//!
//! * [`read`]: a GET, retried on transient errors until the deadline.
//! * [`dispatch`]: a request that starts a task and answers its UPID. It is sent again only
//!   when PVE surely did not carry it out (refused, locked, never sent). When the answer is
//!   lost after PVE may have acted (a dropped connection, a 596), `recover` looks for the task
//!   it started instead, so a UPID-returning request is never carried out twice.
//!
//! Waiting on the UPID is [`super::tasks::wait_task`]; how long to pause between tries is
//! [`super::retry`]. Both classes stop at the client's deadline.

use std::time::Instant;

use serde_json::Value;

use super::client::{Client, Method, Params};
use super::error::ApiError;
use super::retry::{self, Awaiting, Interrupted};
use super::upid::Upid;

fn pause(attempt: u32, seed: u64, deadline: Instant) -> Result<(), ApiError> {
    retry::pause(Awaiting::Transient.pause(attempt, seed), deadline).map_err(
        |Interrupted(signal)| ApiError::Interrupted {
            signal,
            what: String::new(),
        },
    )
}

/// How many unexplained 500s a read tries again.
const MAX_500_RETRIES: u32 = 3;

/// A GET retried on transient errors until the client's deadline (an unexplained 500 a few
/// times).
pub fn read(client: &Client, path: &str, params: &Params) -> Result<Value, ApiError> {
    let deadline = client.deadline();
    let seed = retry::seed();
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
                pause(attempt, seed, deadline)?;
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
    mut recover: impl FnMut() -> Option<Upid>,
) -> Result<Dispatched, ApiError> {
    let deadline = client.deadline();
    let seed = retry::seed();
    let mut attempt = 0;
    loop {
        let err = match client.write(method, path, params) {
            Ok(Value::String(u)) => {
                return Upid::parse(&u)
                    .map(Dispatched::Task)
                    .map_err(|e| ApiError::NotPve {
                        source: None,
                        detail: format!("PVE answered {e}"),
                    });
            }
            Ok(Value::Null) => {
                // A null where a UPID was due: a task may still have been started.
                return Ok(recover().map(Dispatched::Task).unwrap_or(Dispatched::Done));
            }
            Ok(other) => {
                return Err(ApiError::NotPve {
                    source: None,
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
        pause(attempt, seed, deadline)?;
    }
}
