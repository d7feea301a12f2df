//! One module run's shell, shared by every module: the wait settings (parsed once), the
//! client, the run's deadline, the tasks waited on, and the keys every result carries
//! (`tasks`, `elapsed`, `api_requests`, warnings). A module's logic plans and executes steps
//! on a [`Session`].

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::ansible::spec::{Kind, Opt, given};
use crate::ansible::text::quote;
use crate::pve::api::Task;
use crate::pve::client::Client;
use crate::pve::error::task_refused_before_acting;
use crate::pve::tasks::{TAIL_LINES, TaskReport, WaitError, wait_task};
use crate::pve::upid::Upid;
use crate::pve::wait::{Exit, Policy};

/// The task-wait options.
pub fn wait_options(default_timeout: &'static str) -> Vec<Opt> {
    vec![
        Opt::new("timeout", Kind::Duration).default(json!(default_timeout)),
        Opt::new("stop_task_on_timeout", Kind::Bool).default(json!(false)),
        Opt::new("poll_interval", Kind::Duration).default(json!("150ms")),
    ]
}

/// The shortest and longest `poll_interval` accepted.
const POLL_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(60));

/// The `poll_interval` option, checked (an error that names it, found before any request).
pub fn poll_interval(inv: &Invocation) -> Result<Duration, Failure> {
    let poll = inv.duration("poll_interval")?;
    let text = inv.str("poll_interval").unwrap_or_default();
    let (min, max) = POLL_INTERVAL_RANGE;
    if poll < min || poll > max {
        return Err(Failure::msg(format!(
            "poll_interval must be between 50ms and 60s, got {text}",
            text = quote(text)
        )));
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
    pub fn from_invocation(inv: &Invocation) -> Result<WaitSettings, Failure> {
        Ok(WaitSettings {
            timeout: inv.duration("timeout")?,
            stop_on_timeout: given(inv.bool("stop_task_on_timeout"), "stop_task_on_timeout")
                .map_err(Failure::msg)?,
            poll_interval: poll_interval(inv)?,
        })
    }
}

/// A module run: the client (which holds the run's deadline, `timeout` from the start, that
/// every request, wait and retry shares), and what the run waited on.
pub struct Session {
    pub client: Client,
    pub started: Instant,
    pub settings: WaitSettings,
    pub log: TaskLog,
}

impl Session {
    /// Parses the wait settings and connects (a password login happens here).
    pub fn start(inv: &Invocation) -> Result<Session, Failure> {
        let started = Instant::now();
        let settings = WaitSettings::from_invocation(inv)?;
        let deadline = started + settings.timeout;
        let (client, warnings) = crate::connection::connect(inv, deadline)?;
        Ok(Session {
            client,
            started,
            settings,
            log: TaskLog {
                tasks: Vec::new(),
                warnings,
            },
        })
    }

    /// The wait policy for the time left; `copies` when the task is expected to copy a disk
    /// and report progress.
    pub fn policy(&self, copies: bool) -> Policy {
        Policy::with_timeout(
            self.client
                .deadline()
                .saturating_duration_since(Instant::now()),
        )
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
        let tasks: Vec<Value> = self.log.tasks.iter().map(TaskReport::to_json).collect();
        let elapsed = (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        vec![
            ("tasks", json!(tasks)),
            ("elapsed", json!(elapsed)),
            ("api_requests", json!(self.client.requests())),
        ]
    }

    /// Completes a run's result with the common keys and the warnings of its tasks.
    pub fn finish(
        self,
        result: Result<Outcome, Failure>,
        changed: bool,
    ) -> Result<Outcome, Failure> {
        let keys = self.common_keys();
        match result {
            Ok(mut o) => {
                for (k, v) in keys {
                    o.data.insert(k.into(), v);
                }
                o.warnings.extend(self.log.warnings);
                Ok(o)
            }
            Err(mut f) => {
                f.changed = f.changed || changed;
                for (k, v) in keys {
                    f.data.insert(k.into(), v);
                }
                f.warnings.extend(self.log.warnings);
                Err(f)
            }
        }
    }
}

/// A wait on a task that ended badly: the failed result (UPID, exit status, log tail), and
/// whether PVE's worker refused before changing anything (the caller re-reads and re-plans).
pub struct TaskFailed {
    pub failure: Failure,
    pub refused_before_acting: bool,
    /// PVE's exit status, when the task ended (not when the wait did).
    pub exitstatus: Option<String>,
}

impl From<TaskFailed> for Failure {
    fn from(t: TaskFailed) -> Failure {
        t.failure
    }
}

/// The tasks a run waited for and the warnings they raised; turns a wait that ends badly into
/// a failed result carrying the UPID, exit status, progress and log tail.
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
                let mut f = Failure::msg(format!("{what} failed: {}", r.exitstatus));
                f.data.insert("upid".into(), json!(r.upid.text));
                f.data.insert("exitstatus".into(), json!(r.exitstatus));
                f.data.insert("log_tail".into(), json!(r.tail(TAIL_LINES)));
                let refused_before_acting = task_refused_before_acting(&r.exitstatus);
                let exitstatus = Some(r.exitstatus.clone());
                self.tasks.push(r);
                Err(TaskFailed {
                    failure: f,
                    refused_before_acting,
                    exitstatus,
                })
            }
            Err(e) => {
                let mut f = Failure::msg(format!("{what}: {e}"));
                match &e {
                    WaitError::TimedOut {
                        upid,
                        elapsed,
                        progress,
                        tail,
                        ..
                    } => {
                        f.data.insert("upid".into(), json!(upid.text));
                        f.data.insert("waited".into(), json!(elapsed.as_secs_f64()));
                        f.data.insert("progress".into(), json!(progress));
                        f.data.insert("log_tail".into(), json!(tail));
                    }
                    WaitError::Vanished { upid }
                    | WaitError::Interrupted { upid, .. }
                    | WaitError::Api { upid, .. } => {
                        f.data.insert("upid".into(), json!(upid.text));
                    }
                    WaitError::Failed(_) => {}
                }
                Err(TaskFailed {
                    failure: f,
                    refused_before_acting: false,
                    exitstatus: None,
                })
            }
        }
    }
}
