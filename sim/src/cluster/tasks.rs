//! The task endpoints, after pve-manager's `API2/Tasks.pm`: a node's task list, a task's
//! status and log (with the Sys.Audit rule for other users' tasks), and stopping a task; and
//! the cluster's recent tasks, `API2/Cluster.pm` `tasks` (every node's broadcast task list).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::access::visibility;
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
/// node a user sees only its own tasks (Tasks.pm, node_tasks), and its tokens' once they
/// ended (`visibility::node_task_listed`); running tasks carry `status: RUNNING`.
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
        .filter(|t| visibility::node_task_listed(auditor, &auth.id, &t.user, t.running()))
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
        .map(|t| visibility::node_task_entry(t.list_json(), t.running()))
        .collect();
    json!(items)
}

/// How many tasks a node's broadcast list holds, its running tasks first (pve-common
/// RESTEnvironment.pm, active_workers: `$MAX_FINISHED = 25`, running tasks plus as many
/// finished ones as make 25).
const MAX_FINISHED: usize = 25;

/// `GET /cluster/tasks` (pve-manager API2/Cluster.pm, tasks): the task list each node last
/// broadcast (pve-cluster Cluster.pm, get_tasklist, node by node), as
/// RESTEnvironment.pm's active_workers makes it: the running tasks in the order they
/// started, then the newest finished ones (by `starttime`, newest first), 25 in all unless
/// more run. A running task carries its `pid`; a finished one `endtime` and `status` (its
/// `pid` deleted), neither has `pstart`. A token's task has `user` and `tokenid` split
/// (`split_tokenid`). Without `Sys.Audit` on `/` a caller sees only the tasks whose `user`,
/// once split, is its own id: so a token sees none, not even its own (`$task->{user} eq
/// $authuser`, where a token's id is `user@realm!token`).
pub fn cluster_tasks(sim: &Sim, auth: &Auth) -> Value {
    let auditor = sim.sys_audit_on(&auth.id, "/");
    let st = sim.lock();
    let now = Instant::now();
    let visible: Vec<&Task> = st.tasks.iter().filter(|t| now >= t.visible_at).collect();
    json!(broadcast_lists(
        &sim.opts.nodes,
        &visible,
        auditor,
        &auth.id
    ))
}

