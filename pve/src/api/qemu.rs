//! A node's VMs (qemu-server API2/Qemu.pm, API2/Qemu/Agent.pm): listing and reading them,
//! and every request that changes one, each starting its task (`qmcreate`, `qmconfig`, …).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Dispatched, Recover, Task, TaskType, dispatch, flag, tasks};
use crate::answers::{NodeVm, PendingKey, VmConfig, VmStatus, lenient, lenient_list};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths::{self, Node};
use crate::upid::Upid;

/// A VM on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vm {
    pub node: String,
    pub vmid: u32,
}

impl Vm {
    pub fn new(node: &str, vmid: u32) -> Vm {
        Vm {
            node: node.to_string(),
            vmid,
        }
    }

    pub(super) fn path(&self) -> paths::Vm {
        Node::new(&self.node).vm(self.vmid)
    }

    pub(super) fn recover(&self, task_type: TaskType) -> Recover<'_> {
        Recover::OfVm {
            node: &self.node,
            vmid: self.vmid,
            task_type,
        }
    }
}

/// Whether config values import a disk (`import-from=`): the task then copies it and its
/// log reports progress.
fn imports(config: &[(String, String)]) -> bool {
    config.iter().any(|(_, v)| v.contains("import-from="))
}

/// `None` for a VM that is not (or no longer) there.
fn unless_missing<T>(read: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match read {
        Ok(answer) => Ok(Some(answer)),
        Err(e) if e.is_missing_vm() => Ok(None),
        Err(e) => Err(e),
    }
}

/// `GET /nodes/{node}/qemu`: the node's VMs, read from their configs at once (a read).
pub fn list(client: &Client, node: &str) -> Result<Vec<NodeVm>, ApiError> {
    ops::read(client, &Node::new(node).qemu(), &Vec::new()).map(lenient_list)
}

/// `GET …/config` (pending values applied); `None` when the VM is not there (a read).
pub fn config(client: &Client, vm: &Vm) -> Result<Option<VmConfig>, ApiError> {
    unless_missing(ops::read(client, &vm.path().config(), &Vec::new()).map(lenient))
}

/// `GET …/status/current`: the power state as the node sees it now (a read).
pub fn status(client: &Client, vm: &Vm) -> Result<Option<VmStatus>, ApiError> {
    unless_missing(ops::read(client, &vm.path().status_current(), &Vec::new()).map(lenient))
}

/// `GET …/pending`: each key with its current and pending value (a read).
pub fn pending(client: &Client, vm: &Vm) -> Result<Vec<PendingKey>, ApiError> {
    ops::read(client, &vm.path().pending(), &Vec::new()).map(lenient_list)
}

/// `GET …/pending` with each key's current value: the config as it is and as it will be (a
/// read).
pub fn pending_items(
    client: &Client,
    vm: &Vm,
) -> Result<Vec<crate::answers::PendingItem>, ApiError> {
    ops::read(client, &vm.path().pending(), &Vec::new()).map(lenient_list)
}

/// `GET …/cloudinit`: the cloud-init options with what the drive holds (a read).
pub fn cloudinit(client: &Client, vm: &Vm) -> Result<Vec<PendingKey>, ApiError> {
    ops::read(client, &vm.path().cloudinit(), &Vec::new()).map(lenient_list)
}

/// `PUT …/cloudinit`: regenerates the cloud-init drive from the config.
pub fn regenerate_cloudinit(client: &Client, vm: &Vm) -> Result<Dispatched, ApiError> {
    let path = vm.path().cloudinit();
    dispatch(
        client,
        Method::Put,
        &path,
        &Vec::new(),
        false,
        Recover::Never,
    )
}

/// `GET …/agent/network-get-interfaces`: the guest agent's answer, sent once (PVE answers
/// `500 QEMU guest agent is not running` until the agent is up; the caller decides).
pub fn agent_interfaces(client: &Client, vm: &Vm) -> Result<Value, ApiError> {
    client.get(&vm.path().agent("network-get-interfaces"), &Vec::new())
}

/// A create of this VM still running (`qmcreate`): its config shows the VM's name only at
/// its end (qemu-server Qemu.pm create_vm writes it last).
pub fn create_running(client: &Client, vm: &Vm) -> Option<Upid> {
    tasks::running(client, &vm.node, Some(vm.vmid), Some(TaskType::Create))
        .ok()?
        .into_iter()
        .next()
}

