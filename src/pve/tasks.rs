//! Waiting on a task: the shell around the pure policy in `wait.rs`. It polls the task's
//! status and reads its log incrementally on the node named in the UPID, sleeps as the
//! policy says, and stops at once on SIGINT/SIGTERM.

use std::fmt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{Client, Method, Params};
use super::error::ApiError;
use super::upid::Upid;
use super::wait::{Decision, Exit, Observation, Policy, WaitState, progress_in};
use crate::interrupt;

/// How many log lines a failure message carries.
pub const TAIL_LINES: usize = 12;

/// A finished task.
#[derive(Clone, Debug)]
pub struct TaskReport {
    pub upid: Upid,
    pub exitstatus: String,
    pub exit: Exit,
    /// How long we waited for it.
    pub waited: Duration,
    /// `WARN:` lines of the log.
    pub warnings: Vec<String>,
    /// The last lines of the log (at most 400).
    pub log: Vec<String>,
    pub polls: u32,
}

impl TaskReport {
    /// The last `n` log lines.
    pub fn tail(&self, n: usize) -> Vec<String> {
        tail(&self.log, n)
    }

    /// The task as the module reports it.
    pub fn to_json(&self) -> Value {
        json!({"type": self.upid.task_type, "upid": self.upid.text, "node": self.upid.node,
               "exitstatus": self.exitstatus, "duration": (self.waited.as_secs_f64() * 1000.0).round() / 1000.0})
    }
}

fn tail(log: &[String], n: usize) -> Vec<String> {
    log[log.len().saturating_sub(n)..].to_vec()
}

/// Why a wait did not end in success.
#[derive(Debug)]
pub enum WaitError {
    /// The task stopped with an error.
    Failed(TaskReport),
    /// The deadline passed. `stopped` tells whether the task was stopped on request.
    TimedOut {
        upid: Upid,
        elapsed: Duration,
        progress: Option<f64>,
        tail: Vec<String>,
        last_error: Option<String>,
        /// `Ok(exitstatus)` once stopped on request, or why stopping failed.
        stopped: Option<Result<String, String>>,
    },
    /// The task never became visible on its node, or disappeared.
    Vanished { upid: Upid },
    /// SIGINT/SIGTERM while waiting; the task goes on in PVE.
    Interrupted {
        upid: Upid,
        signal: &'static str,
        elapsed: Duration,
    },
    /// A request failed in a way that retrying cannot mend (permissions, say).
    Api { upid: Upid, error: ApiError },
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::Failed(r) => write!(f, "task {} failed: {}", r.upid, r.exitstatus),
            WaitError::TimedOut {
                upid,
                elapsed,
                progress,
                last_error,
                stopped,
                ..
            } => {
                write!(
                    f,
                    "task {upid} still running at the deadline (waited {:.1}s",
                    elapsed.as_secs_f64()
                )?;
                if let Some(p) = progress {
                    write!(f, ", progress {p:.0}%")?;
                }
                if let Some(e) = last_error {
                    write!(f, "; last error: {e}")?;
                }
                write!(f, ")")?;
                match stopped {
                    // pve-common RESTEnvironment.pm, `$kill_process_group`: a worker that
                    // does not end within 5 s of SIGTERM is killed and writes no exit status.
                    Some(Ok(exit)) if exit == "unexpected status" => write!(
                        f,
                        "; the task did not stop within 5 s of the stop request \
                         (stop_task_on_timeout) and PVE killed it, so it cleaned nothing up: \
                         what it held may stay locked (a killed create leaves 'lock: create' \
                         and its volumes; check with `qm config {}`)",
                        upid.id
                    ),
                    Some(Ok(exit)) => write!(
                        f,
                        "; the task was stopped (stop_task_on_timeout) and ended '{exit}'"
                    ),
                    Some(Err(e)) => write!(f, "; stopping the task failed: {e}"),
                    None => write!(
                        f,
                        "; the task goes on in PVE: raise timeout, or re-run to wait for it again"
                    ),
                }
            }
            WaitError::Vanished { upid } => write!(
                f,
                "task {upid} is not known on node {} (no such task)",
                upid.node
            ),
            WaitError::Interrupted { upid, signal, .. } => {
                write!(
                    f,
                    "interrupted by {signal} while waiting for task {upid}; the task goes on in PVE, and a re-run waits for it and converges"
                )
            }
            WaitError::Api { upid, error } => write!(f, "while waiting for task {upid}: {error}"),
        }
    }
}

