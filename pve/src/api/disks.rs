//! A VM's disks through their life after the create (qemu-server API2/Qemu.pm): moved to
//! another storage (`move_vm_disk`, a `qmmove` task) and detached or deleted (`unlink`,
//! update_vm with `delete` and `force`, answered within the request). Apart from
//! [`super::qemu`] so each concern keeps its own file.

use super::qemu::Vm;
use super::{Dispatched, Recover, TaskType, dispatch, flag};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;

/// A disk moved to another storage (`POST …/move_disk`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskMove<'a> {
    /// The drive (`scsi0`, `virtio1`, `unused0`).
    pub disk: &'a str,
    /// The target storage.
    pub storage: &'a str,
    /// The target format, when it changes (PVE makes the storage's default where that cannot
    /// hold it).
    pub format: Option<&'a str>,
    /// Whether the source volume is freed after the copy (`delete=1`); else PVE keeps it as
    /// `unusedN`.
    pub delete_source: bool,
    /// The config the move was planned on (`digest`): PVE refuses it when the VM changed.
    pub digest: Option<&'a str>,
}

/// `POST …/move_disk` (`qmmove`): copies the disk to `storage`, online (a drive mirror) when
/// the VM runs and offline (`qemu-img convert`) otherwise, PVE deciding which; the copy
/// reports progress. A lost answer is recovered by the VM's running `qmmove`.
pub fn move_disk(client: &Client, vm: &Vm, request: &DiskMove) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![
        ("disk".into(), request.disk.to_string()),
        ("storage".into(), request.storage.to_string()),
        ("delete".into(), flag(request.delete_source)),
    ];
    if let Some(format) = request.format {
        params.push(("format".into(), format.to_string()));
    }
    if let Some(digest) = request.digest {
        params.push(("digest".into(), digest.to_string()));
    }
    let path = vm.path().move_disk();
    dispatch(
        client,
        Method::Post,
        &path,
        &params,
        true,
        vm.recover(TaskType::MoveDisk),
    )
}

/// `PUT …/unlink` with `force=1`: the drives in `idlist` are taken off the VM and their
/// volumes the VM owns freed (`unusedN` entries too); PVE answers `null`, no task. On a
/// running VM a drive it cannot unplug at once is deleted when the pending change applies.
pub fn unlink(client: &Client, vm: &Vm, idlist: &[String]) -> Result<Dispatched, ApiError> {
    let params: Params = vec![
        ("idlist".into(), idlist.join(",")),
        ("force".into(), flag(true)),
    ];
    let path = vm.path().unlink();
    dispatch(client, Method::Put, &path, &params, false, Recover::Never)
}
