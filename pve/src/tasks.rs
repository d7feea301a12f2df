//! Waiting on a task: the shell around the pure policy in `wait.rs`. It polls the task's
//! status and reads its log incrementally on the node named in the UPID, sleeps as the
//! policy says, and stops at once on SIGINT/SIGTERM.

use std::fmt;
use std::time::{Duration, Instant};

use super::answers::LogPage;
use super::api;
use super::client::Client;
use super::error::ApiError;
use super::retry::Interrupted;
use super::task_progress::Follower;
use super::upid::Upid;
use super::wait::{
    Decision, Exit, Kind, LookAt, Observation, Policy, WaitState, copy_size, progress_in,
};
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
    /// Task requests (status and log) the wait sent.
    pub requests: u32,
    /// What the wait saw of a copy: progress over time, the rate, the finishing phase.
    pub progress: Option<ProgressReport>,
}

/// The progress a wait saw (for tasks whose log reports a copy).
#[derive(Clone, Debug)]
pub struct ProgressReport {
    /// (seconds into the wait, percent) at each new percentage (at most 200, evenly thinned).
    pub history: Vec<(f64, f64)>,
    /// Seconds from the first progress reading to 100 %, if the copy got there.
    pub copy_seconds: Option<f64>,
    /// Seconds from 100 % to the task's end (flush, config, cloud-init drive).
    pub finishing_seconds: Option<f64>,
    /// The copy's average rate in MiB/s, when the log gives the size.
    pub rate_mib_s: Option<f64>,
}

impl ProgressReport {
    fn from_wait(state: &WaitState, ended: Duration, log: &[String]) -> Option<ProgressReport> {
        let history: Vec<(f64, f64)> = state
            .history()
            .iter()
            .map(|(t, p)| ((t.as_secs_f64() * 1000.0).round() / 1000.0, *p))
            .collect();
        let first = history.first()?.0;
        let copied = state.copied_at().map(|t| t.as_secs_f64());
        let copy_seconds = copied.map(|c| ((c - first).max(0.0) * 1000.0).round() / 1000.0);
        let size = log.iter().rev().find_map(|l| copy_size(l));
        let rate_mib_s = match (copy_seconds, size) {
            (Some(secs), Some(bytes)) if secs > 0.0 => {
                Some((bytes / 1048576.0 / secs * 10.0).round() / 10.0)
            }
            _ => None,
        };
        Some(ProgressReport {
            history,
            copy_seconds,
            finishing_seconds: copied
                .map(|c| ((ended.as_secs_f64() - c).max(0.0) * 1000.0).round() / 1000.0),
            rate_mib_s,
        })
    }
}

impl TaskReport {
    /// The last `n` log lines.
    pub fn tail(&self, count: usize) -> Vec<String> {
        tail(&self.log, count)
    }
}

fn tail(log: &[String], count: usize) -> Vec<String> {
    log[log.len().saturating_sub(count)..].to_vec()
}

/// A node that stopped answering a wait: every look in the last `lasted` failed on the way
/// (pveproxy's `595 No route to host` for a node it cannot reach, a restart, a network cut).
#[derive(Clone, Debug)]
pub struct Silent {
    pub lasted: Duration,
    pub looks: u32,
    /// What the last look got.
    pub last: String,
}

/// The looks of a wait that failed on the way, in a row.
#[derive(Default)]
struct Silence {
    since: Option<Instant>,
    looks: u32,
    last: String,
}

impl Silence {
    fn note(&mut self, error: &str) {
        self.since.get_or_insert_with(Instant::now);
        self.looks += 1;
        self.last = error.to_string();
    }

    /// The silence so far, when it is more than one look.
    fn so_far(&self) -> Option<Silent> {
        let since = self.since?;
        (self.looks >= 2).then(|| Silent {
            lasted: since.elapsed(),
            looks: self.looks,
            last: self.last.clone(),
        })
    }
}