impl std::error::Error for WaitError {}

fn task_path(upid: &Upid) -> String {
    format!(
        "{}/tasks/{}",
        super::encode::node_path(&upid.node),
        super::encode::segment(&upid.text)
    )
}

/// Reads log lines after those already in `log`.
/// Lines asked for per log request.
const LOG_PAGE: u64 = 500;
/// Log lines kept (the last ones), and the longest line kept.
const KEEP_LINES: usize = 400;
const MAX_LINE: usize = 4096;
/// `WARN:` lines kept for the result.
const KEEP_WARNINGS: usize = 50;

/// The part of a task log the module keeps: the last [`KEEP_LINES`] lines, the `WARN:`
/// lines, and how many lines were seen, so a log of any length costs bounded memory and at
/// most two requests per read.
#[derive(Default)]
struct LogWindow {
    seen: u64,
    lines: Vec<String>,
    warnings: Vec<String>,
}

impl LogWindow {
    fn push(&mut self, n: u64, mut t: String) {
        if n <= self.seen {
            return;
        }
        self.seen = n;
        if t.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !t.is_char_boundary(cut) {
                cut -= 1;
            }
            t.truncate(cut);
            t.push_str(" …");
        }
        if t.contains("WARN:") && self.warnings.len() < KEEP_WARNINGS {
            self.warnings.push(t.clone());
        }
        self.lines.push(t);
        if self.lines.len() > 2 * KEEP_LINES {
            self.lines.drain(..self.lines.len() - KEEP_LINES);
        }
    }

    fn into_lines(mut self) -> Vec<String> {
        let skip = self.lines.len().saturating_sub(KEEP_LINES);
        self.lines.drain(..skip);
        self.lines
    }
}

/// A page of a task log: the line count the server reports, and (line number, text) pairs.
type LogPage = (Option<u64>, Vec<(u64, String)>);

