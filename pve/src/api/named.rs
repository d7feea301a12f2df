//! Finding VMs by name, the one place both the `vm` and `snapshot` modules do it: the
//! cluster listing (`/cluster/resources`), whose names come from pvestatd and lag up to 10 s
//! behind the configs (pve-manager API2Tools.pm, extract_vm_stats), confirmed by each node's
//! own list (`GET /nodes/{node}/qemu`, qemu-server QemuServer.pm vmstatus, which reads the
//! configs at once: a VM without a name there is `VM <vmid>`, a create in progress also has
//! `lock: create`).

use std::collections::BTreeMap;
use std::fmt;

use super::cluster::ListedVm;
use super::qemu;
use crate::answers::Vmid;
use crate::client::Client;
use crate::error::ApiError;

/// Which nodes' own lists confirm the cluster listing's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confirm {
    /// Every node with a listed VM: a VM renamed a moment ago is found by its new name (one
    /// request per node).
    EveryNode,
    /// Only the nodes with a VM pvestatd has not named yet (a VM just created, a create in
    /// flight): no request at all when every listed VM has a name.
    Unnamed,
}

/// VMs by name: those that carry it, and creates in progress whose name shows only at their
/// end (qemu-server's create_vm writes it last). Each is (vmid, node), in the listing's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub carriers: Vec<(Vmid, String)>,
    pub in_flight: Vec<(Vmid, String)>,
}

/// A node's list that could not be read: the node, and PVE's answer (its
/// [`std::error::Error::source`]).
#[derive(Debug)]
pub struct NodeListFailed {
    pub node: String,
    pub error: ApiError,
}

impl fmt::Display for NodeListFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "listing the VMs on {}", self.node)
    }
}

impl std::error::Error for NodeListFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The VMs of `listed` (the cluster listing, [`super::cluster::vms`]) that carry `name`, with
/// their names confirmed on the nodes `confirm` says, and the creates in flight whose name is
/// not known yet. Each node's list is a read.
pub fn named(
    client: &Client,
    name: &str,
    listed: Vec<ListedVm>,
    confirm: Confirm,
) -> Result<Named, NodeListFailed> {
    let mut fresh: BTreeMap<Vmid, (String, bool)> = BTreeMap::new();
    let mut nodes: Vec<&str> = listed
        .iter()
        .filter(|vm| confirm == Confirm::EveryNode || vm.name.is_empty())
        .map(|vm| vm.node.as_str())
        .collect();
    nodes.sort();
    nodes.dedup();
    for node in nodes {
        let on_node = qemu::list(client, node).map_err(|error| NodeListFailed {
            node: node.to_string(),
            error,
        })?;
        for vm in on_node {
            let creating = vm.lock.as_deref() == Some("create");
            fresh.insert(vm.vmid, (vm.name.unwrap_or_default(), creating));
        }
    }
    Ok(carrying(name, listed, &fresh))
}

/// The pure part of [`named`]: `fresh` is each confirmed VM's (name, whether a create holds
/// it); a VM not confirmed keeps its listed name.
fn carrying(name: &str, listed: Vec<ListedVm>, fresh: &BTreeMap<Vmid, (String, bool)>) -> Named {
    let mut out = Named::default();
    for ListedVm {
        vmid,
        node,
        name: listed_name,
    } in listed
    {
        let (current_name, creating) = match fresh.get(&vmid) {
            Some((current, creating)) => (current.as_str(), *creating),
            None => (listed_name.as_str(), false),
        };
        if current_name == name {
            out.carriers.push((vmid, node));
        } else if creating && current_name == format!("VM {vmid}") {
            out.in_flight.push((vmid, node));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(vmid: Vmid, node: &str, name: &str) -> ListedVm {
        ListedVm {
            vmid,
            node: node.into(),
            name: name.into(),
        }
    }

    #[test]
    fn names_confirmed_on_their_node_win_over_the_listing() {
        let cluster = vec![
            listed(100, "pve1", "web"),
            listed(101, "pve1", "old-name"),
            listed(102, "pve2", ""),
            listed(103, "pve2", ""),
            listed(104, "pve2", "web"),
        ];
        let fresh: BTreeMap<Vmid, (String, bool)> = [
            (101, ("web".to_string(), false)),
            (102, ("VM 102".to_string(), true)),
            (103, ("db".to_string(), false)),
        ]
        .into();
        let named = carrying("web", cluster, &fresh);
        assert_eq!(
            named.carriers,
            [
                (100, "pve1".to_string()),
                (101, "pve1".to_string()),
                (104, "pve2".to_string())
            ]
        );
        assert_eq!(named.in_flight, [(102, "pve2".to_string())]);
        let none = carrying("web", vec![listed(105, "pve1", "VM 105")], &BTreeMap::new());
        assert_eq!(
            none,
            Named::default(),
            "a create is told by its lock, not its name"
        );
    }
}