/// Why a wait did not end in success.
#[derive(Debug)]
#[non_exhaustive]
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
        /// The task's node stopped answering before the deadline: its status is unknown.
        silent: Option<Silent>,
        /// The last progress seen (percent) and how long before the end of the wait.
        progress_seen: Option<(f64, Duration)>,
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
                progress_seen,
                silent: Some(silent),
                stopped: None,
                ..
            } => {
                write!(
                    f,
                    "task {upid} had not ended when the run's timeout came (waited {:.1}s), and \
                     whether it is still running is unknown: its node {} stopped answering (the \
                     last {} looks, over {:.1}s, failed; the last got {})",
                    elapsed.as_secs_f64(),
                    upid.node,
                    silent.looks,
                    silent.lasted.as_secs_f64(),
                    silent.last
                )?;
                match progress_seen {
                    Some((p, ago)) => write!(
                        f,
                        "; the last progress seen was {p:.0}%, {:.1}s before the timeout",
                        ago.as_secs_f64()
                    )?,
                    None => write!(f, "; no progress was seen")?,
                }
                write!(
                    f,
                    ". Once {} answers again, re-run to find out how it ended (and wait for it if it still runs)",
                    upid.node
                )
            }
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
                        "; the task did not stop within 5 s of the stop request and PVE killed \
                         it, so it cleaned nothing up: what it held may stay locked (a killed \
                         create leaves 'lock: create' and its volumes; check with `qm config {}`)",
                        upid.id
                    ),
                    Some(Ok(exit)) => {
                        write!(f, "; the task was stopped on request and ended '{exit}'")
                    }
                    Some(Err(e)) => write!(f, "; stopping the task failed: {e}"),
                    None => write!(f, "; the task goes on in PVE"),
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

impl std::error::Error for WaitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WaitError::Api { error, .. } => Some(error),
            _ => None,
        }
    }
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
    fn push(&mut self, number: u64, mut text: String) {
        if number <= self.seen {
            return;
        }
        self.seen = number;
        if text.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(" …");
        }
        if text.contains("WARN:") && self.warnings.len() < KEEP_WARNINGS {
            self.warnings.push(text.clone());
        }
        self.lines.push(text);
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

/// Reads the log lines not seen yet. When more lines came than one page holds, it skips to
/// the last page, so the window always ends with the log's real last lines, however long the
/// log and however the server pages it (a server that ignores `limit` sends everything: only
/// the last lines are kept).
fn read_log(client: &Client, upid: &Upid, log: &mut LogWindow) -> Result<(), ApiError> {
    let LogPage { total, mut lines } = api::tasks::log_page(client, upid, log.seen, LOG_PAGE)?;
    if let Some(total) = total
        && total > log.seen + lines.len() as u64
        && total > LOG_PAGE
    {
        lines = api::tasks::log_page(client, upid, total - LOG_PAGE, LOG_PAGE)?.lines;
    }
    // An empty log reads as one "no content" line; it is not part of the log.
    if log.seen == 0 && lines.len() == 1 && lines[0].text == "no content" && total.unwrap_or(1) <= 1
    {
        return Ok(());
    }
    let skip = lines.len().saturating_sub(2 * KEEP_LINES);
    for line in lines.into_iter().skip(skip) {
        log.push(line.number, line.text);
    }
    Ok(())
}

/// One look at a task: the observation, how long its first request took, and how many
/// requests it cost.
struct Look {
    obs: Observation,
    took: Duration,
    requests: u32,
}

/// PVE's own reading of a finished task's log (pve-common PVE/UPID.pm, read_status): the last
/// line `TASK OK`, `TASK WARNINGS: N` or `TASK ERROR: message` is the exit status.
fn exit_line(line: &str) -> Option<String> {
    if line == "TASK OK" {
        return Some("OK".into());
    }
    if let Some(n) = line.strip_prefix("TASK WARNINGS: ")
        && n.bytes().all(|b| b.is_ascii_digit())
        && !n.is_empty()
    {
        return Some(format!("WARNINGS: {n}"));
    }
    line.strip_prefix("TASK ERROR: ").map(str::to_string)
}

fn classify(err: ApiError) -> Result<Observation, ApiError> {
    match err {
        err if err.is_no_such_task() => Ok(Observation::NotVisible),
        // The UPID is known and the deadline bounds the wait, so any 5xx is ridden out.
        err if err.is_transient() || err.is_unexplained_500() => {
            Ok(Observation::Transient(err.to_string()))
        }
        // The run's time is up: the policy sees the deadline and ends the wait as timed out
        // (stopping the task if asked).
        err @ ApiError::DeadlineReached { .. } => Ok(Observation::Transient(err.to_string())),
        err => Err(err),
    }
}