/// One page of the log from line `start` (0-based).
fn log_page(client: &Client, upid: &Upid, start: u64) -> Result<LogPage, ApiError> {
    let params: Params = vec![
        ("start".into(), start.to_string()),
        ("limit".into(), LOG_PAGE.to_string()),
    ];
    let env = client.get_envelope(&format!("{}/log", task_path(upid)), &params)?;
    let lines: Vec<(u64, String)> = env["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| Some((l["n"].as_u64()?, l["t"].as_str().unwrap_or("").to_string())))
        .collect();
    Ok((env["total"].as_u64(), lines))
}

/// Reads the log lines not seen yet. When more lines came than one page holds, it skips to
/// the last page, so the window always ends with the log's real last lines, however long the
/// log and however the server pages it (a server that ignores `limit` sends everything: only
/// the last lines are kept).
fn read_log(client: &Client, upid: &Upid, log: &mut LogWindow) -> Result<(), ApiError> {
    let (total, mut lines) = log_page(client, upid, log.seen)?;
    if let Some(total) = total
        && total > log.seen + lines.len() as u64
        && total > LOG_PAGE
    {
        lines = log_page(client, upid, total - LOG_PAGE)?.1;
    }
    // An empty log reads as one "no content" line; it is not part of the log.
    if log.seen == 0 && lines.len() == 1 && lines[0].1 == "no content" && total.unwrap_or(1) <= 1 {
        return Ok(());
    }
    let skip = lines.len().saturating_sub(2 * KEEP_LINES);
    for (n, t) in lines.into_iter().skip(skip) {
        log.push(n, t);
    }
    Ok(())
}

/// Task types whose logs report copy progress worth reading while they run.
const PROGRESS_TYPES: &[&str] = &[
    "qmcreate",
    "qmconfig",
    "qmrestore",
    "qmclone",
    "qmmove",
    "download",
    "imgcopy",
    "move_volume",
];

/// Polls the task's status; reads the new log lines when it has stopped (for the report) or,
/// while it runs, when `progress` asks for the copy's progress. Also returns how long the
/// status request took.
fn observe(
    client: &Client,
    upid: &Upid,
    log: &mut LogWindow,
    progress: bool,
) -> Result<(Observation, Duration), ApiError> {
    let asked = Instant::now();
    let status = client.get(&format!("{}/status", task_path(upid)), &Vec::new());
    let took = asked.elapsed();
    let obs = match status {
        Ok(st) => {
            let stopped = st["status"].as_str() == Some("stopped");
            // The log is best effort: progress for the policy, the tail for messages.
            if stopped || progress {
                let _ = read_log(client, upid, log);
            }
            if stopped {
                let exit = st["exitstatus"]
                    .as_str()
                    .unwrap_or("unexpected status")
                    .to_string();
                Observation::Stopped { exitstatus: exit }
            } else {
                Observation::Running {
                    progress: progress_in(&log.lines),
                }
            }
        }
        Err(e) if e.is_no_such_task() => Observation::NotVisible,
        // The UPID is known and the deadline bounds the wait, so any 5xx is ridden out.
        Err(e) if e.is_transient() || e.is_unexplained_500() => {
            Observation::Transient(e.to_string())
        }
        Err(e) => return Err(e),
    };
    Ok((obs, took))
}

/// Waits for a task to stop; success is PVE's rule (`OK` or `WARNINGS: N`).
pub fn wait_task(
    client: &Client,
    upid: &Upid,
    policy: &Policy,
    stop_on_timeout: bool,
) -> Result<TaskReport, WaitError> {
    let start = Instant::now();
    let mut state = WaitState::new();
    let mut log = LogWindow::default();
    let progress = PROGRESS_TYPES.contains(&upid.task_type.as_str());
    loop {
        if let Some(signal) = interrupt::received() {
            return Err(WaitError::Interrupted {
                upid: upid.clone(),
                signal,
                elapsed: start.elapsed(),
            });
        }
        let (obs, took) =
            observe(client, upid, &mut log, progress).map_err(|error| WaitError::Api {
                upid: upid.clone(),
                error,
            })?;
        state.note_request_time(took);
        match state.decide(policy, start.elapsed(), obs) {
            Decision::Wait(d) => {
                if !interrupt::sleep(d) {
                    let signal = interrupt::received().unwrap_or("a signal");
                    return Err(WaitError::Interrupted {
                        upid: upid.clone(),
                        signal,
                        elapsed: start.elapsed(),
                    });
                }
            }
            Decision::Done(exit) => {
                let exitstatus = match &exit {
                    Exit::Ok => "OK".to_string(),
                    Exit::Warnings(n) => format!("WARNINGS: {n}"),
                    Exit::Failed(s) => s.clone(),
                };
                let warnings = std::mem::take(&mut log.warnings);
                let report = TaskReport {
                    upid: upid.clone(),
                    exitstatus,
                    exit: exit.clone(),
                    waited: start.elapsed(),
                    warnings,
                    log: log.into_lines(),
                    polls: state.polls(),
                };
                return if exit.is_success() {
                    Ok(report)
                } else {
                    Err(WaitError::Failed(report))
                };
            }
            Decision::TimedOut {
                progress,
                last_error,
            } => {
                // PVE answers the stop request once the worker has ended (or was killed
                // after 5 s); its exit status tells which.
                if stop_on_timeout {
                    client.allow_cleanup();
                }
                let stopped = stop_on_timeout.then(|| {
                    client
                        .write(Method::Delete, &task_path(upid), &Vec::new())
                        .map_err(|e| e.to_string())?;
                    let st = client
                        .get(&format!("{}/status", task_path(upid)), &Vec::new())
                        .map_err(|e| e.to_string())?;
                    Ok(st["exitstatus"]
                        .as_str()
                        .unwrap_or("unexpected status")
                        .to_string())
                });
                if stopped.is_some() {
                    let _ = read_log(client, upid, &mut log);
                }
                return Err(WaitError::TimedOut {
                    upid: upid.clone(),
                    elapsed: start.elapsed(),
                    progress,
                    tail: tail(&log.lines, TAIL_LINES),
                    last_error,
                    stopped,
                });
            }
            Decision::Vanished => return Err(WaitError::Vanished { upid: upid.clone() }),
        }
    }
}

/// Lists the tasks still running on a node, for a VM and/or of a type (to find the task that
/// holds a lock, or the one a lost answer started).
pub fn active_tasks(
    client: &Client,
    node: &str,
    vmid: Option<u32>,
    ttype: Option<&str>,
) -> Result<Vec<Upid>, ApiError> {
    let mut params: Params = vec![("source".into(), "active".into())];
    if let Some(v) = vmid {
        params.push(("vmid".into(), v.to_string()));
    }
    if let Some(t) = ttype {
        params.push(("typefilter".into(), t.into()));
    }
    let list = client.get(
        &format!("{}/tasks", super::encode::node_path(node)),
        &params,
    )?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["upid"].as_str())
        .filter_map(|u| Upid::parse(u).ok())
        .collect())
}
