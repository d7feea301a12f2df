//! Operations named by their retry semantics (after bpg's provider):
//!
//! * [`read`]: a GET, retried on transient errors until the deadline.
//! * [`dispatch`]: a request that starts a task and answers its UPID. It is sent again only
//!   when PVE surely did not carry it out (refused, locked, never sent). When the answer is
//!   lost after PVE may have acted (a dropped connection, a 596), `recover` looks for the task
//!   it started instead, so a UPID-returning request is never carried out twice.
//!
//! * [`dispatch_once`]: the same for a request that makes something new (a VM, by a create
//!   or a clone), which is never sent again once PVE may have seen it: after a lost answer it
//!   only looks, until it finds the task or PVE's record shows the request was not carried
//!   out (the look is the caller's: [`super::api::made`]).
//!
//! When the deadline ends tries that all failed on the way, the error says so
//! ([`ApiError::Unanswered`]: who did not answer, how often, for how long, what the last try
//! got), not merely that the time was up.
//!
//! Waiting on the UPID is [`super::tasks::wait_task`]; how long to pause between tries is
//! [`super::retry`], whose loop ([`super::retry::until`]) every class goes through. All of
//! them stop when the run's budget, which the client was given, is spent.

use std::convert::Infallible;
use std::time::Instant;

use serde_json::Value;

use super::client::{Client, Method, Params};
use super::error::ApiError;
use super::retry::{Awaiting, Interrupted, Step, until};
use super::upid::Upid;

/// The end of a loop whose tries carry their errors in its value: that value, or the error
/// of a pause a signal ended.
fn ended<T>(result: Result<Result<T, Infallible>, Interrupted>) -> Result<T, ApiError> {
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(never)) => match never {},
        Err(Interrupted(signal)) => Err(ApiError::Interrupted {
            signal,
            what: String::new(),
        }),
    }
}

/// Failed tries of one request in a row, for the error when the deadline ends them.
struct Trouble {
    since: Instant,
    tries: u32,
    last: Option<ApiError>,
}

impl Trouble {
    fn new() -> Trouble {
        Trouble {
            since: Instant::now(),
            tries: 0,
            last: None,
        }
    }

    fn note(&mut self, err: &ApiError) {
        if self.tries == 0 {
            self.since = Instant::now();
        }
        self.tries += 1;
        self.last = Some(err.clone());
    }

    /// The error that ends the tries of `method path`: when the deadline ended them after
    /// failures on the way, those failures ([`ApiError::Unanswered`]), else `e` itself.
    fn explain(&self, method: Method, path: &str, err: ApiError) -> ApiError {
        let at_deadline = matches!(err, ApiError::DeadlineReached { .. });
        let (tries, last) = match (at_deadline, self.last.clone()) {
            (true, Some(last)) => (self.tries, last),
            (false, Some(_)) if err.is_transient() => (self.tries + 1, err),
            _ => return err,
        };
        ApiError::Unanswered {
            what: format!("{} {path}", method.as_str()),
            tries,
            lasted: self.since.elapsed(),
            last: Box::new(last),
        }
    }
}

/// How many unexplained 500s a read tries again.
const MAX_500_RETRIES: u32 = 3;

/// A GET retried on transient errors until the client's deadline (an unexplained 500 a few
/// times).
pub fn read(client: &Client, path: &str, params: &Params) -> Result<Value, ApiError> {
    let mut five_hundreds = 0;
    let mut trouble = Trouble::new();
    ended(until(client.budget(), Awaiting::Transient, |_| {
        match client.get(path, params) {
            Err(e)
                if e.is_transient()
                    || (e.is_unexplained_500() && five_hundreds < MAX_500_RETRIES) =>
            {
                if e.is_unexplained_500() {
                    five_hundreds += 1;
                }
                let ended = trouble.explain(Method::Get, path, e.clone());
                trouble.note(&e);
                // Past the deadline, an unexplained 500 is what PVE said; a transient error
                // is explained by the tries before it.
                Ok(Step::Again(Err(if e.is_transient() { ended } else { e })))
            }
            Err(e) if matches!(e, ApiError::DeadlineReached { .. }) => {
                Ok(Step::Done(Err(trouble.explain(Method::Get, path, e))))
            }
            other => Ok(Step::Done(other)),
        }
    }))?
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
    let mut trouble = Trouble::new();
    ended(until(client.budget(), Awaiting::Transient, |_| {
        let err = match client.write(method, path, params) {
            Ok(Value::String(answer)) => return Ok(Step::Done(started(&answer))),
            Ok(Value::Null) => {
                // A null where a UPID was due: a task may still have been started.
                let done = recover().map(Dispatched::Task).unwrap_or(Dispatched::Done);
                return Ok(Step::Done(Ok(done)));
            }
            Ok(other) => return Ok(Step::Done(Err(unexpected(path, &other)))),
            Err(e) => e,
        };
        let retryable = worth_sending_again(&err);
        if !err.surely_not_done() {
            if !err.is_transient() {
                return Ok(Step::Done(Err(err)));
            }
            // The answer was lost: did PVE start the task anyway?
            if let Some(upid) = recover() {
                return Ok(Step::Done(Ok(Dispatched::Task(upid))));
            }
        } else if !retryable {
            return Ok(Step::Done(Err(trouble.explain(method, path, err))));
        }
        let ended = trouble.explain(method, path, err.clone());
        trouble.note(&err);
        Ok(Step::Again(Err(ended)))
    }))?
}