/// Reads the status: stopped (with the exit status PVE reports) or running. A stopped task's
/// log is read for its tail and its `WARN:` lines, unless `tail_if_ok` is false and it ended
/// `OK`: PVE counts every `WARN:` line its worker logs (pve-common RESTEnvironment.pm,
/// `log_warn`) and ends such a task `WARNINGS: N`, so an `OK` task's log has nothing the
/// result reports.
fn look_at_status(
    client: &Client,
    upid: &Upid,
    log: &mut LogWindow,
    tail_if_ok: bool,
) -> Result<Observation, ApiError> {
    match api::tasks::status(client, upid) {
        Ok(status) if status.stopped() => {
            // The tail for messages: best effort.
            if tail_if_ok || status.exit() != "OK" {
                let _ = read_log(client, upid, log);
            }
            Ok(Observation::Stopped {
                exitstatus: status.exit(),
            })
        }
        Ok(_) => Ok(Observation::Running {
            progress: progress_in(&log.lines),
        }),
        Err(e) => classify(e),
    }
}

/// How long a task with progress may show no new log line before its status is read too: a
/// worker killed outright writes no last line, and only its status says it stopped.
const STATUS_CHECK: Duration = Duration::from_secs(5);

/// Looks at a task once. A task without progress: its status (one request). A task whose log
/// reports progress: its new log lines (one request), which carry both the progress and, in
/// PVE's last line, the end and the exit status; the status is read besides only when the
/// log has shown nothing new for [`STATUS_CHECK`].
fn observe(
    client: &Client,
    upid: &Upid,
    log: &mut LogWindow,
    look_at: LookAt,
    last_status: &mut Instant,
) -> Result<Look, ApiError> {
    let asked = Instant::now();
    if look_at == LookAt::Status {
        let obs = look_at_status(client, upid, log, false)?;
        return Ok(Look {
            obs,
            took: asked.elapsed(),
            requests: 1,
        });
    }
    let seen = log.seen;
    let read = read_log(client, upid, log);
    let took = asked.elapsed();
    let mut requests = 1;
    let obs = match read {
        Err(e) => classify(e)?,
        // `Tasks.pm` answers an unknown UPID's log with this line: not visible (yet).
        Ok(()) if log.lines.len() == 1 && log.lines[0].starts_with("unable to open file") => {
            log.lines.clear();
            log.seen = 0;
            Observation::NotVisible
        }
        Ok(()) => {
            let fresh = log.seen > seen;
            let exit = log
                .lines
                .last()
                .and_then(|l| exit_line(l))
                .filter(|_| fresh);
            match exit {
                // Success needs no second request.
                Some(exitstatus) if Exit::from_status(&exitstatus).is_success() => {
                    Observation::Stopped { exitstatus }
                }
                // A failure is confirmed by the status (a log line that merely looks like
                // PVE's last one must not end the wait), and a log silent for a while is
                // checked against it (a killed worker writes no last line).
                Some(_) => {
                    *last_status = Instant::now();
                    requests += 1;
                    look_at_status(client, upid, log, true)?
                }
                None if !fresh && last_status.elapsed() >= STATUS_CHECK => {
                    *last_status = Instant::now();
                    requests += 1;
                    look_at_status(client, upid, log, true)?
                }
                None => Observation::Running {
                    progress: progress_in(&log.lines),
                },
            }
        }
    };
    Ok(Look {
        obs,
        took,
        requests,
    })
}

/// How a wait looks at a task of this type: a create expected to copy nothing is a blank one
/// ([`Kind::BlankCreate`]), one expected to copy an import ([`Kind::ImportCreate`]); other
/// types whose log may report a copy are read by their log.
fn kind_of(task_type: &str, expect_progress: bool) -> Kind {
    match api::TaskType::named(task_type) {
        Some(api::TaskType::Create) if !expect_progress => Kind::BlankCreate,
        Some(api::TaskType::Create) => Kind::ImportCreate,
        Some(task_type) if task_type.reports_progress() => Kind::Copies,
        _ => Kind::Plain,
    }
}

