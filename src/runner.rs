//! One module run's shell, shared by every module: the wait settings (parsed once), the
//! client, the run's deadline, the tasks waited on, and the keys every result carries
//! (`tasks`, `elapsed`, `api_requests`, warnings). A module's logic plans and executes steps
//! on a [`Session`].

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Map, Value, json};

use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::ansible::spec::{Kind, Opt, given};
use crate::ansible::text::quote;
use crate::connection::Warned;
use crate::pve::api::Task;
use crate::pve::budget::Budget;
use crate::pve::client::Client;
use crate::pve::error::{ApiError, task_refused_before_acting};
use crate::pve::tasks::{TAIL_LINES, TaskReport, WaitError, wait_task};
use crate::pve::upid::Upid;
use crate::pve::wait::{Exit, Policy};

/// The task-wait options.
pub fn wait_options(default_timeout: &'static str) -> Vec<Opt> {
    vec![
        Opt::new("timeout", Kind::Duration).default(json!(default_timeout)),
        Opt::new("stop_task_on_timeout", Kind::Bool).default(json!(false)),
        Opt::new("poll_interval", Kind::Duration).default(json!("100ms")),
    ]
}

/// The shortest and longest `poll_interval` accepted.
const POLL_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(60));

/// The `poll_interval` option, checked (an error that names it, found before any request).
pub fn poll_interval(inv: &Invocation) -> anyhow::Result<Duration> {
    let poll = inv.duration("poll_interval").map_err(anyhow::Error::msg)?;
    let text = inv.str("poll_interval").unwrap_or_default();
    let (min, max) = POLL_INTERVAL_RANGE;
    if poll < min || poll > max {
        bail!(
            "poll_interval must be between 50ms and 60s, got {text}",
            text = quote(text)
        );
    }
    Ok(poll)
}

/// The task-wait options of a run, parsed once.
#[derive(Clone, Copy, Debug)]
pub struct WaitSettings {
    /// `timeout`: the whole run's deadline, counted from its start.
    pub timeout: Duration,
    /// `stop_task_on_timeout`.
    pub stop_on_timeout: bool,
    /// `poll_interval`: the cap of the short polls.
    pub poll_interval: Duration,
}

impl WaitSettings {
    /// The settings from the validated arguments.
    pub fn from_invocation(inv: &Invocation) -> anyhow::Result<WaitSettings> {
        Ok(WaitSettings {
            timeout: inv.duration("timeout").map_err(anyhow::Error::msg)?,
            stop_on_timeout: given(inv.bool("stop_task_on_timeout"), "stop_task_on_timeout")
                .map_err(anyhow::Error::msg)?,
            poll_interval: poll_interval(inv)?,
        })
    }
}

/// A module run: its budget (`timeout` from the start, made here once and handed down to the
/// client, every retry and poll loop and every task wait's policy), the client, and what the
/// run waited on.
pub struct Session {
    pub budget: Budget,
    pub client: Client,
    pub started: Instant,
    pub settings: WaitSettings,
    pub log: TaskLog,
}

impl Session {
    /// Parses the wait settings and connects (a password login happens here).
    pub fn start(inv: &Invocation) -> anyhow::Result<Session> {
        let started = Instant::now();
        let settings = WaitSettings::from_invocation(inv)?;
        let budget = Budget::new(settings.timeout);
        let (client, warnings) = crate::connection::connect(inv, &budget)?;
        Ok(Session {
            budget,
            client,
            started,
            settings,
            log: TaskLog {
                tasks: Vec::new(),
                warnings,
            },
        })
    }

    /// The wait policy for what is left of the run's budget; `copies` when the task is
    /// expected to copy a disk and report progress.
    pub fn policy(&self, copies: bool) -> Policy {
        Policy::for_budget(&self.budget)
            .with_cap(self.settings.poll_interval)
            .expecting_progress(copies)
    }

    /// Waits for a task; `what` names the operation in messages. A task that reports a
    /// copy's progress is allowed for the copy.
    pub fn wait(&mut self, task: &Task, what: &str) -> Result<TaskReport, TaskFailed> {
        let policy = self.policy(task.reports_progress);
        self.log.wait(
            &mut self.client,
            &task.upid,
            &policy,
            self.settings.stop_on_timeout,
            what,
        )
    }