/// The task a dispatch started, from PVE's answer (a UPID).
fn started(answer: &str) -> Result<Dispatched, ApiError> {
    Upid::parse(answer)
        .map(Dispatched::Task)
        .map_err(|e| ApiError::NotPve {
            source: None,
            detail: format!("PVE answered {e}"),
        })
}

/// One write that starts no task (an HA resource, an HA rule), sent again only when PVE
/// surely did not carry it out because of a lock.
pub fn write_unless_locked(
    client: &Client,
    method: Method,
    path: &str,
    params: &Params,
) -> Result<(), ApiError> {
    let outcome = until(client.budget(), Awaiting::Transient, |_| {
        match client.write(method, path, params) {
            Ok(_) => Ok(Step::Done(Ok(()))),
            Err(e) if e.is_lock_contention() => Ok(Step::Again(Err(e))),
            Err(e) => Err(e),
        }
    });
    match outcome {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(locked)) | Err(locked)) => Err(locked),
        Err(Interrupted(signal)) => Err(ApiError::Interrupted {
            signal,
            what: format!("{} {path}", method.as_str()),
        }),
    }
}

/// A dispatch's answer that is neither a UPID nor `null`.
fn unexpected(path: &str, answer: &Value) -> ApiError {
    ApiError::NotPve {
        source: None,
        detail: format!("unexpected answer to {path}: {answer}"),
    }
}

/// Whether a request PVE surely did not carry out is worth sending again: a lock held, a
/// request never sent, or pveproxy's 595 (it could not reach the node).
fn worth_sending_again(err: &ApiError) -> bool {
    err.is_lock_contention()
        || matches!(err, ApiError::Transport { sent: false, .. })
        || matches!(err.status(), Some(595))
}

/// What a look for the task of a request whose answer was lost found.
#[derive(Debug)]
pub enum Look {
    /// The task the request started (PVE's record proves it: see the caller).
    Found(Upid),
    /// Nothing yet, or the look itself failed (why): look again, until the deadline.
    Again(String),
    /// PVE's record shows the request was not carried out, or not by this run (what it
    /// shows).
    NotDone(String),
}

/// Sends a request that makes something new (a VM) at most once: sent again only when PVE
/// surely did not carry it out (refused, locked, never sent, 595); once PVE may have seen it
/// and the answer was lost, `look` is asked, spaced out, until it finds the task the request
/// started or PVE's record shows it was not carried out, or the deadline comes. The request
/// itself is never sent again then, whatever the outage, the clock or the errors.
pub fn dispatch_once(
    client: &Client,
    method: Method,
    path: &str,
    params: &Params,
    mut look: impl FnMut() -> Look,
) -> Result<Dispatched, ApiError> {
    let budget = client.budget();
    let mut trouble = Trouble::new();
    let sent = ended(until(budget, Awaiting::Transient, |_| {
        Ok(match client.write(method, path, params) {
            Ok(Value::String(answer)) => Step::Done(Sent::Ended(started(&answer))),
            // A null where a UPID was due: the work may have been done within the request.
            Ok(Value::Null) => Step::Done(Sent::Ended(Ok(match look() {
                Look::Found(upid) => Dispatched::Task(upid),
                Look::Again(_) | Look::NotDone(_) => Dispatched::Done,
            }))),
            Ok(other) => Step::Done(Sent::Ended(Err(unexpected(path, &other)))),
            Err(e) if e.surely_not_done() => {
                let gave_up = Sent::Ended(Err(trouble.explain(method, path, e.clone())));
                if !worth_sending_again(&e) {
                    return Ok(Step::Done(gave_up));
                }
                trouble.note(&e);
                Step::Again(gave_up)
            }
            Err(e) if e.is_transient() => Step::Done(Sent::Lost(e)),
            Err(e) => Step::Done(Sent::Ended(Err(e))),
        })
    }))?;
    let lost = match sent {
        Sent::Ended(result) => return result,
        Sent::Lost(lost) => lost,
    };
    let what = format!("{} {path}", method.as_str());
    let answer_lost = |finding: String| ApiError::AnswerLost {
        what: what.clone(),
        error: Box::new(lost.clone()),
        finding,
    };
    ended(until(budget, Awaiting::LostAnswer, |_| {
        Ok(match look() {
            Look::Found(upid) => Step::Done(Ok(Dispatched::Task(upid))),
            Look::NotDone(finding) => Step::Done(Err(answer_lost(finding))),
            Look::Again(why) => Step::Again(Err(answer_lost(format!(
                "PVE's record did not show what it did before the run's timeout (the last look: {why})"
            )))),
        })
    }))?
}

/// How a request sent at most once ended: with its result, or with its answer lost (the
/// error) after PVE may have seen it.
enum Sent {
    Ended(Result<Dispatched, ApiError>),
    Lost(ApiError),
}
