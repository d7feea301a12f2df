//! The task endpoints, after pve-manager's `API2/Tasks.pm`: a node's task list, a task's
//! status and log (with the Sys.Audit rule for other users' tasks), and stopping a task.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, ApiResult, Auth, Params, wait_until};
use crate::state::{Sim, Task};

/// Checks a UPID's shape like `PVE::UPID::decode`; returns its node.
fn upid_node(upid: &str) -> Option<&str> {
    let parts: Vec<&str> = upid.split(':').collect();
    let hex = |s: &str, lo: usize, hi: usize| {
        (lo..=hi).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    let ok = parts.len() == 9
        && parts[0] == "UPID"
        && !parts[1].is_empty()
        && hex(parts[2], 8, 8)
        && hex(parts[3], 8, 9)
        && hex(parts[4], 8, 8)
        && !parts[5].is_empty()
        && !parts[7].is_empty()
        && parts[8].is_empty();
    ok.then_some(parts[1])
}

/// pve-manager API2/Tasks.pm, `$check_task_user`: a user sees its own tasks and its tokens'
/// tasks; a token only the tasks of that token.
fn own_task(task_user: &str, user: &str) -> bool {
    match task_user.split_once('!') {
        Some((owner, _)) => user == task_user || user == owner,
        None => user == task_user,
    }
}

/// Tasks.pm, read_task_status and read_task_log: another user's task needs `Sys.Audit` on
/// the node.
fn check_task_perm(sim: &Sim, node: &str, task_user: &str, auth: &Auth) -> Result<(), ApiErr> {
    if own_task(task_user, &auth.id) || sim.sys_audit(&auth.id, node) {
        return Ok(());
    }
    Err(ApiErr {
        status: 403,
        msg: format!("Permission check failed (/nodes/{node}, Sys.Audit)"),
        errors: None,
    })
}

fn find_task<'a>(st: &'a crate::state::State, node: &str, upid: &str) -> Result<&'a Task, ApiErr> {
    if upid_node(upid).is_none() {
        return Err(ApiErr::param("upid", "unable to parse worker upid"));
    }
    st.tasks
        .iter()
        .find(|t| t.upid == upid && t.node == node && Instant::now() >= t.visible_at)
        .ok_or_else(|| ApiErr::param("upid", "no such task"))
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
pub fn task_status(sim: &Sim, node: &str, upid: &str, auth: &Auth) -> ApiResult {
    let st = sim.lock();
    let t = find_task(&st, node, upid)?;
    check_task_perm(sim, node, &t.user, auth)?;
    Ok(t.status_json())
}

/// `GET /nodes/{node}/tasks/{upid}/log` with `start`/`limit`, and `total` beside `data`.
///
/// Tasks.pm, read_task_log does not check that the task exists: the log of an unknown UPID
/// is pve-common's `dump_logfile` failing to open the file, answered with 200.
pub fn task_log(sim: &Sim, node: &str, upid: &str, params: &Params, auth: &Auth) -> ApiResult {
    let st = sim.lock();
    if upid_node(upid).is_none() {
        return Err(ApiErr::param("upid", "unable to parse worker upid"));
    }
    let user = upid.split(':').nth(7).unwrap_or("");
    check_task_perm(sim, node, user, auth)?;
    let Ok(t) = find_task(&st, node, upid) else {
        return Ok(json!({"__total": 1, "lines": [
            {"n": 1, "t": "unable to open file - No such file or directory"}
        ]}));
    };
    let (start, limit) = paging(params);
    let total = t.log.len();
    let lines: Vec<Value> = if total == 0 {
        vec![json!({"n": 1, "t": "no content"})]
    } else {
        let take = if limit == 0 { usize::MAX } else { limit };
        t.log
            .iter()
            .enumerate()
            .skip(start)
            .take(take)
            .map(|(i, l)| json!({"n": i + 1, "t": l}))
            .collect()
    };
    Ok(json!({"__total": total.max(1), "lines": lines}))
}

/// `start` and `limit` of a paged read (PVE's defaults: 0 and 50).
fn paging(params: &Params) -> (usize, usize) {
    let get = |k: &str, default: usize| {
        params
            .get(k)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    (get("start", 0), get("limit", 50))
}

/// `GET /nodes/{node}/tasks` with PVE's filters; newest first. Without `Sys.Audit` on the
/// node a user sees only its own tasks (Tasks.pm, node_tasks); running tasks carry
/// `status: RUNNING`.
pub fn task_list(sim: &Sim, node: &str, params: &Params, auth: &Auth) -> Value {
    let auditor = sim.sys_audit(&auth.id, node);
    let st = sim.lock();
    let source = params
        .get("source")
        .map(String::as_str)
        .unwrap_or("archive");
    let vmid = params.get("vmid");
    let typefilter = params.get("typefilter");
    let errors = params.get("errors").is_some_and(|e| e == "1");
    let (start, limit) = paging(params);
    let items: Vec<Value> = st
        .tasks
        .iter()
        .rev()
        .filter(|t| t.node == node && Instant::now() >= t.visible_at)
        .filter(|t| auditor || own_task(&t.user, &auth.id))
        .filter(|t| match source {
            "active" => t.running(),
            "archive" => !t.running(),
            _ => true,
        })
        .filter(|t| vmid.is_none_or(|v| *v == t.id))
        .filter(|t| typefilter.is_none_or(|f| *f == t.ttype))
        .filter(|t| !errors || t.exitstatus.as_deref().is_some_and(|e| e != "OK"))
        .skip(start)
        .take(if limit == 0 { usize::MAX } else { limit })
        .map(Task::list_json)
        .collect();
    json!(items)
}

/// `DELETE /nodes/{node}/tasks/{upid}`: pve-common RESTEnvironment.pm, check_worker with
/// `$killit` (`$kill_process_group`): SIGTERM to the worker, up to 5 s for it to end, then
/// SIGKILL. A killed worker writes no exit line, so its status reads `unexpected status`
/// (PVE::UPID read_status) and whatever it held (a create's `lock: create`) stays behind.
pub fn task_stop(sim: &Sim, node: &str, upid: &str) -> ApiResult {
    {
        let st = sim.lock();
        find_task(&st, node, upid)?
            .cancel
            .store(true, Ordering::Relaxed);
    }
    let u = upid.to_string();
    let ended = wait_until(sim, Duration::from_secs(5), |st| {
        st.tasks.iter().any(|t| t.upid == u && !t.running())
    });
    if !ended {
        let mut st = sim.lock();
        if let Some(t) = st.tasks.iter_mut().find(|t| t.upid == upid && t.running()) {
            t.killed.store(true, Ordering::Relaxed);
            t.exitstatus = Some("unexpected status".into());
            t.end_epoch = Some(crate::state::epoch());
            sim.log_task(t);
        }
        drop(st);
        sim.cv.notify_all();
    }
    Ok(Value::Null)
}