    /// The keys every result carries: the tasks, the run's duration, and (`api_requests`) the
    /// requests made.
    fn common_keys(&self) -> Vec<(&'static str, Value)> {
        let tasks: Vec<Value> = self.log.tasks.iter().map(task_json).collect();
        let elapsed = (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        vec![
            ("tasks", json!(tasks)),
            ("elapsed", json!(elapsed)),
            ("api_requests", json!(self.client.requests())),
        ]
    }

    /// Completes a run's result with the common keys and the warnings of its tasks; a
    /// failure (see [`failure`]) also gets `changed` and the module's `keys` (the vmid or
    /// volid it was about).
    pub fn finish(
        self,
        result: anyhow::Result<Outcome>,
        changed: bool,
        keys: &[(&str, Value)],
    ) -> Result<Outcome, Failure> {
        let common = self.common_keys();
        match result {
            Ok(mut o) => {
                for (k, v) in common {
                    o.data.insert(k.into(), v);
                }
                o.warnings.extend(self.log.warnings);
                Ok(o)
            }
            Err(error) => {
                let mut f = failure(error);
                f.changed = changed;
                for (k, v) in keys {
                    f.data.entry(*k).or_insert_with(|| v.clone());
                }
                for (k, v) in common {
                    f.data.insert(k.into(), v);
                }
                f.warnings.extend(self.log.warnings);
                Err(f)
            }
        }
    }
}

/// Turns an error chain into Ansible's failed result: the one place where that happens.
///
/// The message is the chain from the outermost context (what was being done, to which VM,
/// on which node) to what PVE said, each joined with `: `. An error of the `pve` crate
/// already says what its own source said (ureq's, a parser's), so the chain stops there;
/// a cause whose text its parent already quotes is not repeated. A task that ended badly
/// adds its keys (UPID, exit status, log tail, progress); warnings raised before the error
/// are kept.
pub fn failure(error: anyhow::Error) -> Failure {
    let mut msg = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !text.is_empty() && !msg.contains(&text) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&text);
        }
        if cause.is::<ApiError>() || cause.is::<WaitError>() || cause.is::<TaskFailed>() {
            break;
        }
    }
    let mut f = Failure::msg(msg);
    if let Some(task) = error.downcast_ref::<TaskFailed>() {
        f.data.extend(task.keys());
    }
    if let Some(warned) = error.downcast_ref::<Warned>() {
        f.warnings.extend(warned.warnings.iter().cloned());
    }
    f
}

/// A task as the module reports it (`tasks` in every result).
pub fn task_json(report: &TaskReport) -> Value {
    let mut v = json!({"type": report.upid.task_type, "upid": report.upid.text, "node": report.upid.node,
           "exitstatus": report.exitstatus, "duration": (report.waited.as_secs_f64() * 1000.0).round() / 1000.0,
           "requests": report.requests});
    if let Some(p) = &report.progress {
        v["progress"] = json!({"history": p.history, "copy_seconds": p.copy_seconds,
               "finishing_seconds": p.finishing_seconds, "rate_mib_s": p.rate_mib_s});
    }
    v
}

/// A wait on a task that ended badly: its message, what PVE said of the task (its report, or
/// how the wait ended), and whether PVE's worker refused before changing anything (the caller
/// re-reads and re-plans). The keys of the failed result (UPID, exit status, log tail) are
/// read from the typed report only in [`failure`].
#[derive(Debug)]
pub struct TaskFailed {
    pub message: String,
    pub refused_before_acting: bool,
    /// PVE's exit status, when the task ended (not when the wait did).
    pub exitstatus: Option<String>,
    /// How the task, or the wait on it, ended.
    pub ended: TaskEnd,
    /// Why a task that acted failed (see `pve::error::task_acted_then_failed`), when the
    /// module tried it again and gave up: the failed result's `cause`.
    pub cause: Option<String>,
}

/// How a failed wait on a task ended.
#[derive(Debug)]
pub enum TaskEnd {
    /// The task stopped with an error: PVE's report of it.
    Failed(TaskReport),
    /// The wait ended first (a timeout, an interruption, a task that vanished, a request
    /// refused).
    Wait(WaitError),
}

