//! The cluster (pve-manager API2/Cluster.pm): its guests and a free vmid.

use crate::answers::{Resource, VmResource, Vmid, lenient_list};
use crate::client::{Client, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths;

/// A VM as the cluster lists it. Its `name` comes from pvestatd and lags up to 10 s behind
/// the config (pve-manager API2Tools.pm, extract_vm_stats), as does its power state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedVm {
    pub vmid: Vmid,
    pub node: String,
    /// Empty when pvestatd has not seen one yet.
    pub name: String,
}

/// `GET /cluster/resources?type=vm`, its QEMU VMs (a read).
pub fn vms(client: &Client) -> Result<Vec<ListedVm>, ApiError> {
    let params: Params = vec![("type".into(), "vm".into())];
    let answer = ops::read(client, paths::CLUSTER_RESOURCES, &params)?;
    Ok(lenient_list::<Resource>(answer)
        .into_iter()
        .filter(|r| r.kind == "qemu")
        .map(|r| ListedVm {
            vmid: r.vmid,
            node: r.node,
            name: r.name.unwrap_or_default(),
        })
        .collect())
}

/// `GET /cluster/nextid`: a free vmid, not reserved (a parallel client may take it first).
/// The schema says integer; real servers answer a string.
pub fn next_vmid(client: &Client) -> Result<u32, ApiError> {
    let answer = ops::read(client, paths::CLUSTER_NEXTID, &Vec::new())?;
    let shown = answer.to_string();
    serde_json::from_value::<NextId>(answer)
        .ok()
        .and_then(|NextId(id)| u32::try_from(id).ok())
        .ok_or_else(|| ApiError::NotPve {
            source: None,
            detail: format!("PVE answered an unexpected vmid: {shown}"),
        })
}

#[derive(serde::Deserialize)]
struct NextId(#[serde(deserialize_with = "crate::answers::number_or_string")] u64);

/// `GET /cluster/resources?type=vm`, its QEMU VMs with their pool, tags and status: every VM
/// of the cluster in one request (a read).
pub fn vm_resources(client: &Client) -> Result<Vec<VmResource>, ApiError> {
    let params: Params = vec![("type".into(), "vm".into())];
    let answer = ops::read(client, paths::CLUSTER_RESOURCES, &params)?;
    Ok(lenient_list::<VmResource>(answer)
        .into_iter()
        .filter(|r| r.kind == "qemu")
        .collect())
}