/// The pure part of [`cluster_tasks`]: `tasks` in the order they started.
fn broadcast_lists(nodes: &[String], tasks: &[&Task], auditor: bool, authid: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for node in nodes {
        let on_node: Vec<&Task> = tasks.iter().copied().filter(|t| &t.node == node).collect();
        let running: Vec<&Task> = on_node.iter().copied().filter(|t| t.running()).collect();
        let mut finished: Vec<&Task> = on_node.iter().copied().filter(|t| !t.running()).collect();
        // A stable sort keeps tasks of one second in the order they started, as the
        // newest-first walk over the active file leaves them.
        finished.sort_by_key(|task| std::cmp::Reverse(task.starttime));
        let room = MAX_FINISHED.saturating_sub(running.len());
        for task in running.into_iter().chain(finished.into_iter().take(room)) {
            let mut item = json!({
                "upid": task.upid, "node": task.node, "starttime": task.starttime,
                "type": task.ttype, "id": task.id, "user": task.user,
            });
            match &task.exitstatus {
                None => {
                    item["pid"] = json!(task.pid);
                    item["saved"] = json!("0");
                }
                Some(status) => {
                    item["endtime"] = json!(task.end_epoch.unwrap_or(0.0) as u64);
                    item["status"] = json!(status);
                    item["saved"] = json!("1");
                }
            }
            if let Some((user, token)) = task.user.split_once('!') {
                item["user"] = json!(user);
                item["tokenid"] = json!(token);
            }
            if auditor || item["user"] == authid {
                out.push(item);
            }
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn task(node: &str, starttime: u64, user: &str, exitstatus: Option<&str>) -> Task {
        Task {
            upid: format!(
                "UPID:{node}:00001000:00002000:{starttime:08X}:qmcreate:{starttime}:{user}:"
            ),
            node: node.into(),
            pid: 4096,
            pstart: 8192,
            starttime,
            ttype: "qmcreate".into(),
            id: starttime.to_string(),
            user: user.into(),
            log: Vec::new(),
            exitstatus: exitstatus.map(str::to_string),
            start_epoch: starttime as f64,
            end_epoch: exitstatus.map(|_| starttime as f64 + 2.0),
            cancel: Arc::new(AtomicBool::new(false)),
            killed: Arc::new(AtomicBool::new(false)),
            visible_at: Instant::now(),
        }
    }

    fn nodes() -> Vec<String> {
        vec!["pve1".into(), "pve2".into()]
    }

    #[test]
    fn each_node_lists_its_running_tasks_then_the_newest_finished_up_to_25() {
        // pve-common RESTEnvironment.pm active_workers; pve-manager API2/Cluster.pm tasks.
        let mut tasks: Vec<Task> = (0..30)
            .map(|n| task("pve1", 1_000 + n, "root@pam", Some("OK")))
            .collect();
        tasks.push(task("pve1", 2_000, "root@pam", None));
        tasks.push(task("pve1", 2_001, "root@pam", None));
        tasks.push(task("pve2", 3_000, "root@pam", Some("some error")));
        let refs: Vec<&Task> = tasks.iter().collect();
        let listed = broadcast_lists(&nodes(), &refs, true, "root@pam");
        let pve1: Vec<&Value> = listed.iter().filter(|t| t["node"] == "pve1").collect();
        assert_eq!(pve1.len(), 25, "running ones and 23 finished: 25 in all");
        assert_eq!(
            pve1[0]["starttime"], 2_000,
            "running first, in the order they started"
        );
        assert_eq!(pve1[1]["starttime"], 2_001);
        assert_eq!(pve1[2]["starttime"], 1_029, "then the newest finished");
        assert_eq!(pve1[24]["starttime"], 1_007);
        assert_eq!(pve1[0]["pid"], 4096);
        assert!(pve1[0].get("status").is_none() && pve1[0].get("endtime").is_none());
        assert!(pve1[2].get("pid").is_none() && pve1[2].get("pstart").is_none());
        assert_eq!(pve1[2]["status"], "OK");
        assert_eq!(pve1[2]["endtime"], 1_031);
        let pve2: Vec<&Value> = listed.iter().filter(|t| t["node"] == "pve2").collect();
        assert_eq!(pve2.len(), 1);
        assert_eq!(pve2[0]["status"], "some error");
    }

    #[test]
    fn without_sys_audit_on_the_root_a_user_sees_its_own_tasks_and_a_token_none() {
        // API2/Cluster.pm tasks: `push @$res, $task if $all || ($task->{user} eq $authuser)`,
        // after `split_tokenid` took the token's name off `user`.
        let tasks = [
            task("pve1", 1_000, "ops@pve", None),
            task("pve1", 1_001, "root@pam", None),
            task("pve2", 1_002, "ops@pve!fleet", Some("OK")),
        ];
        let refs: Vec<&Task> = tasks.iter().collect();
        let own = broadcast_lists(&nodes(), &refs, false, "ops@pve");
        let starts: Vec<&Value> = own.iter().map(|t| &t["starttime"]).collect();
        assert_eq!(
            starts,
            [1_000, 1_002],
            "its own, and its token's (user once split)"
        );
        assert_eq!(own[1]["user"], "ops@pve");
        assert_eq!(own[1]["tokenid"], "fleet");
        assert!(
            broadcast_lists(&nodes(), &refs, false, "ops@pve!fleet").is_empty(),
            "a token's id never equals a split user"
        );
        assert_eq!(
            broadcast_lists(&nodes(), &refs, true, "ops@pve!fleet").len(),
            3
        );
    }
}
