//! A node's tasks (pve-manager API2/Tasks.pm): the running ones, a task's status and log,
//! and stopping it; and the cluster's recent tasks (API2/Cluster.pm, tasks). The wait on a task is [`crate::tasks`]; these are its requests, each
//! sent once (the wait decides what a failure means).

use crate::answers::{LogLine, LogPage, TaskListed, TaskStatus, lenient, lenient_list};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths::{self, Node};
use crate::upid::Upid;

use super::task_type::TaskType;

/// `GET /nodes/{node}/tasks?source=active`: the tasks still running, for a VM and/or of a
/// type (the task that holds a lock, or the one a lost answer started). Sent once.
pub fn running(
    client: &Client,
    node: &str,
    vmid: Option<u32>,
    task_type: Option<TaskType>,
) -> Result<Vec<Upid>, ApiError> {
    let mut params: Params = vec![("source".into(), "active".into())];
    if let Some(vmid) = vmid {
        params.push(("vmid".into(), vmid.to_string()));
    }
    if let Some(task_type) = task_type {
        params.push(("typefilter".into(), task_type.as_str().into()));
    }
    let answer = client.get(&Node::new(node).tasks(), &params)?;
    Ok(lenient_list::<TaskListed>(answer)
        .into_iter()
        .filter_map(|t| Upid::parse(&t.upid).ok())
        .collect())
}

/// `GET /cluster/tasks`.
const CLUSTER_TASKS: &str = "/cluster/tasks";

/// A task of the cluster's recent tasks: its UPID, and whether it still ran when its node
/// last broadcast its list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentTask {
    pub upid: Upid,
    pub running: bool,
}

/// An item of `GET /cluster/tasks`: a finished task has an `endtime`.
#[derive(serde::Deserialize)]
struct RecentListed {
    upid: String,
    #[serde(default)]
    endtime: Option<serde_json::Value>,
}

/// `GET /cluster/tasks`: every node's recent tasks in one read, as each node last broadcast
/// them (pve-common RESTEnvironment.pm active_workers: its running tasks and the newest
/// finished ones, 25 in all; pve-manager API2/Cluster.pm tasks). Without `Sys.Audit` on `/`
/// it lists only the caller's own tasks, and none of an API token's (the token's id never
/// equals the task's user once split): a task missing here may still run. A read.
pub fn cluster_recent(client: &Client) -> Result<Vec<RecentTask>, ApiError> {
    let answer = ops::read(client, CLUSTER_TASKS, &Vec::new())?;
    Ok(lenient_list::<RecentListed>(answer)
        .into_iter()
        .filter_map(|task| {
            Upid::parse(&task.upid).ok().map(|upid| RecentTask {
                upid,
                running: task.endtime.is_none_or(|end| end.is_null()),
            })
        })
        .collect())
}

/// `GET /nodes/{node}/tasks?source=all`: the tasks of `task_type` for the VM that PVE lists
/// (running and ended; this user's own, and every user's with `Sys.Audit` on the node),
/// newest first. A read.
pub fn of_vm(
    client: &Client,
    node: &str,
    vmid: u32,
    task_type: TaskType,
) -> Result<Vec<Upid>, ApiError> {
    let params: Params = vec![
        ("source".into(), "all".into()),
        ("vmid".into(), vmid.to_string()),
        ("typefilter".into(), task_type.as_str().into()),
    ];
    Ok(ops::read(client, &Node::new(node).tasks(), &params)
        .map(lenient_list::<TaskListed>)?
        .iter()
        .filter_map(|t| Upid::parse(&t.upid).ok())
        .collect())
}

/// `GET /nodes/{node}/tasks?source=all`: the newest task of `task_type` for the VM that
/// started at or after `since` (epoch seconds, with 5 s of slack for the node's clock), still
/// running or not: one another daemon started for a request (the HA stack's LRM migrating a
/// VM). A read; a failure counts as none.
pub fn newest_since(
    client: &Client,
    node: &str,
    vmid: u32,
    task_type: TaskType,
    since: u64,
) -> Option<Upid> {
    let params: Params = vec![
        ("source".into(), "all".into()),
        ("vmid".into(), vmid.to_string()),
        ("typefilter".into(), task_type.as_str().into()),
    ];
    ops::read(client, &Node::new(node).tasks(), &params)
        .map(lenient_list::<TaskListed>)
        .unwrap_or_default()
        .iter()
        .filter_map(|t| Upid::parse(&t.upid).ok())
        .filter(|upid| upid.starttime + 5 >= since)
        .max_by_key(|upid| upid.starttime)
}

/// `GET …/tasks/{upid}/status`.
pub fn status(client: &Client, upid: &Upid) -> Result<TaskStatus, ApiError> {
    client
        .get(&paths::task_status(upid), &Vec::new())
        .map(lenient)
}

/// `GET …/tasks/{upid}/log?start=…&limit=…`: a page of the log from line `start` (0-based).
pub fn log_page(client: &Client, upid: &Upid, start: u64, limit: u64) -> Result<LogPage, ApiError> {
    let params: Params = vec![
        ("start".into(), start.to_string()),
        ("limit".into(), limit.to_string()),
    ];
    let mut envelope = client.get_envelope(&paths::task_log(upid), &params)?;
    Ok(LogPage {
        total: envelope["total"].as_u64(),
        lines: lenient_list::<LogLine>(envelope["data"].take()),
    })
}

/// `DELETE …/tasks/{upid}`: stops the task; PVE answers once the worker has ended (or was
/// killed after 5 s).
pub fn stop(client: &Client, upid: &Upid) -> Result<(), ApiError> {
    client
        .write(Method::Delete, &paths::task(upid), &Vec::new())
        .map(|_| ())
}