/// Waits for a task to stop; success is PVE's rule (`OK` or `WARNINGS: N`).
pub fn wait_task(
    client: &mut Client,
    upid: &Upid,
    policy: &Policy,
    stop_on_timeout: bool,
) -> Result<TaskReport, WaitError> {
    let start = Instant::now();
    let kind = kind_of(&upid.task_type, policy.expect_progress);
    let mut state = WaitState::for_kind(kind, policy);
    let mut log = LogWindow::default();
    let mut last_status = Instant::now();
    let mut silence = Silence::default();
    let mut seen_progress: Option<(f64, Instant)> = None;
    let mut follower = Follower::default();
    if let Err(Interrupted(signal)) = client.budget().pause(kind.first_look(policy)) {
        return Err(WaitError::Interrupted {
            upid: upid.clone(),
            signal,
            elapsed: start.elapsed(),
        });
    }
    loop {
        if let Some(signal) = interrupt::received() {
            return Err(WaitError::Interrupted {
                upid: upid.clone(),
                signal,
                elapsed: start.elapsed(),
            });
        }
        let look = observe(
            client,
            upid,
            &mut log,
            kind.look_at(start.elapsed()),
            &mut last_status,
        )
        .map_err(|error| WaitError::Api {
            upid: upid.clone(),
            error,
        })?;
        state.note_request_time(look.took);
        if let Some(quickest) = client.quickest_answer() {
            state.note_baseline(quickest);
        }
        state.note_extra_requests(look.requests.saturating_sub(1));
        let stopped_as = match &look.obs {
            Observation::Stopped { exitstatus } => Some(exitstatus.clone()),
            _ => None,
        };
        match &look.obs {
            // A look refused because the run's time is up is the deadline, not the node.
            Observation::Transient(error) if start.elapsed() < policy.timeout => {
                silence.note(error)
            }
            Observation::Transient(_) => {}
            Observation::Running { progress } => {
                silence = Silence::default();
                if let Some(p) = progress {
                    seen_progress = Some((*p, Instant::now()));
                }
            }
            _ => silence = Silence::default(),
        }
        let decision = state.decide(policy, start.elapsed(), look.obs);
        follower.tell(
            upid,
            &log.lines,
            state.progress(),
            state.copy_rate(),
            start.elapsed(),
        );
        match decision {
            Decision::Wait(pause) => {
                // The policy has already bounded the pause by the deadline.
                if let Err(Interrupted(signal)) = client.budget().pause(pause) {
                    return Err(WaitError::Interrupted {
                        upid: upid.clone(),
                        signal,
                        elapsed: start.elapsed(),
                    });
                }
            }
            Decision::Done(exit) => {
                // As PVE wrote it (a count beyond 64 bits included).
                let exitstatus = stopped_as.unwrap_or_else(|| match &exit {
                    Exit::Ok => "OK".to_string(),
                    Exit::Warnings(n) => format!("WARNINGS: {n}"),
                    Exit::Failed(s) => s.clone(),
                });
                let warnings = std::mem::take(&mut log.warnings);
                let lines = log.into_lines();
                let report = TaskReport {
                    upid: upid.clone(),
                    exitstatus,
                    exit: exit.clone(),
                    waited: start.elapsed(),
                    warnings,
                    progress: ProgressReport::from_wait(&state, start.elapsed(), &lines),
                    log: lines,
                    polls: state.polls(),
                    requests: state.requests(),
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
                    api::tasks::stop(client, upid).map_err(|e| e.to_string())?;
                    api::tasks::status(client, upid)
                        .map(|status| status.exit())
                        .map_err(|e| e.to_string())
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
                    silent: silence.so_far(),
                    progress_seen: seen_progress.map(|(p, at)| (p, at.elapsed())),
                });
            }
            Decision::Vanished => return Err(WaitError::Vanished { upid: upid.clone() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_that_copies_nothing_is_a_blank_one() {
        assert_eq!(kind_of("qmcreate", false), Kind::BlankCreate);
        assert_eq!(kind_of("qmcreate", true), Kind::ImportCreate);
        assert_eq!(kind_of("qmclone", false), Kind::Copies);
        assert_eq!(kind_of("download", false), Kind::Copies);
        assert_eq!(kind_of("qmstart", false), Kind::Plain);
        assert_eq!(kind_of("vzdump", true), Kind::Plain);
    }
}