impl TaskFailed {
    /// The last lines of the task's log the wait read (PVE's `GET …/log`), oldest first.
    pub fn log_tail(&self) -> Vec<String> {
        match &self.ended {
            TaskEnd::Failed(report) => report.tail(TAIL_LINES),
            TaskEnd::Wait(WaitError::TimedOut { tail, .. }) => tail.clone(),
            TaskEnd::Wait(_) => Vec::new(),
        }
    }

    /// The keys the failed result carries: the UPID; the exit status and log tail of a task
    /// that ended; what a timed-out wait saw; the cause of a failure that acted.
    fn keys(&self) -> Map<String, Value> {
        let mut keys = Map::new();
        match &self.ended {
            TaskEnd::Failed(report) => {
                keys.insert("upid".into(), json!(report.upid.text));
                keys.insert("exitstatus".into(), json!(report.exitstatus));
                keys.insert("log_tail".into(), json!(report.tail(TAIL_LINES)));
            }
            TaskEnd::Wait(WaitError::TimedOut {
                upid,
                elapsed,
                progress,
                tail,
                ..
            }) => {
                keys.insert("upid".into(), json!(upid.text));
                keys.insert("waited".into(), json!(elapsed.as_secs_f64()));
                keys.insert("progress".into(), json!(progress));
                keys.insert("log_tail".into(), json!(tail));
            }
            TaskEnd::Wait(
                WaitError::Vanished { upid }
                | WaitError::Interrupted { upid, .. }
                | WaitError::Api { upid, .. },
            ) => {
                keys.insert("upid".into(), json!(upid.text));
            }
            TaskEnd::Wait(_) => {}
        }
        if let Some(cause) = &self.cause {
            keys.insert("cause".into(), json!(cause));
        }
        keys
    }
}

impl fmt::Display for TaskFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TaskFailed {}

/// What the module layer adds to a timed-out wait's message: the options the user can set.
fn timeout_hint(stopped: Option<&Result<String, String>>) -> &'static str {
    match stopped {
        Some(Ok(_)) => " (stop_task_on_timeout)",
        Some(Err(_)) => "",
        None => ": raise timeout, or re-run to wait for it again",
    }
}

/// The tasks a run waited for and the warnings they raised; turns a wait that ends badly into
/// a failed task carrying the UPID, exit status, progress and log tail.
#[derive(Default)]
pub struct TaskLog {
    pub tasks: Vec<TaskReport>,
    pub warnings: Vec<String>,
}

impl TaskLog {
    /// Waits for a task; `what` names the operation in messages ("creating VM 100 on pve1").
    pub fn wait(
        &mut self,
        client: &mut Client,
        upid: &Upid,
        policy: &Policy,
        stop_on_timeout: bool,
        what: &str,
    ) -> Result<TaskReport, TaskFailed> {
        match wait_task(client, upid, policy, stop_on_timeout) {
            Ok(r) => {
                for w in &r.warnings {
                    self.warnings.push(format!("{what}: {w}"));
                }
                if let (true, Exit::Warnings(n)) = (r.warnings.is_empty(), &r.exit) {
                    self.warnings
                        .push(format!("{what}: task {} ended with {n} warning(s)", r.upid));
                }
                self.tasks.push(r.clone());
                Ok(r)
            }
            Err(WaitError::Failed(r)) => {
                self.tasks.push(r.clone());
                Err(TaskFailed {
                    message: format!("{what} failed: {}", r.exitstatus),
                    refused_before_acting: task_refused_before_acting(&r.exitstatus),
                    exitstatus: Some(r.exitstatus.clone()),
                    ended: TaskEnd::Failed(r),
                    cause: None,
                })
            }
            Err(e) => {
                let hint = match &e {
                    WaitError::TimedOut { stopped, .. } => timeout_hint(stopped.as_ref()),
                    _ => "",
                };
                Err(TaskFailed {
                    message: format!("{what}: {e}{hint}"),
                    refused_before_acting: false,
                    exitstatus: None,
                    ended: TaskEnd::Wait(e),
                    cause: None,
                })
            }
        }
    }
}
