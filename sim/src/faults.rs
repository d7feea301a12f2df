//! Injected faults: set from a scenario file at start or through the admin endpoint.
//!
//! Each fault is a JSON object with a `kind`:
//! * `http`: answer matching requests with `status`/`message` (500, 595, 596, 599, …); with
//!   `"after": true` the request is carried out first and only its answer is replaced.
//! * `drop`: carry the request out, then cut the connection in the middle of the answer.
//! * `latency`: delay matching requests by `ms`.
//! * `null_upid`: carry the request out but answer `{"data":null}` instead of the UPID.
//! * `task`: the next tasks of `task_type` end with `outcome` `fail` (`message`) or `warnings` (`warnings`).
//! * `hide_task`: the next tasks of `task_type` answer `no such task` for `ms` after dispatch.
//! * `slow_body`: send the answer's bytes `ms` apart (a server or proxy that drips).
//! * `big_body`: pad the (JSON) answer with spaces to `bytes` (an answer far larger than PVE's).
//! * `task` may add `log_lines`: that many lines logged before the task ends (a huge log).
//! * `deaf_task`: the next tasks of `task_type` ignore a stop request (SIGTERM), as a worker
//!   stuck in I/O does, so `DELETE …/tasks/{upid}` kills them after 5 s.
//!
//! Request matchers: `method` (optional), `path` (a substring of the path below `/api2/json`),
//! `count` (how many times, default unlimited) and `rate` (0..1, default 1).

use std::time::Duration;

use serde_json::Value;

/// How a task is forced to end.
pub enum TaskOutcome {
    /// Fail with this message after logging this many filler lines.
    Fail(String, u64),
    Warnings(u32),
}

/// One request-level fault.
#[derive(Clone)]
pub struct RequestFault {
    pub method: Option<String>,
    pub path: String,
    pub count: Option<u64>,
    pub rate: f64,
    pub action: Action,
}

/// What a request fault does.
#[derive(Clone)]
pub enum Action {
    Status {
        status: u16,
        message: String,
        after: bool,
    },
    Drop,
    Latency(Duration),
    NullUpid,
    SlowBody(Duration),
    BigBody(usize),
}

struct TaskFault {
    task_type: String,
    count: Option<u64>,
    kind: TaskFaultKind,
}

enum TaskFaultKind {
    Fail(String, u64),
    Warnings(u32),
    Hide(Duration),
    Deaf,
}

/// The faults in force.
#[derive(Default)]
pub struct Faults {
    requests: Vec<RequestFault>,
    tasks: Vec<TaskFault>,
    /// The faults as given, for `GET /faults`.
    pub given: Vec<Value>,
}

fn take(count: &mut Option<u64>) -> bool {
    match count {
        None => true,
        Some(0) => false,
        Some(n) => {
            *n -= 1;
            true
        }
    }
}

impl Faults {
    /// Adds a fault from its JSON description.
    pub fn add(&mut self, v: &Value) -> Result<(), String> {
        let kind = v["kind"].as_str().ok_or("fault needs a 'kind'")?;
        let count = v.get("count").and_then(Value::as_u64);
        let task_type = || {
            v["task_type"]
                .as_str()
                .map(str::to_string)
                .ok_or(format!("'{kind}' fault needs 'task_type'"))
        };
        let ms = |key: &str| Duration::from_millis(v.get(key).and_then(Value::as_u64).unwrap_or(0));
        let action = match kind {
            "http" => Some(Action::Status {
                status: v["status"].as_u64().ok_or("'http' fault needs 'status'")? as u16,
                message: v["message"]
                    .as_str()
                    .unwrap_or("Internal Server Error")
                    .to_string(),
                after: v["after"].as_bool().unwrap_or(false),
            }),
            "drop" => Some(Action::Drop),
            "latency" => Some(Action::Latency(ms("ms"))),
            "null_upid" => Some(Action::NullUpid),
            "slow_body" => Some(Action::SlowBody(ms("ms"))),
            "big_body" => Some(Action::BigBody(
                v["bytes"]
                    .as_u64()
                    .ok_or("'big_body' fault needs 'bytes'")? as usize,
            )),
            "task" => {
                let k = match v["outcome"].as_str() {
                    Some("fail") => TaskFaultKind::Fail(
                        v["message"]
                            .as_str()
                            .unwrap_or("simulated failure")
                            .to_string(),
                        v["log_lines"].as_u64().unwrap_or(0),
                    ),
                    Some("warnings") => {
                        TaskFaultKind::Warnings(v["warnings"].as_u64().unwrap_or(1) as u32)
                    }
                    _ => return Err("'task' fault needs 'outcome': fail or warnings".into()),
                };
                self.tasks.push(TaskFault {
                    task_type: task_type()?,
                    count,
                    kind: k,
                });
                None
            }
            "deaf_task" => {
                self.tasks.push(TaskFault {
                    task_type: task_type()?,
                    count,
                    kind: TaskFaultKind::Deaf,
                });
                None
            }
            "hide_task" => {
                self.tasks.push(TaskFault {
                    task_type: task_type()?,
                    count,
                    kind: TaskFaultKind::Hide(ms("ms")),
                });
                None
            }
            other => return Err(format!("unknown fault kind '{other}'")),
        };
        if let Some(action) = action {
            self.requests.push(RequestFault {
                method: v["method"].as_str().map(str::to_ascii_uppercase),
                path: v["path"].as_str().unwrap_or("").to_string(),
                count,
                rate: v["rate"].as_f64().unwrap_or(1.0),
                action,
            });
        }
        self.given.push(v.clone());
        Ok(())
    }

    pub fn clear(&mut self) {
        *self = Faults::default();
    }

    /// The faults that apply to this request (consuming their counts). `roll` is a number in 0..1.
    pub fn for_request(
        &mut self,
        method: &str,
        path: &str,
        mut roll: impl FnMut() -> f64,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        for f in &mut self.requests {
            if f.method.as_deref().is_some_and(|m| m != method) || !path.contains(&f.path) {
                continue;
            }
            if f.count == Some(0) || roll() >= f.rate {
                continue;
            }
            if take(&mut f.count) {
                out.push(f.action.clone());
            }
        }
        out
    }

    /// How long a new task of this type stays invisible.
    pub fn take_hide(&mut self, ttype: &str) -> Duration {
        for f in &mut self.tasks {
            if let TaskFaultKind::Hide(d) = f.kind
                && f.task_type == ttype
                && take(&mut f.count)
            {
                return d;
            }
        }
        Duration::ZERO
    }

    /// Whether the next task of this type ignores SIGTERM.
    pub fn take_deaf(&mut self, ttype: &str) -> bool {
        for f in &mut self.tasks {
            if matches!(f.kind, TaskFaultKind::Deaf) && f.task_type == ttype && take(&mut f.count) {
                return true;
            }
        }
        false
    }

    /// A forced outcome for a task of this type, if any.
    pub fn take_task_outcome(&mut self, ttype: &str) -> Option<TaskOutcome> {
        for f in &mut self.tasks {
            if f.task_type != ttype || f.count == Some(0) {
                continue;
            }
            let outcome = match &f.kind {
                TaskFaultKind::Fail(m, n) => TaskOutcome::Fail(m.clone(), *n),
                TaskFaultKind::Warnings(n) => TaskOutcome::Warnings(*n),
                TaskFaultKind::Hide(_) | TaskFaultKind::Deaf => continue,
            };
            take(&mut f.count);
            return Some(outcome);
        }
        None
    }
}
