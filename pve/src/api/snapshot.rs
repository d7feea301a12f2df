//! A VM's snapshots (qemu-server API2/Qemu.pm: snapshot_list, snapshot,
//! update_snapshot_config, rollback, delsnapshot): listing them, and each request that starts
//! a task (`qmsnapshot`, `qmrollback`, `qmdelsnapshot`, the VM's id in the UPID).

use super::qemu::Vm;
use super::{Dispatched, Recover, TaskType, dispatch, flag};
use crate::answers::{SnapshotListed, VmConfig, lenient, lenient_list};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;

/// `GET …/snapshot`: the VM's snapshots, `current` left out (a read).
pub fn list(client: &Client, vm: &Vm) -> Result<Vec<SnapshotListed>, ApiError> {
    let answer = ops::read(client, &vm.path().snapshots(), &Vec::new())?;
    Ok(lenient_list::<SnapshotListed>(answer)
        .into_iter()
        .filter(SnapshotListed::is_snapshot)
        .collect())
}

/// `GET …/snapshot/{snapname}/config`: the config the snapshot holds, its disks' volumes
/// among it (a read).
pub fn config(client: &Client, vm: &Vm, snapname: &str) -> Result<VmConfig, ApiError> {
    let path = format!("{}/config", vm.path().snapshot(snapname));
    ops::read(client, &path, &Vec::new()).map(lenient)
}

/// `POST …/snapshot` (`qmsnapshot`): takes `snapname`, with the guest's RAM when `vmstate`
/// and the VM runs.
pub fn create(
    client: &Client,
    vm: &Vm,
    snapname: &str,
    vmstate: bool,
    description: Option<&str>,
) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![("snapname".into(), snapname.into())];
    if vmstate {
        params.push(("vmstate".into(), flag(true)));
    }
    if let Some(d) = description {
        params.push(("description".into(), d.into()));
    }
    let recover = vm.recover(TaskType::Snapshot);
    dispatch(
        client,
        Method::Post,
        &vm.path().snapshots(),
        &params,
        false,
        recover,
    )
}

/// `PUT …/snapshot/{snapname}/config`: sets the snapshot's description (PVE answers `null`,
/// no task; sent again only when PVE surely did not act).
pub fn set_description(
    client: &Client,
    vm: &Vm,
    snapname: &str,
    description: &str,
) -> Result<Dispatched, ApiError> {
    let params: Params = vec![("description".into(), description.into())];
    let path = format!("{}/config", vm.path().snapshot(snapname));
    dispatch(client, Method::Put, &path, &params, false, Recover::Never)
}

/// `POST …/snapshot/{snapname}/rollback` (`qmrollback`): the VM is stopped, its disks and
/// config become the snapshot's; `start` starts it afterwards (a snapshot with RAM resumes
/// running anyway).
pub fn rollback(
    client: &Client,
    vm: &Vm,
    snapname: &str,
    start: bool,
) -> Result<Dispatched, ApiError> {
    let mut params: Params = Vec::new();
    if start {
        params.push(("start".into(), flag(true)));
    }
    let path = format!("{}/rollback", vm.path().snapshot(snapname));
    let recover = vm.recover(TaskType::Rollback);
    dispatch(client, Method::Post, &path, &params, false, recover)
}

/// `DELETE …/snapshot/{snapname}` (`qmdelsnapshot`).
pub fn delete(client: &Client, vm: &Vm, snapname: &str) -> Result<Dispatched, ApiError> {
    let path = vm.path().snapshot(snapname);
    let recover = vm.recover(TaskType::DeleteSnapshot);
    dispatch(client, Method::Delete, &path, &Vec::new(), false, recover)
}