/// The newest create task (`qmcreate`) PVE lists for the VM, when this user can see it: who
/// made the VM and when (a read; a failure counts as none).
pub fn creator(client: &Client, vm: &Vm) -> Option<Upid> {
    tasks::of_vm(client, &vm.node, vm.vmid, TaskType::Create)
        .ok()?
        .into_iter()
        .max_by_key(|upid| upid.starttime)
}

/// The create tasks (`qmcreate`) PVE listed for a VM just before this run sent its own
/// create: the run's own task is then the one PVE lists afterwards that is not among them,
/// on the VM's node, for its vmid, by the run's user. So a task is recognised by what PVE
/// records, never by comparing clocks (the node's may differ from this machine's), and never
/// is another user's task, or an earlier run's, taken for this run's.
pub struct CreatesBefore {
    upids: Vec<String>,
}

/// How long PVE's record may show nothing of a create whose answer was lost before the run
/// concludes PVE never got it: qemu-server writes the config (`lock: create`) and forks the
/// task before it answers, so once PVE answers again, this long with neither is an answer.
const LOOK_GRACE: Duration = Duration::from_secs(10);

impl CreatesBefore {
    /// Lists them (a read).
    pub fn list(client: &Client, vm: &Vm) -> Result<CreatesBefore, ApiError> {
        Ok(CreatesBefore {
            upids: tasks::of_vm(client, &vm.node, vm.vmid, TaskType::Create)?
                .into_iter()
                .map(|upid| upid.text)
                .collect(),
        })
    }

    /// Whether `upid` is this run's create of `vm`, by PVE's record.
    fn is_own(&self, upid: &Upid, vm: &Vm, user: &str) -> bool {
        upid.node == vm.node
            && upid.user == user
            && upid.task_type == TaskType::Create.as_str()
            && upid.id == vm.vmid.to_string()
            && !self.upids.contains(&upid.text)
    }

    /// This run's create of `vm`, if PVE lists it (a read).
    fn own(&self, client: &Client, vm: &Vm) -> Result<Option<Upid>, ApiError> {
        Ok(tasks::of_vm(client, &vm.node, vm.vmid, TaskType::Create)?
            .into_iter()
            .find(|upid| self.is_own(upid, vm, client.user())))
    }

    /// This run's create of `vm` with this `config`, if PVE lists it (a read): the task to
    /// wait on when PVE answered that the vmid is taken after a create was sent again
    /// (refused before it acted the first time).
    pub fn own_task(
        &self,
        client: &Client,
        vm: &Vm,
        config: &[(String, String)],
    ) -> Result<Option<Task>, ApiError> {
        Ok(self.own(client, vm)?.map(|upid| Task {
            upid,
            reports_progress: imports(config),
        }))
    }

    /// Who made `vm` and when, by PVE's record, for a message: the newest create of it that
    /// is not this run's (its user, and its start on the node's clock), or, when no such task
    /// is visible to this user, the `ctime` PVE wrote into its config.
    pub fn made_by(&self, client: &Client, vm: &Vm) -> String {
        let (node, vmid) = (&vm.node, vm.vmid);
        let user = client.user();
        let theirs = tasks::of_vm(client, node, vmid, TaskType::Create)
            .unwrap_or_default()
            .into_iter()
            .filter(|upid| !self.is_own(upid, vm, user))
            .max_by_key(|upid| upid.starttime);
        if let Some(upid) = theirs {
            return format!(
                "VM {vmid} on {node} was created by {} at {} (the node's clock; task {upid}), so it is not this run's VM",
                upid.user,
                crate::upid::utc(upid.starttime),
            );
        }
        let ctime = config(client, vm).ok().flatten().and_then(|c| c.ctime());
        format!(
            "VM {vmid} on {node} was created{} by another user or run: its create task is not visible \
             to {user} (other users' tasks need Sys.Audit on /nodes/{node}), so it is not this run's VM",
            ctime
                .map(|t| format!(
                    " at {} (the node's clock, from its config)",
                    crate::upid::utc(t)
                ))
                .unwrap_or_default()
        )
    }

