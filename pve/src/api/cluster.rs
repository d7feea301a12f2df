//! The cluster (pve-manager API2/Cluster.pm): its guests and a free vmid.

use crate::answers::{Resource, VmResource, Vmid, lenient_list};
use crate::client::{Client, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths;

/// A VM as the cluster lists it. Its `name` comes from pvestatd and lags up to 10 s behind
/// the config (pve-manager API2Tools.pm, extract_vm_stats), as does its power state; its
/// lock is read from the config at once (API2/Cluster.pm, resources,
/// `get_guest_config_properties`), so a create in flight shows as one at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedVm {
    pub vmid: Vmid,
    pub node: String,
    /// Empty when pvestatd has not seen one yet.
    pub name: String,
    /// `lock: create`: a create (or a killed create's leftover) holds the VM.
    pub creating: bool,
}

impl ListedVm {
    /// Whether the listing shows no name of the VM's own: none yet (pvestatd has not seen the
    /// VM), or the `VM <vmid>` that qemu-server's vmstatus gives a VM whose config has none (a
    /// create in flight once pvestatd has seen it: its name is written at its end).
    pub fn unnamed(&self) -> bool {
        self.name.is_empty() || self.name == format!("VM {}", self.vmid)
    }
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
            creating: r.lock.as_deref() == Some("create"),
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

/// How far above the lowest free vmid [`spread_vmid`] places a new VM: parallel runs that
/// each ask `nextid` get the same answer (PVE reserves nothing), so each picks its own spot
/// in the next 1,000 ids, by its VM's name; 50 runs at once then rarely pick the same one.
pub const VMID_SPREAD: u32 = 1000;

/// PVE's default upper end of automatic ids (`datacenter.cfg` `next-id`: upper 1,000,000,
/// pve-manager API2/Cluster.pm, nextid).
const VMID_UPPER: u32 = 1_000_000;

/// The vmid a run creates its VM `name` with: the lowest free id PVE gave (`nextid`, which
/// keeps to `datacenter.cfg`'s `next-id` range) plus an offset of the name's hash (try
/// `attempt` hashes again), moved up past the ids `taken` (the cluster's listed VMs), as
/// bpg's terraform provider spreads its `random_vm_ids`. Two runs for one name pick the same
/// id, so PVE's create lock decides between them; runs for different names rarely meet.
pub fn spread_vmid(lowest_free: Vmid, taken: &[Vmid], name: &str, attempt: u32) -> Vmid {
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes().chain(attempt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let offset = (hash % u64::from(VMID_SPREAD)) as u32;
    let mut candidate = lowest_free.saturating_add(offset);
    while taken.contains(&candidate) {
        candidate = candidate.saturating_add(1);
    }
    if candidate >= VMID_UPPER {
        lowest_free
    } else {
        candidate
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_listed_as_vm_and_its_id_has_no_name_of_its_own() {
        let listed = |name: &str| ListedVm {
            vmid: 123,
            node: "pve1".into(),
            name: name.into(),
            creating: true,
        };
        assert!(listed("").unnamed());
        assert!(
            listed("VM 123").unnamed(),
            "vmstatus's name for a config without one"
        );
        assert!(!listed("VM 124").unnamed());
        assert!(!listed("web").unnamed());
    }

    #[test]
    fn spread_ids_are_stable_per_name_free_and_differ_between_names() {
        let first = spread_vmid(100, &[], "web-1", 0);
        assert_eq!(first, spread_vmid(100, &[], "web-1", 0), "one name, one id");
        assert!((100..100 + VMID_SPREAD).contains(&first));
        assert_ne!(
            first,
            spread_vmid(100, &[], "web-1", 1),
            "another try, another id"
        );
        assert_eq!(
            spread_vmid(100, &[first], "web-1", 0),
            first + 1,
            "a taken id is stepped over"
        );
        let ids: std::collections::BTreeSet<Vmid> = (0..50)
            .map(|host| spread_vmid(100, &[], &format!("vm{host}"), 0))
            .collect();
        assert!(
            ids.len() >= 45,
            "fifty names rarely share an id: {}",
            ids.len()
        );
        assert_eq!(
            spread_vmid(999_999, &[], "web-1", 0),
            999_999,
            "past PVE's upper end, the lowest free id"
        );
    }
}
