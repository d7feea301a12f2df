//! A node's VMs (qemu-server API2/Qemu.pm, API2/Qemu/Agent.pm): listing and reading them,
//! and every request that changes one, each starting its task (`qmcreate`, `qmconfig`, …).

use super::{Dispatched, Recover, Task, TaskType, dispatch, flag, tasks};
use crate::answers::{
    GuestInterfaces, NodeVm, PendingConfig, PendingKey, VmConfig, VmStatus, Vmid, lenient,
    lenient_list,
};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths::{self, Node};
use crate::upid::Upid;

/// A VM on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vm {
    pub node: String,
    pub vmid: Vmid,
}

impl Vm {
    pub fn new(node: &str, vmid: Vmid) -> Vm {
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
pub fn imports(config: &[(String, String)]) -> bool {
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
pub fn pending_config(client: &Client, vm: &Vm) -> Result<PendingConfig, ApiError> {
    ops::read(client, &vm.path().pending(), &Vec::new())
        .map(|answer| PendingConfig::from_items(lenient_list(answer)))
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

/// `GET …/agent/network-get-interfaces`: the guest's interfaces as its agent reports them,
/// sent once (PVE answers `500 QEMU guest agent is not running` until the agent is up; the
/// caller decides). An answer of another shape reads as no interface.
pub fn agent_interfaces(client: &Client, vm: &Vm) -> Result<GuestInterfaces, ApiError> {
    client
        .get(&vm.path().agent("network-get-interfaces"), &Vec::new())
        .map(lenient)
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

/// `POST /nodes/{node}/qemu` (`qmcreate`): creates the VM with this config (imports
/// included: then the task copies and reports progress), in `pool` if given. Sent at most
/// once ([`ops::dispatch_once`]): after a lost answer, only looked for by `look` (the look of
/// `made::MadeBefore` listed for the new VM before the create).
pub fn create(
    client: &Client,
    vm: &Vm,
    config: &[(String, String)],
    pool: Option<&str>,
    look: impl FnMut() -> ops::Look,
) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![("vmid".into(), vm.vmid.to_string())];
    params.extend(config.iter().cloned());
    if let Some(pool) = pool {
        params.push(("pool".into(), pool.to_string()));
    }
    let path = Node::new(&vm.node).qemu();
    dispatch_made(client, &path, &params, imports(config), look)
}

/// A create or clone sent at most once ([`ops::dispatch_once`]), looked for by `look` after
/// a lost answer.
fn dispatch_made(
    client: &Client,
    path: &str,
    params: &Params,
    reports_progress: bool,
    look: impl FnMut() -> ops::Look,
) -> Result<Dispatched, ApiError> {
    Ok(
        match ops::dispatch_once(client, Method::Post, path, params, look)? {
            ops::Dispatched::Task(upid) => Dispatched::Task(Task {
                upid,
                reports_progress,
            }),
            ops::Dispatched::Done => Dispatched::Done,
        },
    )
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
/// every disk and reports progress as an import does. Sent at most once
/// ([`ops::dispatch_once`]), as a create is: after a lost answer, only looked for by `look`
/// (the look of `made::MadeBefore` listed for a clone of `source` to the new VM): parallel
/// clones of one template share the source's id in their UPIDs, so the run's is the new one
/// of its user whose log names `request.newid` (see the `made` module).
pub fn clone(
    client: &Client,
    source: &Vm,
    request: &CloneRequest,
    look: impl FnMut() -> ops::Look,
) -> Result<Dispatched, ApiError> {
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
    dispatch_made(client, &path, &params, copies, look)
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

/// The `qmigrate` the HA stack's LRM started for an HA-managed VM after a [`migrate`] was
/// handed to it ([`Task::handed_to_ha`]; pve-ha-manager Manager.pm, LRM.pm, Resources/PVEVM.pm
/// migrate, on the VM's node): the newest since `since` (the `hamigrate`'s start, epoch
/// seconds), or `None` while there is none. A read; a failure counts as none. Its copy reports
/// progress as a migration's does.
pub fn migration_by_ha(client: &Client, vm: &Vm, since: u64) -> Option<Task> {
    tasks::newest_since(client, &vm.node, vm.vmid, TaskType::Migrate, since).map(|upid| Task {
        upid,
        reports_progress: true,
    })
}

/// `POST …/config` (`qmconfig`): sets these keys (new disks import or allocate inside the
/// task), against the config read (`digest`), so a change made meanwhile is refused.
pub fn update_config(
    client: &Client,
    vm: &Vm,
    set: &[(String, String)],
    digest: Option<&str>,
) -> Result<Dispatched, ApiError> {
    // A new name (or none): no record of this controller's names the VM by its old one.
    let renames = set.iter().any(|(key, value)| {
        key == "name" || (key == "delete" && value.split(',').any(|deleted| deleted == "name"))
    });
    if renames
        && let Some(roster) = client.roster()
        && !client.read_only()
    {
        roster.forget(vm.vmid);
    }
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
    // Once asked to go, no record of this endpoint's roster names the VM any more (another
    // may take its id at once).
    if let Some(roster) = client.roster()
        && !client.read_only()
    {
        roster.forget(vm.vmid);
    }
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
