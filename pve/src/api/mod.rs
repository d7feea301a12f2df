//! One function per PVE call the modules make, grouped as PVE groups them: [`cluster`]
//! (pve-manager API2/Cluster.pm), [`ha`] (pve-ha-manager API2/HA), [`access`]
//! (pve-access-control), [`tasks`] (a node's tasks, pve-manager API2/Tasks.pm), [`qemu`]
//! (qemu-server API2/Qemu.pm) and [`storage`] (pve-storage API2/Storage), with [`made`]
//! (which task made a new VM, by PVE's record, for a create or a clone sent at most once)
//! and [`named`] (finding VMs by name, the cluster's listing confirmed by the nodes'). This
//! is where a request is built: each function knows its method and path ([`crate::paths`]),
//! its body keys, its retry class (a read, or a dispatch with the query that recovers a lost
//! answer, [`crate::ops`]) and, when it starts a task, the task's type and whether its log
//! reports progress ([`TaskType::reports_progress`]).
//!
//! Nothing above this module builds a path, writes a body key or names a task type.

pub mod access;
pub mod cluster;
pub mod disks;
pub mod ha;
pub mod ha_rules;
pub mod made;
pub mod named;
pub mod qemu;
pub mod snapshot;
pub mod storage;
mod task_type;
pub mod tasks;
pub mod version;

pub use task_type::TaskType;

use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::upid::Upid;

/// A task a request started, and whether its log reports a copy's progress (an import, a
/// full clone): a wait on it then reads the log for progress and allows for the copy.
#[derive(Clone, Debug)]
pub struct Task {
    pub upid: Upid,
    pub reports_progress: bool,
}

impl Task {
    /// A task found running (holding a lock, say): progress as its type usually reports it
    /// is read by the wait; the wait does not expect a copy.
    pub fn found(upid: Upid) -> Task {
        Task {
            upid,
            reports_progress: false,
        }
    }

    /// Whether PVE handed the request to the HA stack instead of doing it (a migration of an
    /// HA-managed VM starts a `hamigrate`, [`TaskType::HaMigrate`]): the work is then a task
    /// the HA stack starts later ([`qemu::migration_by_ha`]).
    pub fn handed_to_ha(&self) -> bool {
        TaskType::named(&self.upid.task_type) == Some(TaskType::HaMigrate)
    }
}

/// What a dispatched request led to.
#[derive(Debug)]
pub enum Dispatched {
    /// PVE started this task.
    Task(Task),
    /// PVE answered `null`: the work finished within the request.
    Done,
}

/// How a lost answer to a dispatch is recovered: the task it may have started is looked for.
enum Recover<'a> {
    /// Not looked for (its task cannot be told apart from another's, or it starts none).
    Never,
    /// A running task of this type for the VM.
    OfVm {
        node: &'a str,
        vmid: u32,
        task_type: TaskType,
    },
    /// A running task of this type on the node whose id contains this text.
    Named {
        node: &'a str,
        task_type: TaskType,
        id_contains: &'a str,
    },
}

/// A dispatch (see [`ops::dispatch`]) of a request that starts a task.
fn dispatch(
    client: &Client,
    method: Method,
    path: &str,
    params: &Params,
    reports_progress: bool,
    recover: Recover,
) -> Result<Dispatched, ApiError> {
    let found = || match recover {
        Recover::Never => None,
        Recover::OfVm {
            node,
            vmid,
            task_type,
        } => tasks::running(client, node, Some(vmid), Some(task_type))
            .ok()?
            .into_iter()
            .next(),
        Recover::Named {
            node,
            task_type,
            id_contains,
        } => tasks::running(client, node, None, Some(task_type))
            .ok()?
            .into_iter()
            .find(|upid| upid.id.contains(id_contains)),
    };
    Ok(match ops::dispatch(client, method, path, params, found)? {
        ops::Dispatched::Task(upid) => Dispatched::Task(Task {
            upid,
            reports_progress,
        }),
        ops::Dispatched::Done => Dispatched::Done,
    })
}

/// A boolean as PVE's API takes it.
fn flag(value: bool) -> String {
    if value { "1" } else { "0" }.to_string()
}