    /// One look for this run's create after its answer was lost ([`ops::dispatch_once`]):
    /// its task by PVE's record; after [`LOOK_GRACE`] of answers showing neither it nor the
    /// VM, PVE never got the create; a VM there without it is someone else's.
    fn look(&self, client: &Client, vm: &Vm, quiet_since: &mut Option<Instant>) -> ops::Look {
        let (node, vmid, user) = (&vm.node, vm.vmid, client.user());
        match self.own(client, vm) {
            Ok(Some(upid)) => return ops::Look::Found(upid),
            Ok(None) => {}
            Err(e) => return ops::Look::Again(format!("listing the tasks on {node}: {e}")),
        }
        let since = *quiet_since.get_or_insert_with(Instant::now);
        if since.elapsed() < LOOK_GRACE {
            return ops::Look::Again(format!(
                "{node} lists no task of {user} creating VM {vmid} yet"
            ));
        }
        match config(client, vm) {
            Ok(None) => ops::Look::NotDone(format!(
                "for {}s after that, PVE showed neither a task of {user} creating VM {vmid} on {node} \
                 nor a VM {vmid}: PVE most likely never got the create, and nothing changed (a re-run \
                 creates the VM, or finds it if PVE made it after all)",
                LOOK_GRACE.as_secs()
            )),
            Ok(Some(_)) => ops::Look::NotDone(format!(
                "VM {vmid} exists, but PVE lists no task of {user} that created it since this run's \
                 create: {}; nothing was written to it",
                self.made_by(client, vm)
            )),
            Err(e) => ops::Look::Again(format!("reading the config of VM {vmid} on {node}: {e}")),
        }
    }
}

/// `POST /nodes/{node}/qemu` (`qmcreate`): creates the VM with this config (imports
/// included: then the task copies and reports progress), in `pool` if given. Sent at most
/// once ([`ops::dispatch_once`]): after a lost answer, only looked for, by `before`.
pub fn create(
    client: &Client,
    vm: &Vm,
    config: &[(String, String)],
    pool: Option<&str>,
    before: &CreatesBefore,
) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![("vmid".into(), vm.vmid.to_string())];
    params.extend(config.iter().cloned());
    if let Some(pool) = pool {
        params.push(("pool".into(), pool.to_string()));
    }
    let path = Node::new(&vm.node).qemu();
    let mut quiet_since = None;
    let sent = ops::dispatch_once(client, Method::Post, &path, &params, || {
        before.look(client, vm, &mut quiet_since)
    })?;
    Ok(match sent {
        ops::Dispatched::Task(upid) => Dispatched::Task(Task {
            upid,
            reports_progress: imports(config),
        }),
        ops::Dispatched::Done => Dispatched::Done,
    })
}

/// What a clone makes (`POST …/{vmid}/clone`).
#[derive(Clone, Debug, Default)]
pub struct CloneRequest<'a> {
    pub newid: u32,
    pub name: Option<&'a str>,
    /// The node the clone goes to, when not the source's.
    pub target: Option<&'a str>,
    /// `None`: PVE's default (linked from a template, full otherwise).
    pub full: Option<bool>,
    /// Whether the source is a template (what `full`'s default depends on).
    pub source_is_template: bool,
    pub storage: Option<&'a str>,
    pub snapname: Option<&'a str>,
    pub pool: Option<&'a str>,
}

/// `POST …/{vmid}/clone` (`qmclone`, its UPID carrying the source's id). A full clone copies
/// every disk and reports progress as an import does. Parallel clones of one template share
/// the source's id in their UPIDs, so a lost answer cannot be matched to its task: it is not
/// looked for.
pub fn clone(client: &Client, source: &Vm, request: &CloneRequest) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![("newid".into(), request.newid.to_string())];
    let optional = [
        ("name", request.name.map(str::to_string)),
        ("target", request.target.map(str::to_string)),
        ("full", request.full.map(flag)),
        ("storage", request.storage.map(str::to_string)),
        ("snapname", request.snapname.map(str::to_string)),
        ("pool", request.pool.map(str::to_string)),
    ];
    params.extend(
        optional
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_string(), value?))),
    );
    let copies = request.full.unwrap_or(!request.source_is_template);
    let path = source.path().clone_vm();
    dispatch(client, Method::Post, &path, &params, copies, Recover::Never)
}

/// Where and how a VM moves (`POST …/migrate`).
#[derive(Clone, Debug)]
pub struct MigrateRequest<'a> {
    pub target: &'a str,
    /// Maps every local disk to this storage on the target (`targetstorage`); `None` keeps
    /// each on the storage of the same name.
    pub target_storage: Option<&'a str>,
}

/// `POST …/migrate` (`qmigrate`): moves the VM to `target`. A running VM migrates live
/// (`online`), a stopped one offline (PVE ignores `online` then, API2/Qemu.pm migrate_vm);
/// local disks go with it (`with-local-disks`: mirrored while it runs, copied with
/// `storage_migrate` when stopped), and their copy reports progress.
pub fn migrate(client: &Client, vm: &Vm, request: &MigrateRequest) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![
        ("target".into(), request.target.to_string()),
        ("online".into(), flag(true)),
        ("with-local-disks".into(), flag(true)),
    ];
    if let Some(storage) = request.target_storage {
        params.push(("targetstorage".into(), storage.to_string()));
    }
    let path = vm.path().migrate();
    dispatch(
        client,
        Method::Post,
        &path,
        &params,
        true,
        vm.recover(TaskType::Migrate),
    )
}

/// `POST …/config` (`qmconfig`): sets these keys (new disks import or allocate inside the
/// task), against the config read (`digest`), so a change made meanwhile is refused.
pub fn update_config(
    client: &Client,
    vm: &Vm,
    set: &[(String, String)],
    digest: Option<&str>,
) -> Result<Dispatched, ApiError> {
    let mut params: Params = set.to_vec();
    if let Some(digest) = digest {
        params.push(("digest".into(), digest.to_string()));
    }
    let path = vm.path().config();
    let recover = vm.recover(TaskType::Config);
    dispatch(client, Method::Post, &path, &params, imports(set), recover)
}

/// `PUT …/resize` (`resize`, PVE 8+): grows `disk` to `size` (PVE's size grammar, `20G`).
pub fn resize(client: &Client, vm: &Vm, disk: &str, size: &str) -> Result<Dispatched, ApiError> {
    let params: Params = vec![("disk".into(), disk.into()), ("size".into(), size.into())];
    let path = vm.path().resize();
    dispatch(
        client,
        Method::Put,
        &path,
        &params,
        false,
        vm.recover(TaskType::Resize),
    )
}

fn power(
    client: &Client,
    vm: &Vm,
    action: &str,
    params: &Params,
    task_type: TaskType,
) -> Result<Dispatched, ApiError> {
    let path = vm.path().power(action);
    dispatch(
        client,
        Method::Post,
        &path,
        params,
        false,
        vm.recover(task_type),
    )
}

/// `POST …/status/start` (`qmstart`).
pub fn start(client: &Client, vm: &Vm) -> Result<Dispatched, ApiError> {
    power(client, vm, "start", &Vec::new(), TaskType::Start)
}

/// `POST …/status/stop` (`qmstop`).
pub fn stop(client: &Client, vm: &Vm) -> Result<Dispatched, ApiError> {
    power(client, vm, "stop", &Vec::new(), TaskType::Stop)
}

/// `POST …/status/reboot` (`qmreboot`).
pub fn reboot(client: &Client, vm: &Vm) -> Result<Dispatched, ApiError> {
    power(client, vm, "reboot", &Vec::new(), TaskType::Reboot)
}

/// `POST …/status/shutdown` (`qmshutdown`): a clean shutdown within `timeout` seconds, then
/// (with `force`) a stop.
pub fn shutdown(
    client: &Client,
    vm: &Vm,
    timeout: u64,
    force: bool,
) -> Result<Dispatched, ApiError> {
    let params: Params = vec![
        ("timeout".into(), timeout.to_string()),
        ("forceStop".into(), flag(force)),
    ];
    power(client, vm, "shutdown", &params, TaskType::Shutdown)
}

/// `DELETE /nodes/{node}/qemu/{vmid}` (`qmdestroy`): removes the VM and its disks, those
/// not referenced in its config too; `purge` also removes it from backup jobs, HA and
/// replication.
pub fn destroy(client: &Client, vm: &Vm, purge: bool) -> Result<Dispatched, ApiError> {
    let params: Params = vec![
        ("purge".into(), flag(purge)),
        ("destroy-unreferenced-disks".into(), "1".into()),
    ];
    let path = vm.path();
    dispatch(
        client,
        Method::Delete,
        path.path(),
        &params,
        false,
        vm.recover(TaskType::Destroy),
    )
}

/// `POST …/template` (`qmtemplate`): the disks become base volumes, `template: 1`.
pub fn template(client: &Client, vm: &Vm) -> Result<Dispatched, ApiError> {
    let path = vm.path().template();
    dispatch(
        client,
        Method::Post,
        &path,
        &Vec::new(),
        false,
        vm.recover(TaskType::Template),
    )
}
